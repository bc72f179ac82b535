"""Admission by deadline: the batch-time table (model side), the estimate and the decision (worker side), with a
fake clock and plain lists for the shared memory; then the batcher publishing into it."""

import asyncio
import logging
import time

import orjson
import pytest

from inference_server import batch_times
from inference_server.batch_times import ALPHA, DEVIATIONS, SLOTS, BatchTimes
from inference_server.engine.batcher import Batcher
from inference_server.front.admission import Admission
from inference_server.ipc import StatusPage

from ..conftest import model_handler
from ..fakes import EchoHandler

MS = 1_000_000  # ns


class Clock:
    def __init__(self) -> None:
        self.ns = 10**12

    def __call__(self) -> int:
        return self.ns


def table(clock=None) -> BatchTimes:
    times = BatchTimes([0] * SLOTS, clock_ns=clock or Clock())
    times.configure([1, 2, 4, 8], [16, 32, 64])
    for size, ms in ((1, 10), (2, 12), (4, 16), (8, 24)):
        for length, factor in ((16, 1), (32, 2), (64, 4)):
            times.seed(size, length, ms * factor / 1000)
    return times


def test_idle_model_runs_the_inputs_at_once_as_their_own_batch():
    times = table()
    assert times.estimate_s(queued=0, inputs=1, length=10) == pytest.approx(0.010)
    assert times.estimate_s(queued=0, inputs=3, length=30) == pytest.approx(0.032)  # batch bucket 4, length 32


def test_busy_model_counts_the_running_batch_the_queue_and_a_full_own_batch():
    clock = Clock()
    times = table(clock)
    times.started(8, 16)  # runs for 24 ms
    clock.ns += 4 * MS
    # 20 ms left of the running batch, then 9 inputs (8 queued + 1) in two full batches of 24 ms
    assert times.estimate_s(queued=8, inputs=1, length=16) == pytest.approx(0.020 + 2 * 0.024)
    times.finished()
    assert times.estimate_s(queued=8, inputs=1, length=16) == pytest.approx(2 * 0.024)
    # a queue but nothing running (between batches): its own batch is still a full one
    assert times.estimate_s(queued=1, inputs=1, length=16) == pytest.approx(0.024)


def test_a_background_compile_is_busy_for_its_expected_seconds_with_no_inputs_running():
    clock = Clock()
    times = table(clock)
    admission = Admission(times, queued=lambda: 0, margin_s=0.0)
    times.occupied(2.0)
    clock.ns += 500 * MS
    assert times.running == 0
    # 1.5 s left of the compile, then its own batch planned as a full one (8 at length 16: 24 ms)
    assert times.estimate_s(queued=0, inputs=1, length=16) == pytest.approx(1.5 + 0.024)
    assert not admission.can_finish(1.0, length=16) and admission.can_finish(2.0, length=16)
    times.finished()
    assert times.estimate_s(queued=0, inputs=1, length=16) == pytest.approx(0.010)
    assert admission.can_finish(1.0, length=16)


def test_a_running_batch_past_its_estimate_adds_nothing():
    clock = Clock()
    times = table(clock)
    times.started(8, 16)
    clock.ns += 100 * MS
    assert times.estimate_s(queued=0, inputs=1, length=16) == pytest.approx(0.024)


def test_longer_inputs_use_their_length_bucket_and_unknown_lengths_the_recent_mix():
    times = table()
    assert times.estimate_s(queued=8, inputs=1, length=64) == pytest.approx(2 * 0.096)
    # before any real batch, an unknown length is planned as the shortest: the check before the body reads it
    # must not refuse what the check after would admit
    assert times.estimate_s(queued=8, inputs=1) == pytest.approx(2 * 0.024)
    times.observe(8, 64, 0.096)  # a batch of long inputs ran: the recent mix leans long
    times.observe(8, 16, 0.024)
    mix = times.estimate_s(queued=8, inputs=1)
    assert 2 * 0.024 < mix < 2 * 0.096


def test_observations_replace_a_warm_up_seed_then_average():
    times = table()
    times.observe(1, 16, 0.030)
    assert times.estimate_s(0, 1, 16) == pytest.approx(0.030)  # replaced the seed (10 ms), not averaged
    times.observe(1, 16, 0.040)
    # the average moved a fifth of the way, and the 10 ms surprise is a fifth of a deviation, planned twice
    assert times.estimate_s(0, 1, 16) == pytest.approx(0.030 + ALPHA * 0.010 + DEVIATIONS * ALPHA * 0.010, rel=1e-6)


def test_nothing_published_admits():
    times = BatchTimes([0] * SLOTS)
    assert not times.configured
    assert times.estimate_s(100, 1) == 0.0


