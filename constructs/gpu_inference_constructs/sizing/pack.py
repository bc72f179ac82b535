"""Many small models on shared GPUs (ECS GPU sharing, NVIDIA MPS): each model's share, the fewest instances, the price.

``python -m gpu_inference_constructs.sizing pack MODELS.json [--region R] [--instance-types t1,t2] [--json]``.

Per candidate instance type (default: the advisor's CUDA types in the region) and per model, from the single-model
advisor's own figures on that type (``advise``):

- GPU memory share = weights + activations at the model's batch (the advisor's Memory) + the allocator's reserve
  (ALLOCATOR_RESERVE of that, at least ALLOCATOR_RESERVE_MIN_MIB) + one MPS client's CUDA context
  (CUDA_CONTEXT_MIB) + PyTorch's cuBLAS workspaces (CUBLAS_WORKSPACE_MIB), rounded up to SHARE_GRANULARITY_MIB;
- max_compute_percent = the larger of (a) the model's utilisation of the whole GPU at its request rate, over the
  advisor's target utilisation: 100 x requests/s per task / (the GPU's requests/s x target), and (b) the share at
  which one request alone still meets the latency goal by the advisor's own rule (batch wait + 2 x one pass <= p95):
  100 x 2 x one pass at full GPU / (p95 - batch wait); rounded up, 1 to 100;
- the task's CPU units and memory: what MODELS.json gives, else TASK_CPU (the HTTP path's measured ceiling) and
  TASK_MEMORY (measured server processes + estimated CUDA host side + the weights once more while loading).

Packing: first-fit decreasing by GPU memory onto the fewest instances, a GPU taking tasks while their shares' memory
fits its share budget (what ECS registers for the GPU, less the MPS server's context and the advisor's --vram-headroom)
and their compute percents sum to at most 100 and it has fewer than MPS_CLIENTS_PER_GPU clients, an instance while its
tasks' CPU units and memory fit what a task may reserve there (instance_catalog's task limits, less AGENT_RESERVED_CPU).
Then, on that many instances, the tasks are spread as ECS's placement (spread across instances) would, largest first
onto the instance with the fewest tasks; if that does not fit, the first-fit placement stands.

Price: each instance's hourly price is split across its tasks in proportion to the larger of each task's GPU memory
fraction and compute fraction of the instance; the instance is paid in full by its tasks, idle room included. A model's
USD per 1M requests = its tasks' hourly share / (requests per second x 3600) x 1e6, On-Demand and Spot.
"""

from __future__ import annotations

import math

from ..core.errors import ConfigError
from .advisor import TypeAdvice, advise
from .candidates import candidate_types
from .pack_models import EXAMPLE
from .pack_models import PackModel as PackModel
from .pack_models import parse_models as parse_models
from .pack_models import read_models as read_models
from .pack_placement import TypePack, pack_type
from .pack_report import as_json as as_json
from .pack_report import table as table
from .pack_result import PackResult
from .pack_snippet import recommend_snippet
from .pack_snippet import validate as validate
from .pool import pool_note
from .workload import Assumptions, Purchase


def pack(
    models: list[PackModel], purchase: Purchase, assumptions: Assumptions | None = None, only: list[str] | None = None
) -> PackResult:
    """Shares, packing and prices of ``models`` on each candidate type; the cheapest packing's cdk.json blocks."""
    assumptions = assumptions or Assumptions()
    if not models:
        raise ConfigError("models", f"the list is empty: give at least one model, e.g. {EXAMPLE}")
    types = candidate_types(purchase, only)
    names = [t.name for t in types]
    advice = {
        m.name: {a.name: a for a in advise(m.shape, m.workload, purchase, assumptions, only=names)} for m in models
    }
    results = [pack_type(t, models, advice, purchase, assumptions) for t in types]
    for index, model in enumerate(models):
        if all(model.name in r.refusals for r in results):
            _refuse(index, model, results)
    results.sort(key=lambda r: (not r.fits, r.hourly_usd.get("on_demand", math.inf), r.name))
    dedicated = {
        m.name: next((a for a in sorted(advice[m.name].values(), key=_dedicated_order) if a.ranked), None)
        for m in models
    }
    result = PackResult(models, purchase, assumptions, results, dedicated)
    if result.best is None:
        raise ConfigError(
            "models",
            "each model packs on some candidate type, but no type holds them all: "
            + "; ".join(f"{r.name}: {r.reason}" for r in results)
            + ". Split MODELS.json into files whose models share a type, or pass --instance-types",
        )
    recommend_snippet(result, assumptions)
    best = result.best
    total_rps = sum(m.workload.requests_per_second for m in models)
    note = pool_note(
        models, purchase, assumptions, best.name, best.hourly_usd.get("on_demand", math.inf) / (total_rps * 3600) * 1e6
    )
    if note is not None:
        result.notes.append(note)
    return result


def _dedicated_order(advice: TypeAdvice) -> tuple[float, str]:
    """The single-model advisor's own order: cheapest mix first."""
    return advice.usd_per_million_requests.get("mix") or math.inf, advice.name


# What to change when a model has no share on any type, by the kind of refusal (the first kind all types share).
REFUSAL_KEYS = {
    "memory": "params",
    "compute": "requests_per_second",
    "latency": "p95_ms",
    "task": "memory_mib",
    "other": "dtype",
}


def _refuse(index: int, model: PackModel, results: list[TypePack]) -> None:
    """A model that no candidate type can hold on a share: refused, naming what to change."""
    why = {r.name: r.refusals[model.name] for r in results}
    if all(r.kind == "memory" for r in why.values()):
        largest = max(results, key=lambda r: r.gpu_budget_mib)
        raise ConfigError(
            f"models[{index}].params",
            f"{model.name!r} is larger than any candidate GPU can share: {why[largest.name].text}. Serve it "
            "in a smaller dtype (int8 halves the weights), or give it whole GPUs: leave it out of "
            "MODELS.json and size it with python -m gpu_inference_constructs.sizing (it splits a model "
            "over GPUs)",
        )
    kinds = {r.kind for r in why.values()}
    kind = next(k for k in ("compute", "latency", "task", "memory", "other") if k in kinds)
    raise ConfigError(
        f"models[{index}].{REFUSAL_KEYS[kind]}",
        f"{model.name!r} cannot be packed on any candidate type: "
        + "; ".join(f"{name}: {r.text}" for name, r in why.items()),
    )
