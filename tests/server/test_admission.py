"""Admission by deadline: the batch-time table (model side), the estimate and the decision (worker side), with a
fake clock and plain lists for the shared memory; then the batcher publishing into it."""

import time

import pytest

from inference_server.admission import ALPHA, SLOTS, Admission, BatchTimes
from inference_server.batcher import Batcher
from inference_server.ipc import StatusPage

from .fakes import EchoHandler

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


def test_a_running_batch_past_its_estimate_adds_nothing():
    clock = Clock()
    times = table(clock)
    times.started(8, 16)
    clock.ns += 100 * MS
    assert times.estimate_s(queued=0, inputs=1, length=16) == pytest.approx(0.024)


def test_longer_inputs_use_their_length_bucket_and_unknown_lengths_the_recent_mix():
    times = table()
    assert times.estimate_s(queued=8, inputs=1, length=64) == pytest.approx(2 * 0.096)
    times.observe(8, 16, 0.024)  # the mix of batch bucket 8 now leans to short inputs
    mix = times.estimate_s(queued=8, inputs=1)
    assert 2 * 0.024 < mix < 2 * 0.096


def test_observations_replace_a_warm_up_seed_then_average():
    times = table()
    times.observe(1, 16, 0.030)
    assert times.estimate_s(0, 1, 16) == pytest.approx(0.030)  # replaced the seed (10 ms), not averaged
    times.observe(1, 16, 0.040)
    assert times.estimate_s(0, 1, 16) == pytest.approx(0.030 + ALPHA * 0.010, rel=1e-6)


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
    batcher = Batcher(EchoHandler, max_batch_size=4, max_wait_s=0.001, max_queue_size=16, max_sequence_length=32,
                      batch_times=times)
    batcher.start()
    try:
        assert batcher.ready.wait(10)
        assert times.configured and times.estimate_s(0, 1, 8) > 0  # seeded by warm-up
        handler = batcher.handler
        future = batcher.submit(handler.preprocess(["a b c"]), time.monotonic() + 5)
        future.result(5)
        assert times.slots[2] == 0  # not busy once the batch is done
    finally:
        batcher.stop()
