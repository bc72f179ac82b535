"""A read-only S3 stand-in for benchmarks: GetObject (with Range) and HeadObject, path-style, for the files under a
directory (``<root>/<bucket>/<key>``), sent with sendfile. moto reads a whole object for every ranged GET, so a
download's time there grows with its number of requests; this serves a range at the disk's (page cache's) rate.

``python -m bench.range_server ROOT --port N``
"""

from __future__ import annotations

import argparse
import email.utils
import hashlib
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


def handler_for(root: Path) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
            pass

        def _object(self) -> Path | None:
            path = Path(unquote(urlsplit(self.path).path).lstrip("/"))
            target = (root / path).resolve()
            return target if target.is_file() and root.resolve() in target.parents else None

        def _headers(self, status: int, length: int, target: Path, extra: dict[str, str]) -> None:
            self.send_response(status)
            stat = target.stat()
            etag = hashlib.md5(f"{target}{stat.st_mtime_ns}{stat.st_size}".encode(), usedforsecurity=False).hexdigest()
            for name, value in {
                "Content-Length": str(length),
                "ETag": f'"{etag}"',
                "Accept-Ranges": "bytes",
                "Last-Modified": email.utils.formatdate(stat.st_mtime, usegmt=True),
                "Content-Type": "binary/octet-stream",
                **extra,
            }.items():
                self.send_header(name, value)
            self.end_headers()

        def _not_found(self) -> None:
            body = b"<Error><Code>NoSuchKey</Code><Message>not found</Message></Error>"
            self.send_response(404)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(body)

        def do_HEAD(self):
            target = self._object()
            if target is None:
                return self._not_found()
            self._headers(200, target.stat().st_size, target, {})

        def do_GET(self):
            target = self._object()
            if target is None:
                return self._not_found()
            size = target.stat().st_size
            match = _RANGE.fullmatch(self.headers.get("Range", ""))
            start, end = 0, size - 1
            if match:
                start, end = int(match[1]), min(size - 1, int(match[2]) if match[2] else size - 1)
                self._headers(206, end - start + 1, target, {"Content-Range": f"bytes {start}-{end}/{size}"})
            else:
                self._headers(200, size, target, {})
            self.wfile.flush()
            with open(target, "rb") as f:
                self.connection.sendfile(f, start, end - start + 1)

    return Handler


def serve(root: Path, port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(root))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("root", type=Path)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    serve(args.root, args.port).serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
