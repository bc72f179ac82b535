"""A share of one GPU through NVIDIA MPS: the variables ECS sets, the batch plan within the memory limit, the refusal
of a model that cannot fit, and the model process's own GPU figures (issue 41)."""

from __future__ import annotations

import json
import logging
import threading
import time

import numpy as np
import pytest

from inference_server import facts as m
from inference_server.__main__ import main
from inference_server.engine import gpu_share
from inference_server.engine.busy_time import BusyTime
from inference_server.engine.gpu_share import (
    COMPUTE_VARIABLE,
    EVERY_DEVICE,
    MEMORY_VARIABLE,
    MIB,
    RESERVE_FRACTION,
    GpuShare,
    ShareTooSmall,
    parse_compute_percent,
    parse_memory_limit,
    plan_batches,
    read_share,
)
from inference_server.inputs import Encoded
from inference_server.logs import JsonFormatter
from inference_server.settings import SettingsError
from inference_server.testing import LocalModel

from ..conftest import infer, make_settings, model_handler, wait_ready

UUID = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"


@pytest.mark.parametrize(
    ("raw", "limits"),
    [
        ("0=2048M", {"0": 2048}),
        ("2048M", {EVERY_DEVICE: 2048}),
        ("0=1G,1=512MB", {"0": 1024, "1": 512}),  # NVIDIA's own example
        ("3G", {EVERY_DEVICE: 3072}),
        (f"{UUID}=2G", {UUID: 2048}),
        ("GPU-8932f937=900M", {"GPU-8932f937": 900}),  # an abbreviated UUID, as CUDA_VISIBLE_DEVICES takes
        (" 0 = 2G , 1=1gb ", {"0": 2048, "1": 1024}),
    ],
)
def test_each_documented_form_of_the_memory_limit_is_read(raw, limits):
    assert parse_memory_limit(raw) == limits


@pytest.mark.parametrize(
    "raw",
    [
        "2048",
        "2048K",
        "2T",
        "1.5G",
        "2 GB",
        "0=",
        "=2G",
        "0=2G,0=1G",
        "0=0M",
        "x=2G",
        "2G,1G",
        "0=2G;1=1G",
        "-1=2G",
        "0=2G,",
        "0:2G",
        "MIG-1=2G",
    ],
)
def test_a_malformed_memory_limit_is_refused_naming_the_variable_and_the_forms(raw):
    with pytest.raises(SettingsError) as refused:
        parse_memory_limit(raw)
    assert refused.value.variable == MEMORY_VARIABLE
    assert str(refused.value).startswith(f"{MEMORY_VARIABLE}: {raw!r}")
    assert "0=2048M" in str(refused.value) and "gpu_share.memory_mib" in str(refused.value)


@pytest.mark.parametrize(("raw", "percent"), [("50", 50.0), ("100", 100.0), ("12.5", 12.5), ("1", 1.0)])
def test_the_compute_percent_is_read(raw, percent):
    assert parse_compute_percent(raw) == percent


@pytest.mark.parametrize("raw", ["0", "101", "-5", "half", "nan", "inf", "50%"])
def test_a_malformed_compute_percent_is_refused_naming_the_variable(raw):
    with pytest.raises(SettingsError, match=f"^{COMPUTE_VARIABLE}:.*max_compute_percent"):
        parse_compute_percent(raw)


def test_the_share_is_read_from_the_environment_and_absent_without_its_variables():
    assert read_share({}) is None and read_share({MEMORY_VARIABLE: " ", COMPUTE_VARIABLE: ""}) is None
    share = read_share({MEMORY_VARIABLE: "0=2048M", COMPUTE_VARIABLE: "25"})
    assert share == GpuShare({"0": 2048}, 25.0)
    assert read_share({COMPUTE_VARIABLE: "40"}) == GpuShare({}, 40.0)  # no memory limit: nothing to plan


