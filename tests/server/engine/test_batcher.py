"""The dynamic batcher with a fake model: ordering and grouping are asserted, never timing windows."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest

from inference_server.batch_times import SLOTS, BatchTimes
from inference_server.engine.batcher import (
    COMPILE_RUNS,
    Batcher,
    DeadlineExceeded,
    JobResult,
    ModelUnavailable,
    QueueFull,
    size_buckets,
)
from inference_server.engine.device import is_cuda_error
from inference_server.handlers import InputError
from inference_server.handlers.compiled import CompiledForward

from ..fakes import EchoHandler

FAR = 3600.0  # a deadline nobody reaches
RESULT_TIMEOUT = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TextBatcher(Batcher):
    """Takes texts, as the HTTP workers do before they send them: preprocessed by the handler first."""

    def submit(self, texts, deadline, **options) -> Future:
        return super().submit(EchoHandler().preprocess(texts), deadline, **options)


def preds(result: JobResult) -> list:
    """The predictions a worker makes of a job's outputs."""
    rows = len(result.outputs["tokens"])
    return EchoHandler().postprocess(result.outputs, rows)


def make(handler: EchoHandler | None = None, **options) -> tuple[TextBatcher, EchoHandler]:
    handler = handler or EchoHandler()
    options = {"max_batch_size": 8, "max_wait_s": 0.0, "max_queue_size": 64, "max_sequence_length": 64, **options}
    batcher = TextBatcher(lambda: handler, **options)
    batcher.start()
    assert batcher.ready.wait(RESULT_TIMEOUT)
    return batcher, handler


@pytest.fixture
def batchers():
    made: list[tuple[TextBatcher, EchoHandler]] = []

    def factory(handler=None, **options):
        made.append(make(handler, **options))
        return made[-1]

    yield factory
    for batcher, handler in made:
        handler.gate.set()
        batcher.stop()


def words(n: int) -> str:
    return " ".join(["w"] * n)


def hold_worker(batcher: TextBatcher, handler: EchoHandler, clock: Clock | None = None) -> Future:
    """Occupy the model with one request held at the gate."""
    handler.gate.clear()
    handler.entered.clear()
    future = batcher.submit(["blocker"], (clock() if clock else time.monotonic()) + FAR)
    assert handler.entered.wait(RESULT_TIMEOUT)
    return future


def test_size_buckets():
    assert size_buckets(32) == [1, 2, 4, 8, 16, 32]
    assert size_buckets(24) == [1, 2, 4, 8, 16, 24]
    assert size_buckets(1) == [1]
    assert size_buckets(256, smallest=16) == [16, 32, 64, 128, 256]
    assert size_buckets(100, smallest=16) == [16, 32, 64, 100]


EVERY_SHAPE = sorted((b, s) for b in [1, 2, 4, 8] for s in [16, 32, 64])


class ColdGateHandler(EchoHandler):
    """Holds every warm-up forward past batch 1 at cold_gate; records which shapes were warm at each real call."""

    def __init__(self) -> None:
        super().__init__()
        self.cold_gate = threading.Event()
        self.cold_entered = threading.Event()
        self.warm_at_call: list[set[tuple[int, int]]] = []

    def forward(self, batch):
        batch_size = batch.size
        if _is_warmup(batch) and batch_size > 1:
            self.cold_entered.set()
            assert self.cold_gate.wait(RESULT_TIMEOUT)
        elif not _is_warmup(batch):
            self.warm_at_call.append(set(self.warmups))
        return super().forward(batch)


class CostHandler(EchoHandler):
    """Each input of a forward costs cost_s[its length bucket] on a test clock, which the forward advances (nothing
    sleeps): which shapes are short does not depend on the machine running the test."""

    def __init__(self, clock: Clock, cost_s: dict[int, float]) -> None:
        super().__init__()
        self.clock, self.cost_s = clock, cost_s
        self.real: list[tuple[int, int]] = []  # (batch size, length bucket) of each real batch

    def forward(self, batch):
        batch_size, seq_len = batch.size, batch.seq_len
        bucket = min(length for length in self.cost_s if length >= seq_len)
        self.clock.now += batch_size * self.cost_s[bucket]
        if not _is_warmup(batch):
            self.real.append((batch_size, bucket))
        return super().forward(batch)


