"""What a shared result cache changes in a sizing: the GPUs see only the misses, and the cache has its own bill.

ElastiCache Serverless for Valkey bills ECPUs (one per KB a command reads or writes, at least one) and data
stored (GB-hours, at least the metered minimum); prices are ResultCacheProps' (DESIGN-ADDITIONS-25). Every
request is one lookup; every miss is one store, kept for the TTL, so the cache holds about
misses/s x TTL values (fewer when misses repeat within the TTL: an upper bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.errors import ConfigError
from ..core.result_cache_props import ResultCacheProps

HOURS_PER_MONTH = 730
KEY_AND_OVERHEAD_BYTES = 160  # the key (~75 bytes) and Valkey's per-entry overhead


@dataclass(frozen=True)
class CacheCost:
    hit_rate: float
    gpu_requests_per_second: float  # what the GPUs still serve
    ecpu_per_second: float
    stored_gb: float
    hourly_usd: float
    storage_hourly_usd: float
    requests_hourly_usd: float

    @property
    def monthly_usd(self) -> float:
        return self.hourly_usd * HOURS_PER_MONTH


def cache_cost(
    requests_per_second: float,
    hit_rate: float,
    value_bytes: int,
    ttl_seconds: int,
    props: ResultCacheProps = ResultCacheProps(),
) -> CacheCost:
    if not 0 <= hit_rate < 1:
        raise ConfigError("--cache-hit-rate", f"{hit_rate:g}: give the share of requests the cache answers, 0 to 0.99")
    if value_bytes < 1 or ttl_seconds < 1:
        raise ConfigError("--cache-value-bytes", "value size and TTL must be positive")
    misses = requests_per_second * (1 - hit_rate)
    ecpu_per_command = max(1, math.ceil(value_bytes / 1024))
    ecpu = (requests_per_second + misses) * ecpu_per_command
    stored_gb = max(props.minimum_metered_gb, misses * ttl_seconds * (value_bytes + KEY_AND_OVERHEAD_BYTES) / 1e9)
    storage = stored_gb * props.storage_usd_per_gb_hour
    commands = ecpu * 3600 / 1e6 * props.usd_per_million_ecpu
    return CacheCost(hit_rate, misses, ecpu, stored_gb, storage + commands, storage, commands)


def describe(cost: CacheCost, gpu_hourly_without: float | None, gpu_hourly_with: float | None) -> list[str]:
    lines = [
        f"Shared cache at {cost.hit_rate:.0%} hits: the GPUs are sized for {cost.gpu_requests_per_second:g} req/s; "
        f"the cache costs ${cost.hourly_usd:.3f}/h (${cost.monthly_usd:,.0f}/month: storage "
        f"{cost.stored_gb:.2f} GB ${cost.storage_hourly_usd:.3f}/h, {cost.ecpu_per_second:,.0f} ECPU/s "
        f"${cost.requests_hourly_usd:.3f}/h)"
    ]
    if gpu_hourly_without is not None and gpu_hourly_with is not None:
        saved = gpu_hourly_without - gpu_hourly_with
        verdict = "pays" if saved > cost.hourly_usd else "does not pay"
        lines.append(
            f"GPUs ${gpu_hourly_without:.2f}/h without the cache, ${gpu_hourly_with:.2f}/h with it: "
            f"it saves ${saved:.2f}/h against its ${cost.hourly_usd:.3f}/h, so it {verdict}"
        )
    return lines