def test_a_device_takes_its_ordinals_limit_else_its_uuids_else_the_one_for_every_device():
    share = GpuShare(parse_memory_limit(f"0=1G,{UUID[:12]}=2G"), None)
    assert share.memory_mib(0, "GPU-ffff") == 1024
    assert share.memory_mib(1, UUID.lower()) == 2048
    assert share.memory_mib(1, UUID[4:]) == 2048  # torch writes the UUID without its prefix
    assert share.memory_mib(2, "GPU-ffff") is None  # the variable limits other devices only
    assert GpuShare({EVERY_DEVICE: 512}, None).memory_mib(3) == 512


def test_main_refuses_a_malformed_share_before_starting_anything(monkeypatch, capsys, restore_logging, tmp_path):
    for name, value in {
        "MODEL_NAME": "m",
        "MODEL_VERSION": "1",
        "MODEL_URI": str(tmp_path),
        MEMORY_VARIABLE: "2048",
    }.items():
        monkeypatch.setenv(name, value)
    assert main([]) == 2
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["setting"] == MEMORY_VARIABLE and "'2048'" in line["error"] and "M or G" in line["error"]


# -- the plan -------------------------------------------------------------------------------------------------------


def linear(per_input: int):
    return lambda size: size * per_input


def test_the_largest_batch_is_the_largest_whose_estimate_fits_with_the_weights_and_the_reserve():
    budget = 100 * MIB * (1 - RESERVE_FRACTION) - 10 * MIB
    per_input = int(budget // 7) + 1  # 6 inputs fit, 7 do not
    plan = plan_batches(100, 10 * MIB, linear(per_input), 32, 128)
    assert plan.largest_batch == 6 and plan.batch_bytes == 6 * per_input <= budget < 7 * per_input
    assert plan_batches(100, 10 * MIB, linear(per_input), 4, 128).largest_batch == 4  # never above MAX_BATCH_SIZE
    assert plan_batches(100, 10 * MIB, linear(1), 1, 128).largest_batch == 1


def test_a_model_that_cannot_fit_one_input_is_refused_with_what_it_needs_and_the_fixes():
    with pytest.raises(ShareTooSmall) as refused:
        plan_batches(100, 50 * MIB, linear(60 * MIB), 32, 512)
    message = str(refused.value)
    assert refused.value.variable == MEMORY_VARIABLE
    assert (
        "GPU share of 100 MiB" in message
        and "50.0 MiB of weights" in message
        and "60.0 MiB for one input" in message
        and "512 tokens" in message
    )
    assert "gpu_share.memory_mib (at least 123 MiB)" in message and "MAX_SEQUENCE_LENGTH" in message  # 110 / 0.9


def test_without_an_estimate_of_a_batch_only_the_weights_are_checked():
    assert plan_batches(100, 50 * MIB, lambda size: None, 32, 1).largest_batch == 32
    with pytest.raises(ShareTooSmall, match=r"95\.0 MiB.*at least 106 MiB"):
        plan_batches(100, 95 * MIB, lambda size: None, 32, 1)


class FakeCuda:
    """torch.cuda's memory statistics, driven by the fake handler's forward (no GPU here)."""

    def __init__(self, allocated: int) -> None:
        self.allocated, self.peak = allocated, allocated

    def install(self, monkeypatch) -> None:
        import torch

        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: self.allocated)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: self.peak)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", self.reset)

    def reset(self, device=None) -> None:
        self.peak = self.allocated


class MeasuredHandler:
    def __init__(self, cuda: FakeCuda, activations: int, fails: BaseException | None = None) -> None:
        self.cuda, self.activations, self.fails, self.shapes = cuda, activations, fails, []

    def warmup_input(self, length):
        return Encoded(length, {"input_ids": np.zeros(length, dtype=np.int32)})

    def forward(self, batch):
        self.shapes.append((batch.size, batch.seq_len, batch.lengths.tolist()))
        if self.fails is not None:
            raise self.fails
        self.cuda.peak = max(self.cuda.peak, self.cuda.allocated + self.activations)


