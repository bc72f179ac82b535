"""The sizing advisor with a shared result cache: the GPUs are sized for the misses, and the cache's own bill
(ECPUs per KB per command, stored GB-hours with the metered minimum) is shown against what it saves."""

from __future__ import annotations

import json

import pytest

from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.sizing.cache_cost import cache_cost
from gpu_inference_constructs.sizing.cli import main

ENCODER = ["--params", "22e6", "--dtype", "fp16", "--kind", "encoder", "--tokens-per-request", "128"]


def test_the_bill_counts_a_lookup_per_request_and_a_store_per_miss():
    cost = cache_cost(1000, 0.5, 3000, 600)
    assert cost.gpu_requests_per_second == 500
    assert cost.ecpu_per_second == (1000 + 500) * 3  # 3 KB values: 3 ECPUs a command
    assert cost.stored_gb == pytest.approx(500 * 600 * 3160 / 1e9)
    assert cost.hourly_usd == pytest.approx(cost.stored_gb * 0.084 + 1500 * 3 * 3600 / 1e6 * 0.0023)


def test_a_small_cache_is_billed_the_metered_minimum():
    assert cache_cost(1, 0.9, 100, 60).stored_gb == 0.1


def test_a_hit_rate_of_one_or_more_is_refused():
    with pytest.raises(ConfigError, match=r"^--cache-hit-rate: .*0 to 0\.99"):
        cache_cost(10, 1.0, 100, 60)


def test_the_cli_sizes_the_gpus_for_the_misses_and_says_whether_the_cache_pays(capsys):
    assert main([*ENCODER, "--requests-per-second", "2000", "--json"]) == 0
    without = json.loads(capsys.readouterr().out)
    assert (
        main(
            [
                *ENCODER,
                "--requests-per-second",
                "2000",
                "--cache-hit-rate",
                "0.9",
                "--cache-value-bytes",
                "200",
                "--cache-ttl-seconds",
                "600",
                "--json",
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["workload"]["requests_per_second"] == pytest.approx(200)
    assert without["workload"]["requests_per_second"] == 2000
    cache = report["shared_cache"]
    assert cache["hit_rate"] == 0.9 and cache["monthly_usd"] == pytest.approx(cache["hourly_usd"] * 730)
    assert "so it pays" in cache["summary"][1] or "does not pay" in cache["summary"][1]
    assert main([*ENCODER, "--requests-per-second", "2000", "--cache-hit-rate", "1.5"]) == 2
