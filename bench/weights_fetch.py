"""Weights from S3 to a checked file: the bundled server's fetch, each piece hashed as it streams
(inference_server.engine.piece_fetch), against boto3's own transfer manager (s3transfer's ``download_file``, the AWS
CLI's engine, given the same 16 connections and 16 MiB ranges) alone and followed by the SHA-256 read-back the server
did before (timed on its own: what streaming removes). One object, one S3 stand-in (bench.range_server, its own process,
serving ranges from the page cache with sendfile; moto reads the whole object for every ranged GET), the three
alternating, ``repeats`` times each.

``python -m bench.weights_fetch [--mib 1024] [--repeats 3]`` prints the JSON. On a real instance S3 and the volume
set the pace; here the stand-in shares the cores, so the figures are ratios on this endpoint, not rates to expect on
AWS.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from .processes import free_port


def _endpoint(root: Path, port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "bench.range_server", str(root), "--port", str(port)])
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("the S3 stand-in did not start") from None
            time.sleep(0.1)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--mib", type=int, default=1024, help="the weights file's size (default 1024 MiB)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    port = free_port()
    os.environ.update(
        {
            "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    from boto3.s3.transfer import TransferConfig

    from inference_server.engine.artifacts import DOWNLOAD_WORKERS, fetch_model, s3_client
    from inference_server.manifest import MANIFEST_FILE, PIECE_BYTES, build_manifest

    work = Path(tempfile.mkdtemp(prefix="weights-fetch-"))
    version = work / "s3" / "bench" / "models" / "weights" / "1"
    version.mkdir(parents=True)
    with open(version / "model.safetensors", "wb") as f:
        for _ in range(args.mib):
            f.write(os.urandom(1024 * 1024))
    manifest = build_manifest(version, "weights", "1")
    (version / MANIFEST_FILE).write_bytes(manifest.to_json())
    expected = manifest.files["model.safetensors"].sha256
    uri = "s3://bench/models/weights/1/"
    server = _endpoint(work / "s3", port)
    try:
        client = s3_client()

        same = TransferConfig(max_concurrency=DOWNLOAD_WORKERS, multipart_chunksize=PIECE_BYTES)

        def download_only(dest: Path) -> None:
            client.download_file("bench", "models/weights/1/model.safetensors", str(dest / "w"), Config=same)

        def download_then_hash(dest: Path) -> None:
            download_only(dest)
            started = time.perf_counter()
            assert _sha256(dest / "w") == expected
            read_back.append(time.perf_counter() - started)

        def streamed(dest: Path) -> None:
            fetch_model(uri, dest, require_manifest=True)

        read_back: list[float] = []
        systems = {"download_only": download_only, "download_then_hash": download_then_hash, "ours_streamed": streamed}
        seconds: dict[str, list[float]] = {name: [] for name in systems}
        for repeat in range(args.repeats):
            for name, run in systems.items():
                dest = work / f"{name}-{repeat}"
                dest.mkdir()
                started = time.perf_counter()
                run(dest)
                seconds[name].append(time.perf_counter() - started)
                shutil.rmtree(dest)
    finally:
        server.kill()
        shutil.rmtree(work, ignore_errors=True)
    size = args.mib * 1024 * 1024
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(
        orjson.dumps(
            {
                "mib": args.mib,
                "repeats": args.repeats,
                "seconds": seconds,
                "gb_per_s": {name: round(size / s / 1e9, 3) for name, s in median.items()},
                "read_back_hash_seconds": read_back,
                "ours_vs_download_then_hash": round(median["download_then_hash"] / median["ours_streamed"], 2),
                "ours_vs_download_only": round(median["download_only"] / median["ours_streamed"], 2),
                "command": f"python -m bench.weights_fetch --mib {args.mib} --repeats {args.repeats}",
            },
            option=orjson.OPT_INDENT_2,
        ).decode()
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