def test_on_a_gpu_one_forward_of_a_single_input_at_the_longest_length_is_measured(monkeypatch):
    cuda = FakeCuda(allocated=300 * MIB)
    cuda.install(monkeypatch)
    cuda.peak = 900 * MIB  # the load's own peak: not the forward's
    handler = MeasuredHandler(cuda, activations=12 * MIB)
    assert gpu_share.measure_input_bytes(handler, 256, "cuda:0") == 12 * MIB
    assert handler.shapes == [(1, 256, [256])]


def test_a_measuring_forward_that_runs_out_of_the_shares_memory_is_a_refusal(monkeypatch):
    import torch

    cuda = FakeCuda(allocated=300 * MIB)
    cuda.install(monkeypatch)
    handler = MeasuredHandler(cuda, 0, fails=torch.cuda.OutOfMemoryError("CUDA out of memory"))
    with pytest.raises(ShareTooSmall, match=f"^{MEMORY_VARIABLE}:.*gpu_share.memory_mib.*MAX_SEQUENCE_LENGTH"):
        gpu_share.measure_input_bytes(handler, 512, "cuda:0")


# -- the server on a share (CPU: the same plan, on the handler's estimate) --------------------------------------------


def start_on_a_share(monkeypatch, model_dir, limit: str, **overrides) -> LocalModel:
    monkeypatch.setenv(MEMORY_VARIABLE, limit)
    monkeypatch.setenv(COMPUTE_VARIABLE, "50")
    local = LocalModel(make_settings(model_dir, **overrides))
    local.start()
    return local


def test_the_server_refuses_to_start_when_one_input_does_not_fit_the_share(monkeypatch, tiny_classifier_dir, caplog):
    local = start_on_a_share(monkeypatch, tiny_classifier_dir, "0=1M", max_sequence_length=512)
    try:
        deadline = time.monotonic() + 60
        while not local.exits and time.monotonic() < deadline:
            time.sleep(0.02)
        assert local.exits == [2]  # a setting to change: the share, or the sequence length
        error = local.runner.batcher.error
        assert isinstance(error, ShareTooSmall) and not local.runner.batcher.ready.is_set()
        assert "GPU share of 1 MiB" in str(error) and "one input of 512 tokens" in str(error)
        assert "gpu_share.memory_mib (at least" in str(error) and "MAX_SEQUENCE_LENGTH" in str(error)
        assert local.service.readiness() is not None
    finally:
        local.stop()


def test_the_batches_warmed_and_served_are_clamped_within_the_share(monkeypatch, tiny_classifier_dir, caplog):
    caplog.set_level(logging.INFO, logger="inference_server.model")
    local = start_on_a_share(monkeypatch, tiny_classifier_dir, "1M")
    try:
        wait_ready(local.service)
        batcher, handler = local.runner.batcher, model_handler(local.service)
        largest = batcher.max_batch_size
        assert 1 < largest < 8 and batcher.batch_sizes[-1] == largest  # MAX_BATCH_SIZE is 8
        budget = 1 * MIB * (1 - RESERVE_FRACTION) - handler.weights_bytes()
        assert handler.activation_bytes(largest, 64) <= budget < handler.activation_bytes(largest + 1, 64)
        local.runner.batch_sizes.take()
        predictions, _ = infer(local.service, [f"text number {i}" for i in range(16)])
        sizes = local.runner.batch_sizes.take()
        assert len(predictions) == 16 and sizes is not None and sizes["Max"] <= largest
        lines = {r.getMessage(): json.loads(JsonFormatter().format(r)) for r in caplog.records}
        assert lines["GPU share"]["memory_limit"] == "1M" and lines["GPU share"]["compute_percent"] == 50.0
        plan = lines["batch sizes planned within the GPU share"]
        assert (plan["limit_mib"], plan["largest_batch"], plan["max_batch_size"], plan["length"]) == (1, largest, 8, 64)
        assert plan["weights_mib"] > 0 and plan["input_mib"] > 0
        assert (
            f"MAX_BATCH_SIZE to at most {largest}"
            in lines["MAX_BATCH_SIZE does not fit the GPU share; serving smaller batches"]["fix"]
        )
    finally:
        local.stop()


