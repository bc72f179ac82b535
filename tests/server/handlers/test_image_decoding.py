"""Decoding images off the worker's event loop: a large image within the limits (16 megapixels; a one-colour PNG of
that size is 57 KiB on the wire and takes a quarter of a second to decode on the build machine) must not hold up a
small request that arrives meanwhile; and the decodes waiting for the worker's threads are bounded."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading
import time

import httpx
import pytest

from inference_server.front.app import create_app
from inference_server.handlers.declaration import read_declaration
from inference_server.handlers.image import decode_image

from ..conftest import make_settings, model_handler, started
from ..live import live_server

pytestmark = pytest.mark.slow


def png(size: tuple[int, int], colour: tuple[int, int, int]) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def binary_infer(data: bytes) -> tuple[bytes, dict[str, str]]:
    header = json.dumps(
        {
            "inputs": [
                {"name": "image", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 4 + len(data)}}
            ]
        }
    ).encode()
    return header + len(data).to_bytes(4, "little") + data, {
        "inference-header-content-length": str(len(header)),
        "content-type": "application/octet-stream",
    }


@pytest.fixture(scope="module")
def vision(tiny_image_dir):
    service = started(
        make_settings(tiny_image_dir, model_name="vision", model_task="image-classification", max_body_bytes=1 << 20)
    )
    yield service
    service.local_model.stop()


@contextlib.asynccontextmanager
async def vision_with_held_decodes(tiny_image_dir, **settings):
    """A vision service whose decodes wait for the yielded event, and a client of its app."""
    service = started(make_settings(tiny_image_dir, model_name="vision", model_task="image-classification", **settings))
    held = threading.Event()
    handler = service.handler
    assert handler is not None  # started() waits until ready
    original = handler.preprocess

    def slow_preprocess(inputs):
        held.wait(30)
        return original(inputs)

    handler.preprocess = slow_preprocess
    try:
        transport = httpx.ASGITransport(app=create_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield service, held, client
    finally:
        held.set()
        handler.preprocess = original
        if model_handler(service) is not None:
            service.local_model.stop()


@pytest.mark.timing
def test_a_small_image_is_not_held_behind_a_large_decode(vision, tiny_image_dir):
    large, small = png((4096, 4096), (120, 60, 30)), png((32, 32), (1, 2, 3))
    prep = read_declaration(tiny_image_dir, image=True).image
    assert prep is not None  # read with image=True
    assert 4096 * 4096 <= prep.max_pixels and len(large) < 64 * 1024  # allowed, and small on the wire
    began = time.perf_counter()
    decode_image(large, prep)
    decode_s = time.perf_counter() - began
    assert decode_s > 0.05, decode_s  # long enough to see here

    with live_server(vision) as address:
        url = f"http://{address}/v2/models/vision/infer"

        def post(data: bytes) -> tuple[int, float]:
            body, headers = binary_infer(data)
            began = time.perf_counter()
            status = httpx.post(url, content=body, headers=headers, timeout=30).status_code
            return status, time.perf_counter() - began

        post(small)  # a warm connection path and model
        rounds = []
        for _ in range(3):
            answers: dict[str, tuple[int, float]] = {}
            large_request = threading.Thread(target=lambda answers=answers: answers.update(large=post(large)))
            large_request.start()
            time.sleep(decode_s / 4)  # the large image is being decoded now
            answers["small"] = post(small)
            large_request.join(30)
            rounds.append(answers)

    assert all(a["small"][0] == 200 and a["large"][0] == 200 for a in rounds), rounds
    # On the event loop, the small request (sent a quarter into the large decode) would wait for the rest of it: at
    # least 3/4 of the large request's own time, in the same round. A ratio within one round holds whatever else the
    # machine is doing (issue 43); against decode_s, timed alone beforehand, a busy machine failed it.
    assert min(a["small"][1] / a["large"][1] for a in rounds) < 0.6, (rounds, decode_s)


@pytest.mark.anyio
async def test_decodes_waiting_for_the_workers_threads_are_bounded(tiny_image_dir):
    body, headers = binary_infer(png((8, 8), (9, 9, 9)))
    async with vision_with_held_decodes(tiny_image_dir, max_queue_size=3) as (_, held, client):
        requests = [
            asyncio.ensure_future(client.post("/v2/models/vision/infer", content=body, headers=headers))
            for _ in range(5)
        ]
        deadline = time.monotonic() + 10
        while sum(task.done() for task in requests) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        done = [task for task in requests if task.done()]
        assert len(done) == 2  # over max_queue_size (3 inputs waiting or decoding): shed at once
        assert {task.result().status_code for task in done} == {503}
        assert all("at capacity" in task.result().json()["error"] for task in done)
        held.set()
        statuses = sorted([(await task).status_code for task in requests])
    assert statuses == [200, 200, 200, 503, 503]


@pytest.mark.anyio
async def test_time_waiting_for_a_decode_counts_against_the_request_timeout(tiny_image_dir):
    """REQUEST_TIMEOUT_S bounds the whole request, decode included (the stop timing relies on it), and an input the
    threads are still decoding keeps counting against max_queue_size after its request timed out."""
    body, headers = binary_infer(png((8, 8), (9, 9, 9)))
    async with vision_with_held_decodes(tiny_image_dir, max_queue_size=1, request_timeout_s=0.5) as (
        service,
        held,
        client,
    ):
        began = time.monotonic()
        first = await client.post("/v2/models/vision/infer", content=body, headers=headers)
        waited = time.monotonic() - began
        assert first.status_code == 504 and waited < 2, (first.status_code, waited)
        second = await client.post("/v2/models/vision/infer", content=body, headers=headers)
        assert second.status_code == 503  # the first input is still on a thread
        held.set()
        deadline = time.monotonic() + 10
        while service._preprocessing and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        third = await client.post("/v2/models/vision/infer", content=body, headers=headers)
        assert third.status_code == 200, third.text