def _is_warmup(batch) -> bool:
    return batch.arrays["text"][0].tobytes().rstrip(b"\0") == b"<warmup>"


def wait_for(condition, timeout: float = RESULT_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_warmup_all_runs_every_batch_and_length_shape_before_ready(batchers):
    batcher, handler = batchers(max_batch_size=8, max_sequence_length=64, warmup="all")
    assert batcher.batch_sizes == [1, 2, 4, 8]
    assert batcher.lengths == [16, 32, 64]
    assert sorted(handler.warmups) == EVERY_SHAPE


# Per input: 1 ms at 16 tokens, 2 ms at 32, 15 ms at 64. SHORT_FORWARD_S is 20 ms: every batch at 16 and 32 tokens is
# short, and at 64 only batch 1 (which always warms).
COSTS = {16: 0.001, 32: 0.002, 64: 0.015}


def test_ready_comes_after_batch_1_at_every_length_and_every_larger_batch_expected_to_be_short(batchers):
    clock, times = Clock(), SeedLog([0] * SLOTS)
    handler = CostHandler(clock, COSTS)
    batcher, _ = batchers(handler, max_batch_size=8, max_sequence_length=64, clock=clock, batch_times=times)
    # By batch size, then length; the process's first forward twice (the second's time is the model's).
    assert handler.warmups == [(1, 16), (1, 16), (1, 32), (1, 64), (2, 16), (2, 32), (4, 16), (4, 32), (8, 16), (8, 32)]
    assert batcher.unwarmed == [(2, 64), (4, 64), (8, 64)]  # 30 ms and more: left to traffic
    # The deadline admission plans on what they are expected to take until a real batch replaces it.
    assert times.seeded[(2, 64)] == pytest.approx(0.030) and times.seeded[(8, 64)] == pytest.approx(0.120)
    assert times.seeded[(8, 32)] == pytest.approx(0.016)  # measured


def test_no_request_waits_behind_a_long_warm_up_forward_and_a_shape_left_to_traffic_answers_correctly(
    batchers, monkeypatch
):
    """A long shape never runs as a warm-up, before ready or after (here the background warm-up of a model that
    compiles would start at ready): a warm-up forward of (2, 64) or larger would hold every request behind it."""
    from inference_server.engine import batcher as batcher_module

    class HoldsLongWarmUps(CostHandler):
        def forward(self, batch):
            batch_size, seq_len = batch.size, batch.seq_len
            if _is_warmup(batch) and batch_size > 1 and seq_len == 64:
                assert held.wait(RESULT_TIMEOUT)
            return super().forward(batch)

    monkeypatch.setattr(batcher_module, "WARM_AFTER_READY_S", 0.0)
    clock, held, announced = Clock(), threading.Event(), threading.Event()
    handler = HoldsLongWarmUps(clock, COSTS)
    try:
        batcher, _ = batchers(handler, max_batch_size=8, max_sequence_length=64, clock=clock, on_all_warm=announced.set)
        warm_at_ready = list(handler.warmups)
        for texts in (["a"], [words(40)] * 8, ["a b"] * 3, [words(20)], [words(40)] * 2):
            result = batcher.submit(texts, clock() + FAR).result(5)  # well past the model's time: it is idle
            assert [p["echo"] for p in preds(result)] == texts
            time.sleep(0.02)  # the model idle between requests
    finally:
        held.set()
    assert handler.real == [(1, 16), (8, 64), (3, 16), (1, 32), (2, 64)]  # (8, 64) and (2, 64) were never warmed
    assert handler.warmups == warm_at_ready
    assert announced.is_set()  # the warm-up was over at ready


def test_a_handler_that_compiles_by_itself_is_ready_after_batch_1_and_warms_the_rest_in_the_background(batchers):
    """A first call compiles (a CUDA graph records) where a handler compiles without a CompiledForward: every shape
    warms, COMPILE_RUNS runs each, batch 1 before ready."""
    handler = ColdGateHandler()
    batcher, _ = batchers(handler, max_batch_size=8, max_sequence_length=64, pad_batches=True, compile=True)
    assert handler.warmups == [shape for shape in [(1, 16), (1, 32), (1, 64)] for _ in range(COMPILE_RUNS)]
    assert handler.cold_entered.wait(RESULT_TIMEOUT)
    handler.cold_gate.set()
    wait_for(lambda: len(handler.warmups) == COMPILE_RUNS * len(EVERY_SHAPE))
    assert sorted(set(handler.warmups)) == EVERY_SHAPE and batcher.unwarmed == []


def test_a_shape_not_yet_warmed_answers_correctly_and_traffic_goes_before_the_rest_of_the_warm_up(batchers):
    handler = ColdGateHandler()
    batcher, _ = batchers(handler, max_batch_size=8, max_sequence_length=64, pad_batches=True, compile=True)
    assert handler.cold_entered.wait(RESULT_TIMEOUT)  # the background warm-up is in its first forward, (2, 16)
    future = batcher.submit(["a b", "c", "d e f"], time.monotonic() + FAR)
    handler.cold_gate.set()
    result = future.result(RESULT_TIMEOUT)
    assert [p["echo"] for p in preds(result)] == ["a b", "c", "d e f"]
    assert handler.calls[0][:2] == (4, 16)  # padded to batch bucket 4, which was still cold
    assert (4, 16) not in handler.warm_at_call[0]
    assert handler.warm_at_call[0] == {(1, 16), (1, 32), (1, 64), (2, 16)}  # one warm-up shape, then traffic
    wait_for(lambda: len(handler.warmups) == COMPILE_RUNS * len(EVERY_SHAPE))


def test_a_failing_warm_up_shape_past_batch_1_is_logged_and_the_model_keeps_serving(batchers, caplog):
    class FailsAtBatch8(EchoHandler):
        def forward(self, batch):
            batch_size = batch.size
            if _is_warmup(batch) and batch_size == 8:
                raise RuntimeError("out of memory at batch 8")
            return super().forward(batch)

    caplog.set_level(logging.INFO, logger="inference_server.engine.batcher")
    handler = FailsAtBatch8()
    batcher, _ = batchers(handler, max_batch_size=8, max_sequence_length=64)
    assert "warm-up of a shape failed" in caplog.text
    assert batcher.warm_failures == 3 and not batcher.failed  # batch 8 at each of the three lengths
    result = batcher.submit(["still here"], time.monotonic() + FAR).result(RESULT_TIMEOUT)
    assert [p["echo"] for p in preds(result)] == ["still here"]


@pytest.mark.parametrize("warmup", ["first", "all"])
def test_every_shape_warm_is_announced_once_and_failures_are_counted(batchers, warmup):
    """The compile cache is saved on this callback: once, and only after the last shape."""

    class FailsInTheMiddle(EchoHandler):
        failed = 0

        def forward(self, batch):
            batch_size, seq_len = batch.size, batch.seq_len
            if _is_warmup(batch) and (batch_size, seq_len) == (2, 32) and warmup == "first":
                self.failed += 1
                raise RuntimeError("out of memory at (2, 32)")
            return super().forward(batch)

    announced: list[tuple[int, int]] = []
    handler = FailsInTheMiddle()
    batcher, _ = batchers(
        handler,
        max_batch_size=8,
        max_sequence_length=64,
        warmup=warmup,
        on_all_warm=lambda: announced.append((len(set(handler.warmups)), handler.failed)),
    )
    wait_for(lambda: announced)
    time.sleep(0.2)
    failed = 1 if warmup == "first" else 0
    assert announced == [(len(EVERY_SHAPE) - failed, failed)]  # once, at the last shape, after the failure
    assert batcher.warm_failures == failed


def test_after_ready_the_background_compile_waits_and_traffic_or_a_stop_does_not(batchers, monkeypatch):
    """The workers' readiness test inferences come just after ready: served at once, not behind a compile; a stop
    during the wait returns at once. (A long wait here, so a slow test thread is still inside it.)"""
    from inference_server.engine import batcher as batcher_module

    monkeypatch.setattr(batcher_module, "WARM_AFTER_READY_S", 30.0)
    handler = CompilingHandler()
    handler.compile_gate.clear()
    batcher, _ = batchers(handler, max_batch_size=8, max_sequence_length=64, pad_batches=True)
    started = time.monotonic()
    result = batcher.submit(["probe"], time.monotonic() + FAR).result(RESULT_TIMEOUT)
    assert [p["echo"] for p in preds(result)] == ["probe"] and time.monotonic() - started < 5
    assert handler.sides(warmup=False) == [("eager", 1, 16)]
    assert handler.sides(warmup=True) == [("eager", 1, 16), ("eager", 1, 32), ("eager", 1, 64)]  # nothing compiled
    handler.compile_gate.set()
    idle, _ = batchers(CompilingHandler(), max_batch_size=8, max_sequence_length=64, pad_batches=True)
    stopping = time.monotonic()
    idle.stop()
    assert time.monotonic() - stopping < 5  # not the 30 s wait


def test_an_unknown_warmup_mode_is_refused():
    with pytest.raises(ValueError, match=r"warmup.*one of"):
        Batcher(EchoHandler, max_batch_size=8, max_wait_s=0, max_queue_size=8, max_sequence_length=64, warmup="some")


def test_length_buckets_stop_at_the_handlers_limit(batchers):
    handler = EchoHandler()
    handler.max_length = 40
    batcher, _ = batchers(handler, max_sequence_length=512)
    assert batcher.lengths == [16, 32, 40]


def test_result_carries_predictions_in_order_and_timings(batchers):
    batcher, _ = batchers()
    result = batcher.submit(["a b", "c", "d e f"], time.monotonic() + FAR).result(RESULT_TIMEOUT)
    assert isinstance(result, JobResult)
    assert [p["echo"] for p in preds(result)] == ["a b", "c", "d e f"]
    assert result.input_tokens == 6
    assert result.queue_wait_s >= 0 and result.inference_s >= 0


def test_requests_queued_while_busy_go_together_when_the_model_is_free(batchers):
    batcher, handler = batchers(max_wait_s=0.0)
    blocker = hold_worker(batcher, handler)
    futures = [batcher.submit([f"r{i}"], time.monotonic() + FAR) for i in range(5)]
    assert batcher.queued == 5
    handler.gate.set()
    for f in [blocker, *futures]:
        f.result(RESULT_TIMEOUT)
    assert [c[2] for c in handler.served] == [["blocker"], ["r0", "r1", "r2", "r3", "r4"]]
    assert batcher.queued == 0


def test_a_request_to_an_idle_model_runs_at_once_without_the_batching_window(batchers):
    batcher, handler = batchers(max_wait_s=600.0)
    batcher.submit(["alone"], time.monotonic() + FAR).result(RESULT_TIMEOUT)  # 600 s if it waited
    assert handler.served == [(1, 1, ["alone"])]


def test_a_lone_request_that_queued_behind_a_batch_waits_for_max_wait_then_runs_alone(batchers):
    batcher, handler = batchers(max_wait_s=0.3)
    blocker = hold_worker(batcher, handler)
    queued = batcher.submit(["queued"], time.monotonic() + FAR)
    handler.gate.set()
    blocker.result(RESULT_TIMEOUT)
    freed = time.monotonic()
    queued.result(RESULT_TIMEOUT)
    assert time.monotonic() - freed >= 0.2  # it waited for company (0.3 s after it was queued)
    assert [c[2] for c in handler.served] == [["blocker"], ["queued"]]


def test_a_full_batch_does_not_wait_for_max_wait(batchers):
    batcher, handler = batchers(max_wait_s=600.0, max_batch_size=4)
    first = batcher.submit(["a", "b"], time.monotonic() + FAR)
    second = batcher.submit(["c", "d"], time.monotonic() + FAR)
    first.result(RESULT_TIMEOUT)  # would take 600 s if the batcher waited for max_wait
    second.result(RESULT_TIMEOUT)
    assert [c[2] for c in handler.served] == [["a", "b", "c", "d"]]


def test_batches_never_exceed_max_batch_size(batchers):
    batcher, handler = batchers(max_batch_size=4)
    blocker = hold_worker(batcher, handler)
    job = batcher.submit([f"t{i}" for i in range(10)], time.monotonic() + FAR)
    handler.gate.set()
    blocker.result(RESULT_TIMEOUT)
    assert len(preds(job.result(RESULT_TIMEOUT))) == 10
    assert [len(c[2]) for c in handler.served[1:]] == [4, 4, 2]


def test_inputs_are_grouped_by_sequence_length_bucket(batchers):
    batcher, handler = batchers()
    blocker = hold_worker(batcher, handler)
    texts = [words(1), words(20), words(2), words(40), words(30)]
    futures = [batcher.submit([t], time.monotonic() + FAR) for t in texts]
    handler.gate.set()
    for f in [blocker, *futures]:
        f.result(RESULT_TIMEOUT)
    batches = [batch for _, _, batch in handler.served[1:]]
    assert sorted(batches) == sorted([[words(1), words(2)], [words(20), words(30)], [words(40)]])
    # Each batch is padded to its longest input, not to its bucket (16, 32, 64).
    assert sorted(seq_len for _, seq_len, _ in handler.served[1:]) == [2, 30, 40]
    assert len(handler.served) == 4


def test_batches_are_padded_to_a_batch_bucket_when_asked(batchers):
    batcher, handler = batchers(pad_batches=True)
    blocker = hold_worker(batcher, handler)
    job = batcher.submit(["a", "b", "c"], time.monotonic() + FAR)
    handler.gate.set()
    blocker.result(RESULT_TIMEOUT)
    assert len(preds(job.result(RESULT_TIMEOUT))) == 3
    assert handler.served[1][:2] == (4, 16)  # fixed shapes: the batch bucket and the length bucket


def test_queue_is_bounded(batchers):
    batcher, handler = batchers(max_queue_size=3)
    hold_worker(batcher, handler)  # running, so no longer queued
    batcher.submit(["a", "b"], time.monotonic() + FAR)
    with pytest.raises(QueueFull):
        batcher.submit(["c", "d"], time.monotonic() + FAR)  # a client batch needs room for all its texts
    batcher.submit(["c"], time.monotonic() + FAR)
    with pytest.raises(QueueFull):
        batcher.submit(["d"], time.monotonic() + FAR)
    batcher.submit(["probe"], time.monotonic() + FAR, bypass_queue_limit=True)
    assert batcher.queued == 4


def test_expired_requests_are_dropped_before_running(batchers):
    clock = Clock()
    batcher, handler = batchers(clock=clock)
    blocker = hold_worker(batcher, handler, clock)
    expiring = batcher.submit(["expires"], clock() + 1.0)
    lasting = batcher.submit(["lasts"], clock() + FAR)
    clock.now += 2.0
    handler.gate.set()
    with pytest.raises(DeadlineExceeded):
        expiring.result(RESULT_TIMEOUT)
    lasting.result(RESULT_TIMEOUT)
    blocker.result(RESULT_TIMEOUT)
    assert [c[2] for c in handler.served] == [["blocker"], ["lasts"]]
    assert batcher.queued == 0


def test_cancelled_requests_are_not_run(batchers):
    batcher, handler = batchers()
    blocker = hold_worker(batcher, handler)
    cancelled = batcher.submit(["cancelled"], time.monotonic() + FAR)
    kept = batcher.submit(["kept"], time.monotonic() + FAR)
    assert cancelled.cancel()
    handler.gate.set()
    kept.result(RESULT_TIMEOUT)
    blocker.result(RESULT_TIMEOUT)
    assert [c[2] for c in handler.served] == [["blocker"], ["kept"]]
    assert batcher.queued == 0


def test_an_input_over_the_length_limit_fails_only_its_own_request(batchers):
    batcher, handler = batchers()
    blocker = hold_worker(batcher, handler)
    good = batcher.submit(["good"], time.monotonic() + FAR)
    bad = batcher.submit([words(65)], time.monotonic() + FAR)
    handler.gate.set()
    with pytest.raises(InputError):
        bad.result(RESULT_TIMEOUT)
    assert preds(good.result(RESULT_TIMEOUT)) == [{"echo": "good", "tokens": 1}]
    blocker.result(RESULT_TIMEOUT)
    assert batcher.queued == 0


def test_a_failing_batch_fails_its_requests_and_the_batcher_goes_on(batchers):
    batcher, handler = batchers()
    handler.error = ValueError("boom")
    with pytest.raises(ValueError, match="boom"):
        batcher.submit(["x"], time.monotonic() + FAR).result(RESULT_TIMEOUT)
    handler.error = None
    assert preds(batcher.submit(["y"], time.monotonic() + FAR).result(RESULT_TIMEOUT))[0]["echo"] == "y"
    assert not batcher.failed


def test_a_cuda_error_is_fatal(batchers):
    fatal: list[BaseException] = []
    batcher, handler = batchers(on_fatal=fatal.append, is_fatal=is_cuda_error)
    handler.error = RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(ModelUnavailable):
        batcher.submit(["x"], time.monotonic() + FAR).result(RESULT_TIMEOUT)
    assert batcher.failed and fatal == [handler.error]
    with pytest.raises(ModelUnavailable):
        batcher.submit(["y"], time.monotonic() + FAR)


def test_a_load_failure_is_reported_and_never_ready():
    fatal: list[BaseException] = []

    def load():
        raise OSError("no weights")

    batcher = Batcher(
        load, max_batch_size=4, max_wait_s=0, max_queue_size=4, max_sequence_length=16, on_fatal=fatal.append
    )
    batcher.start()
    batcher._thread.join(RESULT_TIMEOUT)
    assert not batcher.ready.is_set() and batcher.failed
    assert isinstance(fatal[0], OSError)


def test_is_cuda_error():
    assert is_cuda_error(RuntimeError("CUDA error: device-side assert triggered"))
    assert is_cuda_error(RuntimeError("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"))
    assert not is_cuda_error(RuntimeError("shape mismatch"))
    assert not is_cuda_error(ValueError("CUDA"))


def test_stop_fails_queued_requests(batchers):
    batcher, handler = batchers()
    hold_worker(batcher, handler)
    queued = batcher.submit(["queued"], time.monotonic() + FAR)
    batcher.stop(timeout=0.1)
    handler.gate.set()
    with pytest.raises(ModelUnavailable):
        queued.result(RESULT_TIMEOUT)


def test_of_the_ready_buckets_the_one_with_the_oldest_input_runs_first(batchers):
    batcher, handler = batchers(max_batch_size=2)
    blocker = hold_worker(batcher, handler)
    futures = [batcher.submit([t], time.monotonic() + FAR) for t in (words(20), "a", "b", "c", "d")]
    handler.gate.set()
    for f in [blocker, *futures]:
        f.result(RESULT_TIMEOUT)
    # The short bucket is full twice over, but the long input came first.
    assert [c[2] for c in handler.served[1:]] == [[words(20)], ["a", "b"], ["c", "d"]]


class CompilingHandler(EchoHandler):
    """Forwards through a CompiledForward, as the built-in handlers do under MODEL_RUNTIME=compile. Records which side
    ran each call, holds compiles at compile_gate (set: not held), and fails the compile of fail_shape."""

    def __init__(self, fail_shape: tuple[int, int] | None = None, fail_run: int = 1, compile_s: float = 0.0) -> None:
        super().__init__()
        self.ran: list[tuple[str, int, int, bool]] = []  # (side, batch size, length, warm-up)
        self.compile_gate = threading.Event()
        self.compile_gate.set()
        self.compile_entered = threading.Event()
        self.fail_shape, self.fail_run = fail_shape, fail_run  # which shape's compile raises, at which of its runs
        self.compile_s = compile_s  # a shape's first compiled run takes this long (the compile)
        self.hold_shape: tuple[int, int] | None = None  # only this shape's compile waits at compile_gate
        self.compiled = self.compiled_forward = CompiledForward(self._eager, lambda: self._compiled)

    def forward(self, batch):
        batch_size, seq_len = batch.size, batch.seq_len
        self._current = (batch, batch_size, seq_len)
        return self.compiled(np.zeros((batch_size, seq_len), dtype=np.int64))

    def _eager(self, shaped):
        batch, size, length = self._current
        self.ran.append(("eager", size, length, _is_warmup(batch)))
        return EchoHandler.forward(self, batch)

    def _compiled(self, shaped):
        batch, size, length = self._current
        if self.hold_shape in (None, (size, length)):
            self.compile_entered.set()
            assert self.compile_gate.wait(RESULT_TIMEOUT)
        runs = sum(1 for side, *shape, _ in self.ran if side == "compiled" and tuple(shape) == (size, length)) + 1
        if (size, length) == self.fail_shape and runs >= self.fail_run:
            raise RuntimeError(f"inductor failed at {self.fail_shape}")
        if runs == 1:
            time.sleep(self.compile_s)
        self.ran.append(("compiled", size, length, _is_warmup(batch)))
        return EchoHandler.forward(self, batch)

    def sides(self, warmup: bool) -> list[tuple[str, int, int]]:
        return [(side, size, length) for side, size, length, warm in self.ran if warm == warmup]


def test_a_compiling_model_is_ready_on_its_eager_forward_and_compiles_every_shape_after(batchers):
    handler = CompilingHandler()
    handler.compile_gate.clear()
    announced: list[int] = []
    batcher, _ = batchers(
        handler,
        max_batch_size=8,
        max_sequence_length=64,
        pad_batches=True,
        on_all_warm=lambda: announced.append(handler.compiled.compiled_shapes),
    )
    assert handler.sides(warmup=True) == [("eager", 1, 16), ("eager", 1, 32), ("eager", 1, 64)]  # ready: no compile
    handler.compile_gate.set()
    wait_for(lambda: announced)
    compiled = handler.sides(warmup=True)[3:]
    assert sorted(set(compiled)) == [("compiled", b, s) for b, s in EVERY_SHAPE]  # batch 1 too, smallest first
    assert compiled[:COMPILE_RUNS] == [("compiled", 1, 16)] * COMPILE_RUNS  # the runs that record a CUDA graph
    assert announced == [len(EVERY_SHAPE)]
    batcher.submit(["a b", "c"], time.monotonic() + FAR).result(RESULT_TIMEOUT)
    assert handler.sides(warmup=False) == [("compiled", 2, 16)]


def test_traffic_of_a_shape_not_yet_compiled_runs_eagerly_behind_at_most_one_compile(batchers, monkeypatch):
    from inference_server.engine import batcher as batcher_module

    monkeypatch.setattr(batcher_module, "WARM_AFTER_READY_S", 0.0)
    handler = CompilingHandler()
    handler.compile_gate.clear()
    batcher, _ = batchers(handler, max_batch_size=8, max_sequence_length=64, pad_batches=True)
    assert handler.compile_entered.wait(RESULT_TIMEOUT)  # the background compile of (1, 16) is under way
    future = batcher.submit([words(20)], time.monotonic() + FAR)  # length 20: shape (1, 32)
    handler.compile_gate.set()
    assert [p["echo"] for p in preds(future.result(RESULT_TIMEOUT))] == [words(20)]
    assert handler.sides(warmup=False) == [("eager", 1, 32)]
    wait_for(lambda: len(handler.sides(warmup=True)) > 3 + COMPILE_RUNS)
    assert handler.sides(warmup=True)[3 : 3 + COMPILE_RUNS + 1] == [("compiled", 1, 16)] * COMPILE_RUNS + [
        ("compiled", 1, 32)
    ]  # the request went between two compiles, not after the rest


def test_while_a_shape_compiles_the_workers_admission_counts_the_model_busy_for_the_last_compiles_time(batchers):
    times = BatchTimes([0] * SLOTS, clock_ns=lambda: 10**12)  # a frozen clock: the full estimate stays
    handler = CompilingHandler(compile_s=0.2)  # every shape sleeps this long to compile: 12 of them
    handler.hold_shape = (1, 32)  # the second to compile, after (1, 16) took 0.2 s
    handler.compile_gate.clear()
    announced = threading.Event()
    batchers(
        handler,
        max_batch_size=8,
        max_sequence_length=64,
        pad_batches=True,
        batch_times=times,
        on_all_warm=announced.set,
    )
    assert handler.compile_entered.wait(RESULT_TIMEOUT)
    assert times.compiling_s() is not None and times.running == 0
    assert times.estimate_s(0, 1, 16) >= 0.2  # the last compile's time, then its own batch
    handler.compile_gate.set()
    assert announced.wait(RESULT_TIMEOUT)
    assert times.compiling_s() is None and times.estimate_s(0, 1, 16) < 0.2  # every shape compiled: idle


def test_warmup_all_compiles_every_shape_before_ready(batchers):
    handler = CompilingHandler()
    batcher, _ = batchers(handler, max_batch_size=8, max_sequence_length=64, pad_batches=True, warmup="all")
    assert handler.compiled.compiled_shapes == len(EVERY_SHAPE)
    assert {side for side, *_ in handler.ran} == {"compiled"}


@pytest.mark.parametrize("warmup", ["first", "all"])
@pytest.mark.parametrize("fail_run", [1, 2])
def test_a_shape_that_fails_to_compile_keeps_serving_eagerly(batchers, caplog, warmup, fail_run):
    """At its compile, or at a later run (a CUDA graph's recording): counted, and not seeded with a compile's time."""
    caplog.set_level(logging.INFO, logger="inference_server.engine.batcher")
    announced: list[int] = []
    seeds = SeedLog([0] * SLOTS)
    handler = CompilingHandler(fail_shape=(2, 16), fail_run=fail_run, compile_s=0.1)
    batcher, _ = batchers(
        handler,
        max_batch_size=8,
        max_sequence_length=64,
        pad_batches=True,
        warmup=warmup,
        batch_times=seeds,
        on_all_warm=lambda: announced.append(handler.compiled.compiled_shapes),
    )
    wait_for(lambda: announced)
    assert announced == [len(EVERY_SHAPE) - 1] and batcher.warm_failures == 1
    assert "a shape failed to compile; it runs eagerly" in caplog.text
    assert (2, 16) not in seeds.seeded
    assert 0 < seeds.seeded[(4, 16)] < 0.1  # the last run's time, not the compile's
    result = batcher.submit(["a", "b"], time.monotonic() + FAR).result(RESULT_TIMEOUT)
    assert [p["echo"] for p in preds(result)] == ["a", "b"]
    assert handler.sides(warmup=False) == [("eager", 2, 16)]
    assert not batcher.failed


class SeedLog(BatchTimes):
    def __init__(self, slots) -> None:
        super().__init__(slots)
        self.seeded: dict[tuple[int, int], float] = {}

    def seed(self, size: int, length: int, seconds: float) -> None:
        self.seeded[(size, length)] = seconds
        super().seed(size, length, seconds)