def test_admission_compares_estimate_and_margin_with_the_budget():
    queued = [0]
    admission = Admission(table(), lambda: queued[0], margin_s=0.005)
    assert admission.can_finish(0.016, length=16)  # 10 ms + 5 ms
    assert not admission.can_finish(0.014, length=16)
    assert not admission.can_finish(0.0)  # a deadline of 0 never survives
    queued[0] = 40  # 41 inputs: 6 full batches of 8 at 24 ms
    assert not admission.can_finish(0.100, length=16)
    assert admission.can_finish(6 * 0.024 + 0.006, length=16)


def test_the_table_lives_in_the_status_page_and_a_reader_sees_the_writer():
    page = StatusPage.create()
    writer, reader = BatchTimes(page.table), BatchTimes(StatusPage(page.fd).table)
    writer.configure([1, 2], [16])
    writer.observe(2, 16, 0.002)
    assert reader.configured and reader.estimate_s(1, 1, 16) == pytest.approx(0.002)
    with pytest.raises(ValueError):
        BatchTimes([0] * (SLOTS - 1))


def test_batcher_publishes_warm_up_and_batch_times():
    times = BatchTimes([0] * SLOTS)
    batcher = Batcher(
        EchoHandler, max_batch_size=4, max_wait_s=0.001, max_queue_size=16, max_sequence_length=32, batch_times=times
    )
    batcher.start()
    try:
        assert batcher.ready.wait(10)
        assert times.configured and times.estimate_s(0, 1, 8) > 0  # seeded by warm-up
        handler = batcher.handler
        assert handler is not None  # loaded once ready
        future = batcher.submit(handler.preprocess(["a b c"]), time.monotonic() + 5)
        future.result(5)
        assert times.slots[2] == 0  # not busy once the batch is done
    finally:
        batcher.stop()


def test_a_burst_in_one_loop_iteration_counts_this_workers_own_inputs():
    """The model counts inputs only once the link carried them: the worker's own count keeps a burst honest."""
    clock = Clock()
    times = table(clock)
    admission = Admission(times, lambda: 0, margin_s=0.0)
    admitted = 0
    while admission.can_finish(0.100, length=16):  # 24 ms per full batch of 8, nothing running
        admission.at_model += 1
        admitted += 1
    assert admitted == 32  # 4 full batches of 8 fit in 100 ms, a 5th does not
    times.started(8, 16)  # 8 of them now run: they are no longer ahead of the next request
    assert not admission.can_finish(0.100, length=16)  # ... but the running batch has 24 ms to go
    clock.ns += 24 * MS
    assert admission.can_finish(0.100, length=16)


# -- through the app ----------------------------------------------------------------------------------------------


