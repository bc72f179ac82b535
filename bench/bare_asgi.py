"""The HTTP ceiling: a bare ASGI app on the server's own stack (uvicorn + httptools + uvloop) that reads the body
and answers a constant JSON document. `python -m bench.bare_asgi --port N`."""

from __future__ import annotations

import argparse

import orjson
import uvicorn

from .models import NULL_PREDICTION

_BODY = orjson.dumps({"model": "bench", "version": "1", "prediction": NULL_PREDICTION})
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_BODY)).encode())]


async def app(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": _BODY})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
        server_header=False,
        date_header=False,
    )


if __name__ == "__main__":
    main()
