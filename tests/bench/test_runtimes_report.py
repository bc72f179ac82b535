"""bench.runtimes: the table and the issue-23 verdict read only runtimes that passed their accuracy gate."""

from __future__ import annotations

import pytest

from bench.runtimes import main, table


def results(onnx_rps: float, onnx_passed: bool = True) -> dict:
    gate = {"metric": "min cosine", "value": 0.99999, "threshold": 0.999, "passed": onnx_passed}
    return {
        "config": {"concurrency": [1, 64]},
        "raw_model": {"best_items_per_s": 100.0},
        "gates": {
            "eager": {"passed": True, "metric": "reference", "value": 1.0, "threshold": 1.0},
            "onnx": gate if onnx_passed else {"passed": False, "refused": "min cosine 0.9 < 0.999"},
        },
        "runs": [
            {"runtime": "eager", "concurrency": 64, "throughput_rps": 110.0, "p95_ms": 600.0},
            {"runtime": "onnx", "concurrency": 64, "throughput_rps": onnx_rps, "p95_ms": 400.0},
        ],
    }


def test_a_gated_runtime_at_1_3_x_the_raw_model_meets_the_target():
    text = table(results(140.0))
    assert "[   met]" in text and ": 1.40" in text and "1.27" in text  # onnx over eager


def test_below_1_3_x_or_refused_by_its_gate_the_target_is_missed():
    assert "[MISSED]" in table(results(125.0))
    refused = table(results(500.0, onnx_passed=False))  # fast, but not accurate enough: it does not count
    assert "[MISSED]" in refused and "refused: min cosine 0.9" in refused and ": 1.10" in refused


def test_an_unknown_runtime_is_refused():
    with pytest.raises(SystemExit):
        main(["--runtimes", "eager,tensorrt"])
