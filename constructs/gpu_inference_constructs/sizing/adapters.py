"""Many fine-tunes of one LLM: every adapter over one base in one service (LoRA, ``lora`` in the vLLM or SGLang
props) against one service per fine-tune, each the cheapest type that fits and meets the goal, in USD per 1M tokens.

- one service: the whole traffic, the base's weights once, the adapter slots on the GPU in its memory
  (``--lora-resident`` at ``--lora-rank``), as many tasks as the traffic needs
- separate services: each fine-tune's share of the traffic (the total / the adapters, evenly), each its own service
  of at least one task on at least one instance
- USD per 1M tokens = the fleets' hourly cost (the purchase's On-Demand/Spot mix) / tokens per hour x 1e6

Each adapter's traffic is taken at the base's speed: the adapters' own matrix multiplies (small beside the base's at
ranks of 8 to 64) and a first request's wait for an adapter not on the GPU are not counted."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..core.errors import ConfigError
from .advisor import TypeAdvice, advise
from .model_shape import ModelShape
from .workload import Assumptions, Purchase, Workload


@dataclass(frozen=True)
class AdapterComparison:
    """The cheapest way to serve ``adapters`` fine-tunes both ways, and the tokens they generate per hour."""

    adapters: int
    shared: TypeAdvice
    separate: TypeAdvice
    tokens_per_hour: float

    @property
    def shared_hourly_usd(self) -> float:
        return self.shared.hourly_usd["mix"]

    @property
    def separate_hourly_usd(self) -> float:
        return self.adapters * self.separate.hourly_usd["mix"]

    @property
    def shared_usd_per_million_tokens(self) -> float:
        return self.shared_hourly_usd / self.tokens_per_hour * 1e6

    @property
    def separate_usd_per_million_tokens(self) -> float:
        return self.separate_hourly_usd / self.tokens_per_hour * 1e6


def compare_adapters(
    model: ModelShape,
    workload: Workload,
    purchase: Purchase,
    assumptions: Assumptions,
    adapters: int,
    only: list[str] | None = None,
) -> AdapterComparison:
    """``workload`` is the traffic of every fine-tune together, with its adapter slots (``lora_resident``)."""
    if model.kind != "llm" or not workload.output_tokens:
        raise ConfigError(
            "--kind", "LoRA adapters are fine-tunes of an LLM: give --kind llm and --tokens-per-request P,O"
        )
    if not 2 <= adapters <= 100_000:
        raise ConfigError("--adapters", f"{adapters}: the fine-tunes of the one base, from 2 to 100000")
    if not workload.lora_resident:
        raise ConfigError("--lora-rank", "give --lora-rank and --lora-resident: the adapter slots the GPU holds")
    shared = _cheapest(advise(model, workload, purchase, assumptions, only=only), "one service with every adapter")
    each = replace(workload, requests_per_second=workload.requests_per_second / adapters, lora_rank=0, lora_resident=0)
    separate = _cheapest(advise(model, each, purchase, assumptions, only=only), "one service per fine-tune")
    return AdapterComparison(
        adapters, shared, separate, workload.requests_per_second * 3600 * workload.tokens_per_request
    )


def _cheapest(advice: list[TypeAdvice], what: str) -> TypeAdvice:
    ranked = [a for a in advice if a.ranked]
    if not ranked:
        raise ConfigError(
            "--instance-types", f"no type fits and meets the latency goal for {what}; see the single-model report"
        )
    return ranked[0]  # advise orders the ranked types by the mix's cost


def table(result: AdapterComparison, model: ModelShape, workload: Workload, purchase: Purchase) -> str:
    shared, separate, n = result.shared, result.separate, result.adapters
    return "\n".join(
        [
            f"{n} LoRA fine-tunes of {model.name} ({model.params:.3g} params, {model.dtype}): "
            f"{workload.requests_per_second:g} req/s in all, {workload.prompt_tokens} prompt + "
            f"{workload.output_tokens} output tokens each, {purchase.region}",
            f"  one service, {n} adapters over one base ({workload.lora_resident} on the GPU at rank "
            f"{workload.lora_rank}): {shared.name}, {shared.tasks} task(s) on {shared.instances} instance(s), "
            f"${result.shared_hourly_usd:,.2f}/h = ${result.shared_usd_per_million_tokens:,.4f} per 1M tokens",
            f"  {n} separate services, {workload.requests_per_second / n:g} req/s each: {separate.name}, "
            f"{separate.tasks} task(s) on {separate.instances} instance(s) each, {n * (separate.instances or 0)} "
            f"instances, ${result.separate_hourly_usd:,.2f}/h = ${result.separate_usd_per_million_tokens:,.4f} per 1M "
            "tokens",
            f"  one base costs {result.shared_hourly_usd / result.separate_hourly_usd:.1%} of separate services",
            f"  {shared.reason}",
            "assumptions: the purchase mix's hourly prices (Spot at "
            f"{purchase.spot_fraction:g} of On-Demand above {purchase.on_demand_base} On-Demand instances and "
            f"{purchase.on_demand_percent}% On-Demand); each adapter's traffic at the base's speed (the adapters' own "
            "matrix multiplies and a first request's wait for an adapter not on the GPU not counted); traffic split "
            "evenly over the fine-tunes",
        ]
    )


def as_json(result: AdapterComparison) -> dict[str, Any]:
    def side(advice: TypeAdvice, hourly: float, per_million: float, services: int) -> dict[str, Any]:
        return {
            "services": services,
            "instance_type": advice.name,
            "tasks_per_service": advice.tasks,
            "instances_per_service": advice.instances,
            "hourly_usd": round(hourly, 4),
            "usd_per_million_tokens": round(per_million, 6),
        }

    return {
        "adapters": result.adapters,
        "tokens_per_hour": result.tokens_per_hour,
        "one_base": side(result.shared, result.shared_hourly_usd, result.shared_usd_per_million_tokens, 1),
        "separate": side(
            result.separate, result.separate_hourly_usd, result.separate_usd_per_million_tokens, result.adapters
        ),
    }