def test_the_estimate_of_a_text_model_grows_with_the_batch_and_the_square_of_the_length(classifier_service):
    handler = model_handler(classifier_service)
    assert handler.activation_bytes(8, 64) == 8 * handler.activation_bytes(1, 64)
    assert handler.activation_bytes(1, 128) > 2 * handler.activation_bytes(1, 64)
    weights = sum(p.numel() * p.element_size() for p in handler.model.parameters())
    assert (
        weights
        <= handler.weights_bytes()
        <= weights + sum(b.numel() * b.element_size() for b in handler.model.buffers())
    )


# -- the model process's own figures --------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_busy_time_is_the_share_of_each_interval_spent_in_forwards():
    clock = Clock()
    busy = BusyTime(clock)
    with busy.forward():
        clock.now += 3
    clock.now += 7
    assert busy.take_percent() == 30.0
    clock.now += 10
    assert busy.take_percent() == 0.0  # only since the last interval
    with busy.forward():
        clock.now += 4
        assert busy.take_percent() == 100.0  # a forward still running counts up to now
        clock.now += 6
    clock.now += 10
    assert busy.take_percent() == 37.5  # 6 of its 10 seconds fell into this interval, of 16


def test_the_model_process_reports_its_own_gpu_memory_and_busy_time(echo_service, caplog):
    service = echo_service()
    runner = service.local_model.runner
    runner.emit_interval_metrics()  # the interval starts here
    with caplog.at_level(logging.INFO):
        runner.emit_interval_metrics()
    [document] = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.getMessage() == "metrics"]
    units = {d["Name"]: d["Unit"] for d in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert units[m.GPU_MEMORY_USED_MIB] == "Megabytes" and units[m.MODEL_BUSY_PERCENT] == "Percent"
    assert document[m.GPU_MEMORY_USED_MIB] == 0  # the CPU: nothing held on a GPU
    assert 0 <= document[m.MODEL_BUSY_PERCENT] < 5  # idle
    text = service.metrics.prometheus_text().decode()
    assert "gpu_memory_used_mib 0.0" in text
    assert f"model_busy_percent {document[m.MODEL_BUSY_PERCENT]}" in text


@pytest.mark.timing
def test_busy_percent_is_the_time_a_forward_held_the_model_over_the_interval(echo_service, caplog):
    service = echo_service()
    runner, handler = service.local_model.runner, model_handler(service)
    handler.gate.clear()
    # Bounds from this test's own clock, so they hold at any load: the interval is between the emits' inner and outer
    # times, and the forward held the model at least the 0.3 s the gate stayed shut, at most the request's whole time.
    before_first = time.monotonic()
    runner.emit_interval_metrics()
    after_first = time.monotonic()
    request = threading.Thread(target=infer, args=(service, ["held"]))
    request_started = time.monotonic()
    request.start()
    assert handler.entered.wait(10)
    time.sleep(0.3)
    handler.gate.set()
    request.join(10)
    request_done = time.monotonic()
    time.sleep(0.3)
    before_second = time.monotonic()
    with caplog.at_level(logging.INFO):
        runner.emit_interval_metrics()
    after_second = time.monotonic()
    [document] = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.getMessage() == "metrics"]
    busy = document[m.MODEL_BUSY_PERCENT]
    lowest = 100 * 0.3 / (after_second - before_first)
    highest = 100 * (request_done - request_started) / (before_second - after_first)
    assert lowest - 1 <= busy <= highest + 1, (busy, lowest, highest)
    assert service.metrics.prometheus_text().decode().count(f"model_busy_percent {busy}") == 1
