"""One JSON line per inference request of an LLM server with LoRA adapters, for CloudWatch Logs Insights: the
adapter (the body's ``model``), the status and the time to the end of the response, streamed or not.

It runs inside the vLLM image, which has none of our packages: standard library only, and the task writes this
file's text to the scratch volume, on the server's PYTHONPATH, before vLLM starts (``--middleware
adapter_request_log.AdapterRequestLog``; vLLM adds a class with ``app.add_middleware``). It never breaks a request:
a body that is not JSON, has no ``model`` or is over ``MAX_BODY_BYTES`` passes unlogged, and any error of its own is
swallowed. Fields are plain properties (no EMF metric, no dimension per adapter): docs/lora-adapters.md."""

from __future__ import annotations

import json
import sys
import time

MESSAGE = "adapter request"
# The OpenAI API's routes; POSTs elsewhere (vLLM's /invocations, /tokenize) are not the clients' inference routes.
ROUTE_PREFIX = "/v1/"
# Larger bodies (long prompts) are passed on as they come, unlogged, rather than held in memory.
MAX_BODY_BYTES = 1024 * 1024


class AdapterRequestLog:
    """A pure ASGI middleware: buffers a POST's body up to ``MAX_BODY_BYTES``, replays it to the app unchanged, and
    after the app returned (the response's last byte sent) writes the line to stdout."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if not _is_inference(scope):
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        buffered: list = []
        model = None
        try:
            model = await _read_model(receive, buffered)
        except Exception:
            model = None
        status: list = [None]

        async def replay():
            if buffered:
                return buffered.pop(0)
            return await receive()

        async def send_noting_status(message) -> None:
            try:
                if message.get("type") == "http.response.start":
                    status[0] = message.get("status")
            except Exception:
                pass
            await send(message)

        try:
            await self.app(scope, replay, send_noting_status)
        finally:
            if model is not None:
                _write_line(model, status[0], started)


def _is_inference(scope) -> bool:
    try:
        return (
            scope.get("type") == "http"
            and scope.get("method") == "POST"
            and str(scope.get("path", "")).startswith(ROUTE_PREFIX)
        )
    except Exception:
        return False


async def _read_model(receive, buffered: list) -> str | None:
    """The body's ``model``, reading (and keeping in ``buffered``) the request's messages until the body's end, a
    disconnect or ``MAX_BODY_BYTES``; None where it has none."""
    body = b""
    while True:
        message = await receive()
        buffered.append(message)
        if message.get("type") != "http.request":
            return None
        body += message.get("body", b"")
        if len(body) > MAX_BODY_BYTES:
            return None
        if not message.get("more_body", False):
            break
    try:
        model = json.loads(body).get("model")
    except Exception:
        return None
    return model if isinstance(model, str) and model else None


def _write_line(model: str, status, started: float) -> None:
    try:
        line = {
            "message": MESSAGE,
            "AdapterName": model,
            # No response started: the app raised, and Starlette's outermost middleware answers 500.
            "StatusCode": status if isinstance(status, int) else 500,
            "LatencyMs": round((time.monotonic() - started) * 1000, 1),
        }
        sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
        sys.stdout.flush()
    except Exception:
        pass
