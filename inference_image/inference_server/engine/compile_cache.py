"""torch.compile's cache kept beside the model: the first task that compiles a model version on a kind of device saves
Inductor's cache directory (generated kernels and the compiled C++ or Triton binaries, keyed by Inductor itself), the
next task on that kind of device restores it before it compiles and skips the code generation and the C compiler.

The archive is one object per (torch version, Python, device kind): g5's A10G (sm86) and g4dn's T4 (sm75) differ. An
archive that does not match (another torch, another CPU) only misses Inductor's own keys: the task compiles afresh,
as without one. torch's portable "mega-cache" (torch.compiler.save_cache_artifacts) was tried first and does not pay
on the CPU: it carries the kernels' source, not the compiled shared objects, so every start ran the C++ compiler
again (docs/server.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from .artifacts import is_not_found, parse_s3_uri, s3_client, s3_error_code

log = logging.getLogger(__name__)
# Where Inductor and Triton keep their caches (__main__.confine_library_caches points both into MODEL_CACHE_DIR).
CACHE_VARIABLES = {"torchinductor": "TORCHINDUCTOR_CACHE_DIR", "triton": "TRITON_CACHE_DIR"}
# An archive larger than this is neither saved nor restored, nor one that unpacks to more than MAX_UNPACKED_BYTES (the
# scratch volume holds the model too): a cache is never worth a slow or failed start.
MAX_ARCHIVE_BYTES = 2 * 1024**3
MAX_UNPACKED_BYTES = 8 * 1024**3
MAX_MEMBERS = 200_000  # files and directories: MiniLM's cache has 330
CHUNK_BYTES = 1024**2


def cache_key(torch_version: str, device_kind: str, settings: Mapping[str, object]) -> str:
    """The archive's name: one per torch version, Python, device kind and the settings that shape what compiles
    (dtype, batch and length buckets): a service with other settings keeps its own archive."""
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    digest = hashlib.sha256(json.dumps(dict(settings), sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"torch-{torch_version.replace('+', '-')}-{python}-{device_kind}-{digest}.tar.gz"


def device_kind(device) -> str:
    """``cuda-sm86`` (an A10G), ``cuda-sm75`` (a T4), ``cpu-x86_64``."""
    import torch

    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"cuda-sm{major}{minor}"
    return f"{device.type}-{platform.machine()}"


def cache_directories(environ=os.environ) -> dict[str, Path]:
    """{name in the archive: directory} of the compile caches this process uses."""
    return {name: Path(environ[variable]) for name, variable in CACHE_VARIABLES.items() if environ.get(variable)}


def restore(uri: str, key: str, directories: dict[str, Path]) -> bool:
    """Unpack the archive ``key`` under ``uri`` into ``directories``; False when there is none or it cannot be used.
    Never raises: a cache only saves a compile, and the task compiles afresh without it."""
    try:
        return _restore(uri, key, directories)
    except Exception as exc:  # the scratch volume full, a cleanup that failed: still only a compile to redo
        log.warning(
            "compile cache unusable; compiling afresh", extra={"compile_cache": _where(uri, key), "error": str(exc)}
        )
        return False


def _restore(uri: str, key: str, directories: dict[str, Path]) -> bool:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="compile-cache-", ignore_cleanup_errors=True) as work:
        archive = Path(work) / "archive.tar.gz"
        try:
            _download(uri, key, archive)
        except FileNotFoundError:
            log.info(
                "no compile cache yet (or none this task may read); compiling afresh",
                extra={"compile_cache": _where(uri, key)},
            )
            return False
        except Exception as exc:
            log.warning(
                "compile cache unreadable; compiling afresh",
                extra={"compile_cache": _where(uri, key), "error": str(exc)},
            )
            return False
        size = archive.stat().st_size
        try:
            unpacked = Path(work) / "unpacked"
            with tarfile.open(archive, mode="r:gz") as members:
                members.extractall(unpacked, filter=_MemberFilter())
                _read_to_the_end(members.fileobj)
            archive.unlink()  # the volume holds the archive or the unpacked files, and then only the cache
            for name, directory in directories.items():
                if (unpacked / name).is_dir():
                    _move_into(unpacked / name, directory)
        except Exception as exc:
            for directory in directories.values():  # nothing half-copied for Inductor to load
                shutil.rmtree(directory, ignore_errors=True)
            log.warning(
                "compile cache unusable; compiling afresh", extra={"compile_cache": _where(uri, key), "error": str(exc)}
            )
            return False
    log.info(
        "compile cache restored",
        extra={"compile_cache": _where(uri, key), "bytes": size, "seconds": round(time.monotonic() - started, 3)},
    )
    return True


class _MemberFilter:
    """tarfile's "data" filter (no absolute paths, nothing outside the directory, no device files), and beyond it
    only plain files and directories (no links, no sparse files, which unpack small and copy large), at most
    MAX_MEMBERS of them and MAX_UNPACKED_BYTES in all."""

    def __init__(self) -> None:
        self.members = 0
        self.size = 0

    def __call__(self, member: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
        member = tarfile.data_filter(member, path)
        if not (member.isreg() or member.isdir()) or member.issparse():
            raise tarfile.FilterError(f"{member.name}: only plain files and directories belong in a compile cache")
        self.members += 1
        self.size += member.size
        if self.members > MAX_MEMBERS:
            raise tarfile.FilterError(f"more than {MAX_MEMBERS} members")
        if self.size > MAX_UNPACKED_BYTES:
            raise tarfile.FilterError(f"unpacks to more than {MAX_UNPACKED_BYTES} bytes")
        return member


def _move_into(source: Path, directory: Path) -> None:
    """``directory`` becomes ``source``: a rename on the same volume (TMPDIR is on the scratch volume in the task)."""
    if directory.is_dir() and any(directory.iterdir()):
        shutil.copytree(source, directory, dirs_exist_ok=True)  # something is there already: add to it
        return
    if directory.is_dir():
        directory.rmdir()
    directory.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(source, directory)


def _read_to_the_end(stream) -> None:
    """The gzip stream's CRC and length are checked at its end, which tarfile stops short of (at the archive's last
    block): a corrupt archive is refused, and its files removed, before anything loads them. What follows the
    archive's last block is bounded too."""
    trailing = 0
    while chunk := stream.read(CHUNK_BYTES):
        trailing += len(chunk)
        if trailing > MAX_UNPACKED_BYTES:
            raise ValueError(f"unpacks to more than {MAX_UNPACKED_BYTES} bytes")


