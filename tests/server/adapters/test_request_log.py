"""The request-log middleware vLLM runs (``--middleware adapter_request_log.AdapterRequestLog``) in front of a small
Starlette app: one JSON line per inference POST naming the body's model, its status and its time to the response's
end (streamed too); the app gets the body unchanged; what it cannot read, and its own errors, pass through."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from inference_server.adapters import request_log
from inference_server.adapters.request_log import AdapterRequestLog

STREAM_PAUSE_S = 0.2


async def echo(request: Request) -> PlainTextResponse:
    return PlainTextResponse(await request.body(), status_code=200)


async def stream(request: Request) -> StreamingResponse:
    await request.body()

    async def chunks():
        yield b"data: 1\n\n"
        await asyncio.sleep(STREAM_PAUSE_S)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(chunks(), media_type="text/event-stream")


async def missing(request: Request) -> JSONResponse:
    await request.body()
    return JSONResponse({"error": "no such adapter"}, status_code=404)


@pytest.fixture
def client():
    app = Starlette(
        routes=[
            Route("/v1/completions", echo, methods=["POST"]),
            Route("/v1/chat/completions", stream, methods=["POST"]),
            Route("/v1/embeddings", missing, methods=["POST"]),
            Route("/invocations", echo, methods=["POST"]),
        ]
    )
    app.add_middleware(AdapterRequestLog)  # as vLLM adds a class given to --middleware
    with TestClient(app) as test_client:
        yield test_client


def lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_a_json_body_names_its_adapter_and_reaches_the_app_unchanged(client, capsys):
    body = json.dumps({"model": "sql-lora", "prompt": "hi", "max_tokens": 4}).encode()
    response = client.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200 and response.content == body
    (line,) = lines(capsys)
    assert line["message"] == "adapter request" and line["AdapterName"] == "sql-lora"
    assert line["StatusCode"] == 200 and line["LatencyMs"] >= 0
    assert "_aws" not in line  # properties, no EMF metric


def test_a_streamed_response_is_timed_to_its_last_chunk(client, capsys):
    response = client.post("/v1/chat/completions", json={"model": "chat-lora", "stream": True})
    assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")
    (line,) = lines(capsys)
    assert line["AdapterName"] == "chat-lora" and line["LatencyMs"] >= STREAM_PAUSE_S * 1000


def test_an_error_status_is_logged(client, capsys):
    assert client.post("/v1/embeddings", json={"model": "gone"}).status_code == 404
    assert [(line["AdapterName"], line["StatusCode"]) for line in lines(capsys)] == [("gone", 404)]


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/completions", b"not json {"),
        ("/v1/completions", b'["a list"]'),
        ("/v1/completions", b'{"prompt": "no model"}'),
        ("/v1/completions", json.dumps({"model": "big", "prompt": "x" * request_log.MAX_BODY_BYTES}).encode()),
        ("/invocations", b'{"model": "not an openai route"}'),
    ],
)
def test_what_it_cannot_read_passes_untouched_and_unlogged(client, capsys, path, body):
    response = client.post(path, content=body)
    assert response.status_code == 200 and response.content == body
    assert lines(capsys) == []


def test_an_error_inside_it_passes_the_request_through(client, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("planted")

    monkeypatch.setattr(request_log.json, "dumps", broken)  # the body is read, the line's writing fails
    body = b'{"model": "sql-lora"}'
    response = client.post("/v1/completions", content=body)
    assert response.status_code == 200 and response.content == body
    assert lines(capsys) == []


def test_an_error_reading_the_model_still_serves_the_request(client, monkeypatch):
    async def broken(receive, buffered):
        buffered.append(await receive())
        raise RuntimeError("planted")

    monkeypatch.setattr(request_log, "_read_model", broken)
    body = b'{"model": "sql-lora"}'
    assert client.post("/v1/completions", content=body).content == body


def test_it_imports_nothing_but_the_standard_library():
    source = open(request_log.__file__).read()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "json", "sys", "time"}