async def _call(app, headers: list[tuple[bytes, bytes]], body: bytes = b'{"text": "a"}'):
    """The front door directly: (status, headers, body, how many times the body was received)."""
    sent, received = [], []

    async def receive():
        received.append(1)
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/predict",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
    }
    await app(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"]), sent[1]["body"], len(received)


@pytest.mark.anyio
async def test_a_deadline_of_0_is_shed_at_once_without_reading_the_body_or_logging(echo_service, caplog):
    from inference_server import facts as m
    from inference_server.front.app import create_app

    service = echo_service()
    app = create_app(service)
    caplog.set_level(logging.INFO, logger="inference_server.access")
    for _ in range(3):
        status, headers, body, reads = await _call(app, [(b"x-request-timeout-ms", b"0")])
        assert status == 503 and headers[b"retry-after"] == b"1" and reads == 0
        assert orjson.loads(body)["error"]["code"] == "overloaded" and b"x-request-id" in headers
    assert not [r for r in caplog.records if r.name == "inference_server.access"]
    assert service.metrics.take_interval()[0][m.REJECTED_REQUESTS] == 3
    assert service.metrics.registry.get_sample_value("requests_total", {"endpoint": "predict", "status": "503"}) == 3
    status, _, _, reads = await _call(app, [(b"x-request-timeout-ms", b"5000")])
    assert status == 200 and reads == 1


@pytest.mark.anyio
@pytest.mark.parametrize("value", [b"-1", b"soon", b"nan", b"inf", b""])
async def test_a_bad_deadline_header_is_a_400(echo_service, value):
    from inference_server.front.app import create_app

    status, _, body, reads = await _call(create_app(echo_service()), [(b"x-request-timeout-ms", value)])
    assert status == 400 and orjson.loads(body)["error"]["code"] == "invalid_timeout" and reads == 0


@pytest.mark.anyio
async def test_the_clients_deadline_replaces_the_request_timeout(echo_service):
    from inference_server.front.app import create_app

    service = echo_service(request_timeout_s=30.0)
    handler = model_handler(service)
    handler.gate.clear()
    try:
        started_at = time.monotonic()
        status, _, _, _ = await _call(create_app(service), [(b"x-request-timeout-ms", b"300")])
        waited = time.monotonic() - started_at
    finally:
        handler.gate.set()
    assert status == 504 and waited < 5


@pytest.mark.anyio
async def test_a_request_the_queue_would_make_late_is_shed_and_one_with_time_enough_admitted(echo_service):
    from inference_server.front.app import create_app

    service = echo_service(max_batch_size=4)
    times = service.admission.times  # the same shared memory the model process writes: slow batches, faked
    for size in (1, 2, 4):
        for length in (16, 32, 64):
            times.seed(size, length, 0.100)
    for _ in range(30):  # and the recent mix of lengths, which the check before the body uses
        times.observe(4, 16, 0.100)
    handler = model_handler(service)
    handler.gate.clear()
    handler.entered.clear()
    running = service.local_model.runner.batcher.submit(service.handler.preprocess(["running"]), time.monotonic() + 60)
    assert handler.entered.wait(10)
    app = create_app(service)
    times.started(4, 16)  # what the model would publish, at 100 ms
    try:
        # a full batch of its own (100 ms) x 1.2 headroom + margin > 120 ms, whatever the running batch has left
        late, _, _, reads = await _call(app, [(b"x-request-timeout-ms", b"120")])
        assert late == 503 and reads == 0
        queued = asyncio.ensure_future(_call(app, [(b"x-request-timeout-ms", b"5000")]))
        await asyncio.sleep(0.2)
        assert not queued.done()  # admitted: waiting behind the held batch
    finally:
        handler.gate.set()
    assert (await queued)[0] == 200
    running.result(10)


def test_batches_that_vary_are_planned_longer_than_their_average():
    times = table()
    times.observe(1, 16, 0.010)  # replaces the seed: no deviation yet
    steady = times.estimate_s(0, 1, 16)
    for ms in (2, 18, 2, 18, 2, 18):
        times.observe(1, 16, ms / 1000)
    assert times.estimate_s(0, 1, 16) > steady + 0.005


def test_a_compile_is_published_as_such_and_a_batch_is_not():
    clock = Clock()
    times = table(clock)
    assert times.compiling_s() is None
    times.occupied(0.0)  # no estimate yet: the first shape's compile
    clock.ns += 1500 * MS
    assert times.compiling_s() == pytest.approx(1.5) and times.running == 0
    times.finished()
    assert times.compiling_s() is None
    times.started(8, 16)
    assert times.compiling_s() is None and times.running == 8


CASES = [
    "compiling",
    "not compiling",
    "compiling too long",
    "compiling, an error",
    "compiling, a new worker",
    "compiling, never served",
]


@pytest.mark.parametrize("case", CASES)
def test_readiness_holds_while_the_model_compiles_a_shape_and_only_then(echo_service, monkeypatch, case):
    """Runtime compile compiles each shape after ready, on the inference thread: a test inference that waits out its
    deadline behind a compile is no failure (the task would otherwise be taken out of the load balancer and replaced
    by ECS before its first compile ends), unless the compile runs past MAX_COMPILE_S, the test inference failed
    with an error of its own, or the model never served."""
    from inference_server.front import service as service_module

    if case == "compiling too long":
        monkeypatch.setattr(service_module, "MAX_COMPILE_S", 0.5)
    service = echo_service(request_timeout_s=0.2, ready_probe_interval_s=0.1)  # a success is recent for 0.4 s
    times = service.admission.times
    assert service.probe()
    handler = model_handler(service)
    handler.gate.clear()
    handler.entered.clear()
    service.local_model.runner.batcher.submit(service.handler.preprocess(["busy"]), time.monotonic() + 60)
    assert handler.entered.wait(10)  # the inference thread is taken, as by a compile: no batch runs from here
    if case in ("compiling, a new worker", "compiling, never served"):
        service._probed_ok = False  # as a worker that started mid-compile
    if case == "compiling, never served":  # a model that has run nothing but its warm-up
        for slot in range(batch_times._MIX, batch_times._MIX + batch_times.MAX_BUCKETS):
            times.slots[slot] = 0
    if case != "not compiling":
        times.occupied(30.0)  # what the batcher publishes while it compiles
    if case == "compiling, an error":
        monkeypatch.setattr(service.handler, "probe_input", lambda: 1 / 0)
    try:
        time.sleep(1.0)  # past the window: no recent success
        assert not service.probe()
        ready = service.readiness()
    finally:
        times.finished()
        handler.gate.set()
    excused = case in ("compiling", "compiling, a new worker")
    assert ready == (None if excused else "no recent successful test inference")
