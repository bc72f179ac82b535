"""Downloading one model file from S3 as ranged GETs of its manifest's pieces, each piece hashed while it streams and
written at its offset: the file is never read back to be checked, no piece is held in memory, and the pieces of one
file are fetched and hashed on as many threads as the pool has.

A file is checked this way when the manifest lists its pieces' digests, or when it is no larger than one piece (its
whole-file digest is then its one piece's). A larger file from a manifest published before pieces existed has no
such digests: :func:`pieces_of` says so and the caller downloads it whole and hashes it after.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from botocore.exceptions import BotoCoreError
from urllib3.exceptions import HTTPError

from ..manifest import FileEntry

READ_BYTES = 1024 * 1024
PIECE_ATTEMPTS = 3  # a dropped connection mid-piece is retried; a wrong digest is not
# What a broken stream raises: botocore wraps urllib3's read timeouts and protocol errors, not all of them (a TLS
# error mid-body comes through as urllib3's SSLError), and a socket error is an OSError.
BROKEN_STREAM = (BotoCoreError, HTTPError, OSError)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


@dataclass(frozen=True)
class Piece:
    index: int
    start: int
    end: int  # exclusive
    sha256: str


def pieces_of(entry: FileEntry, piece_bytes: int) -> list[Piece] | None:
    """The ranges to fetch, each with the digest it must have; None when the manifest has no digests for the
    pieces of a file larger than one piece."""
    if entry.pieces:
        return [
            Piece(i, i * piece_bytes, min(entry.size, (i + 1) * piece_bytes), digest)
            for i, digest in enumerate(entry.pieces)
        ]
    if entry.size <= piece_bytes:
        return [Piece(0, 0, entry.size, entry.sha256)]
    return None


class PieceError(Exception):
    """A piece that could not be fetched, or that does not match its digest."""


class WriteError(Exception):
    """The local file could not be written (a full volume): no retry, and not the object's fault."""


class SizeMismatch(PieceError):
    """The object in S3 is not the size the manifest gives: every piece could match, the file would not."""


class StreamedFile:
    """``dest``'s ``.partial`` sibling, created at its full size; pieces write into it from any thread, and
    :meth:`finish` renames it into place or removes it."""

    def __init__(self, dest: Path, size: int):
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.dest = dest
        self.partial = dest.with_name(dest.name + ".partial")
        self.size = size
        self._fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.posix_fallocate(self._fd, 0, size)  # a full volume fails here, not as a short write later
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                os.close(self._fd)
                self.partial.unlink(missing_ok=True)
                raise
            os.ftruncate(self._fd, size)

    def fetch(self, client, bucket: str, key: str, piece: Piece) -> None:
        """Fetch, hash and write one piece, retrying a broken stream; raise PieceError on a wrong digest or size."""
        if piece.start == piece.end:  # an empty file: nothing to GET, but it must exist and be empty
            head = client.head_object(Bucket=bucket, Key=key)
            if head.get("ContentLength") != 0:
                raise SizeMismatch(f"size {head.get('ContentLength')} != 0 in the manifest")
            return self._check(piece, hashlib.sha256())
        # A file of one piece is named alone; a piece of a larger one also by its byte range.
        where = (
            f"piece {piece.index} (bytes {piece.start}-{piece.end - 1}): "
            if self.size > piece.end - piece.start
            else ""
        )
        for attempt in range(1, PIECE_ATTEMPTS + 1):
            try:
                return self._fetch_once(client, bucket, key, piece)
            except BROKEN_STREAM as exc:
                if attempt == PIECE_ATTEMPTS:
                    raise PieceError(f"{where}{exc}") from exc
            except SizeMismatch:
                raise
            except PieceError as exc:
                raise PieceError(f"{where}{exc}") from None

    def _fetch_once(self, client, bucket: str, key: str, piece: Piece) -> None:
        response = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={piece.start}-{piece.end - 1}")
        match = _CONTENT_RANGE.fullmatch(response.get("ContentRange", ""))
        if match is None or int(match[3]) != self.size:
            total = match[3] if match else "unknown"
            raise SizeMismatch(f"size {total} != {self.size} in the manifest")
        digest = hashlib.sha256()
        offset = piece.start
        body = response["Body"]
        try:
            while offset < piece.end and (chunk := body.read(min(READ_BYTES, piece.end - offset))):
                digest.update(chunk)
                self._write(chunk, offset)
                offset += len(chunk)
        finally:
            body.close()
        if offset != piece.end:
            raise ConnectionError(f"the stream ended at byte {offset}")
        self._check(piece, digest)

    def _write(self, data: bytes, offset: int) -> None:
        """All of ``data`` at ``offset``: a short write is continued, a failed one is a WriteError (not retried)."""
        view = memoryview(data)
        try:
            while view:
                written = os.pwrite(self._fd, view, offset)
                if written == 0:
                    raise OSError(errno.ENOSPC, f"no byte of {len(view)} written at {offset}")
                view, offset = view[written:], offset + written
        except OSError as exc:
            raise WriteError(f"cannot write {self.partial}: {exc}") from exc

    @staticmethod
    def _check(piece: Piece, digest) -> None:
        if digest.hexdigest() != piece.sha256:
            raise PieceError(f"sha256 {digest.hexdigest()} != {piece.sha256} in the manifest")

    def finish(self, ok: bool) -> None:
        os.close(self._fd)
        if ok:
            os.replace(self.partial, self.dest)
        else:
            self.partial.unlink(missing_ok=True)