def save(uri: str, key: str, directories: dict[str, Path]) -> bool:
    """Archive ``directories`` as ``key`` under ``uri`` unless another task saved it first; never raises."""
    try:
        with tempfile.TemporaryFile() as buffer:
            with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
                for name, directory in directories.items():
                    if directory.is_dir():
                        archive.add(directory, arcname=name)
            size = buffer.tell()
            if size > MAX_ARCHIVE_BYTES:
                log.warning("compile cache too large to keep", extra={"bytes": size, "limit": MAX_ARCHIVE_BYTES})
                return False
            buffer.seek(0)
            written = _write_once(uri, key, buffer)
    except Exception as exc:
        log.warning("compile cache not saved", extra={"compile_cache": _where(uri, key), "error": str(exc)})
        return False
    log.info(
        "compile cache saved" if written else "compile cache already saved by another task",
        extra={"compile_cache": _where(uri, key), "bytes": size},
    )
    return written


def _where(uri: str, key: str) -> str:
    return f"{uri.rstrip('/')}/{key}"


def _download(uri: str, key: str, into: Path) -> None:
    """Copy the archive to ``into``, at most MAX_ARCHIVE_BYTES; FileNotFoundError when there is none."""
    if not uri.startswith("s3://"):
        source = Path(uri) / key
        if source.stat().st_size > MAX_ARCHIVE_BYTES:
            raise ValueError(f"{source.stat().st_size} bytes, more than {MAX_ARCHIVE_BYTES}")
        shutil.copyfile(source, into)
        return
    from botocore.exceptions import ClientError

    bucket, prefix = parse_s3_uri(uri)
    client = s3_client(workers=1)
    try:
        head = client.head_object(Bucket=bucket, Key=prefix + key)
    except ClientError as exc:
        # A missing key answers 403, not 404, to a role without s3:ListBucket on it (HeadObject's documentation):
        # the task's list grant is conditioned on s3:prefix, which a HEAD does not carry.
        if is_not_found(exc) or s3_error_code(exc) in ("403", "AccessDenied"):
            raise FileNotFoundError(key) from None
        raise
    if head["ContentLength"] > MAX_ARCHIVE_BYTES:
        raise ValueError(f"{head['ContentLength']} bytes, more than {MAX_ARCHIVE_BYTES}")
    body = client.get_object(Bucket=bucket, Key=prefix + key, IfMatch=head["ETag"])["Body"]
    written = 0
    with contextlib.closing(body), into.open("wb") as out:
        for chunk in body.iter_chunks(CHUNK_BYTES):
            written += len(chunk)
            if written > MAX_ARCHIVE_BYTES:
                raise ValueError(f"more than {MAX_ARCHIVE_BYTES} bytes")
            out.write(chunk)


def _write_once(uri: str, key: str, body) -> bool:
    """Write ``key`` unless it exists (S3: a conditional PUT, so two tasks finishing together keep the first)."""
    if not uri.startswith("s3://"):
        target = Path(uri) / key
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{key}.") as partial:
            shutil.copyfileobj(body, partial)
            partial.flush()
            try:
                os.link(partial.name, target)  # whole or absent, and never over another task's
            except FileExistsError:
                return False
        return True
    from botocore.exceptions import ClientError

    bucket, prefix = parse_s3_uri(uri)
    try:
        s3_client(workers=1).put_object(Bucket=bucket, Key=prefix + key, Body=body, IfNoneMatch="*")
    except ClientError as exc:
        if s3_error_code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
            return False
        raise
    return True
