"""The best packing as cdk.json blocks (a capacity group of its own and each model with its gpu_share), checked by
the loader and checks cdk.json goes through."""

from __future__ import annotations

import math

from ..capacity.gpu_packing import check_shared_group_holds_deployment_at_peak, shared_service
from ..core.capacity_props import GpuCapacityProps
from ..core.deployment_capacity import deploying_at_peak
from ..core.errors import ConfigError
from ..core.model_props import ModelProps, service_deployment
from ..core.settings import from_dict
from ..servers.bundled import BundledServerProps
from .pack_placement import TypePack
from .pack_result import GROUP, PackResult
from .pack_shares import Share
from .snippet_props import block_props
from .workload import Assumptions

MAX_TASKS = 100  # ModelProps.max_tasks' upper bound

MAX_INSTANCE_TYPES = 20  # the capacity lists at most this many: the best, then its fallbacks

DEFAULT_TASK = BundledServerProps.task  # a model whose MODELS.json entry names no task (a note says so)

UNBOUNDED = 10**6  # a max_capacity no packing reaches: what the deployment-at-peak check needs is its answer


def recommend_snippet(result: PackResult, assumptions: Assumptions) -> None:
    """The best packing as cdk.json: a capacity group of its own and each model with its gpu_share, validated."""
    best = result.best
    assert best is not None
    percents = {s.name: s.compute_percent for s in best.shares}
    fallbacks = [
        t
        for t in result.types[1:]
        if t.fits
        and t.instance_type.shape == best.instance_type.shape
        and t.gpu_budget_mib >= best.gpu_budget_mib
        and all(s.compute_percent <= percents[s.name] and s.memory_mib <= _memory(best, s.name) for s in t.shares)
    ]
    chosen = [best, *fallbacks][:MAX_INSTANCE_TYPES]
    blocks = []
    for share in best.shares:
        max_tasks = min(MAX_TASKS, math.ceil(share.tasks * assumptions.peak_factor))
        block = {
            "name": share.name,
            "version": share.model.version,
            "task": share.model.task or DEFAULT_TASK,
            "cpu": share.cpu,
            "memory_mib": share.task_memory_mib,
            "gpu_share": {"memory_mib": share.memory_mib, "max_compute_percent": share.compute_percent},
            "min_tasks": min(share.tasks, MAX_TASKS),
            "max_tasks": max_tasks,
            "max_batch_size": max(1, min(512, _batch(share))),
            "max_sequence_length": max(8, min(8192, share.model.workload.tokens_per_request)),
            "scaling": {
                "requests_per_target_per_minute": max(
                    1, math.floor(share.requests_per_second_per_task * assumptions.target_utilization * 60)
                ),
                "latency_p95_ms": max(1, min(60_000, round(share.model.workload.p95_ms))),
            },
        }
        blocks.append(block)
    models = [_model_props(block, f"models[{i}]") for i, block in enumerate(blocks)]
    # The instances the app's own check counts for a deployment at peak (it returns them when they fit).
    peak = check_shared_group_holds_deployment_at_peak(
        UNBOUNDED, [t.instance_type for t in chosen], [shared_service(m) for m in models]
    )
    purchase = result.purchase
    max_capacity = max(len(best.instances), peak)
    result.capacity = {
        "instance_types": [t.name for t in chosen],
        "on_demand_base_capacity": min(purchase.on_demand_base, max_capacity),
        "on_demand_percentage_above_base": purchase.on_demand_percent,
        "min_capacity": 0,
        "max_capacity": max_capacity,
    }
    result.model_blocks = blocks
    deploying = deploying_at_peak([service_deployment(m) for m in models])
    result.notes = [
        f"capacity_groups.{GROUP}: the shared models run on a capacity group of their own, since a GPU in MPS mode "
        "takes only MPS containers (ECS API reference, GpuSharingMode); add it beside the environment's capacity",
        f"max_capacity {max_capacity}: every model at max_tasks and {deploying.name!r} deploying "
        f"({deploying.tasks_during_deployment} tasks) need {peak} instances packed by GPU memory, CPU and memory as "
        "ECS places them (the app's own check, gpu_packing.check_shared_group_holds_deployment_at_peak); "
        f"{len(best.instances)} hold{'s' if len(best.instances) == 1 else ''} the models at min_tasks",
        "ECS places a shared task by GPU memory only, and max_compute_percent is a limit, not a reservation (ECS API "
        "reference, NvidiaMpsAllocation): the percents on one GPU sum to at most 100 in this packing, but a task that "
        "scaling adds may land on a GPU whose limits sum past 100 (it then slows only while its neighbours are busy)",
    ]
    untasked = [share.name for share in best.shares if share.model.task is None]
    if untasked:
        named = ", ".join(untasked[:3]) + (f" and {len(untasked) - 3} more" if len(untasked) > 3 else "")
        result.notes.append(
            f"task: {named} name no task in MODELS.json, so the fragment and the code say "
            f'{DEFAULT_TASK!r}; give each model\'s "task" there (text-classification, ...)'
        )
    if len(chosen) > 1:
        result.notes.append(
            f"fallback types of the same shape, GPU memory and no slower GPU: {', '.join(t.name for t in chosen[1:])}"
        )
    validate(result)


def _batch(share: Share) -> int:
    throughput = share.advice.throughput
    return (throughput.max_batch_size if throughput else None) or share.model.workload.max_batch_size


def _memory(result: TypePack, name: str) -> int:
    return next(s.memory_mib for s in result.shares if s.name == name)


def _model_props(block: dict, key: str) -> ModelProps:
    return block_props(block, key)[0]


def validate(result: PackResult) -> tuple[GpuCapacityProps, list[ModelProps]]:
    """The fragment through the loader and checks cdk.json goes through: capacity props, each model's props and server,
    one task fitting the group's smallest type (its share on one GPU), and the group holding a deployment at peak."""
    key = f"capacity_groups.{GROUP}.capacity"
    try:
        capacity = from_dict(GpuCapacityProps, result.capacity, key)
        smallest = capacity.smallest_instance_type()
        models = []
        for index, block in enumerate(result.model_blocks):
            model, server = block_props(block, f"models[{index}]")
            server.check(model)
            model.check_fits(smallest, server.sidecar_reservation)
            models.append(model)
        check_shared_group_holds_deployment_at_peak(
            capacity.max_capacity,
            capacity.resolve_instance_types(),
            [shared_service(m) for m in models],
            key=f"{key}.max_capacity",
        )
    except ConfigError as error:
        raise ConfigError(
            error.key, f"the packed snippet does not validate (a bug in the advisor): {error.detail}"
        ) from None
    return capacity, models
