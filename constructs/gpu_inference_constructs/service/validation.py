"""The one public validation of a model's service: every problem ``ModelService`` (and the capacity group it joins)
would refuse before building anything, from the typed props a caller builds, each with its key path and the fix.
The constructs run these very checks (``ModelService`` raises what :func:`validate_service` returns; ``GpuCapacity``
counts a model with the same :func:`gpu_packing.check_joins_group`), so an app that validates its own configuration
first, to name its own keys, reports what synth would, word for word."""

from __future__ import annotations

from collections.abc import Sequence

from ..capacity.gpu_packing import SharedService, check_joins_group, shared_service
from ..core.capacity_props import GpuCapacityProps
from ..core.deployment_capacity import ServiceDeployment
from ..core.errors import Problem, problems_of
from ..core.instance_catalog import GpuInstanceType
from ..core.log_archive_props import check_archive_flushes
from ..core.model_props import ModelProps, service_deployment
from ..core.neuron_capacity_props import NeuronCapacityProps
from ..core.schedules import ServiceSchedule, check_schedule_task_ranges
from ..core.service_timing import ServiceTimingProps
from ..task_telemetry.telemetry import TelemetryProps
from .checks import CheckedServer, check_fits, check_runs_on, task_timing


def validate_service(
    model: ModelProps,
    *,
    server: CheckedServer,
    capacity: GpuCapacityProps | NeuronCapacityProps | GpuInstanceType,
    beside: Sequence[ModelProps] = (),
    fleet_types: tuple[GpuInstanceType, ...] = (),
    timing: ServiceTimingProps | None = None,
    telemetry: TelemetryProps | None = None,
    schedules: Sequence[ServiceSchedule] = (),
) -> list[Problem]:
    """Every problem of ``model`` served by ``server`` (a preset such as ``VllmServer(props=...)``, or a
    ServerContract) on ``capacity``, with ``timing`` (default ServiceTimingProps()), ``telemetry`` (default
    TelemetryProps(): its log router's share of the task, its archive) and the ``schedules`` of its ServiceScaling.
    Empty where ModelService would build it.

    ``capacity`` is the props of the GpuCapacity or NeuronCapacity it joins, which already runs the models
    ``beside`` (the group must hold them all deploying at peak, on whole GPUs or on shares, never both), or, for a
    capacity provider of your own (ClusterCapacity), the smallest instance type it launches (``fleet_types``: every
    type it may launch, for a GPU share's smallest GPU).

    Each problem's key is the one the constructs raise: ``models[<model>].server`` (the server's accelerator is not
    the capacity's), the server's own keys (``vllm.max_model_len``: what ``server.check(model)`` refuses),
    ``models[<model>].<ModelProps key>`` (the task does not fit the instance; a group of shares and whole GPUs),
    ``timing.<key>`` (the server's drain and exit outlast the task's stop timeout or the Spot notice),
    ``telemetry.firelens.archive.<key>``, ``scaling.schedules[<i>].<key>`` and ``capacity.max_capacity``."""
    timing = timing or ServiceTimingProps()
    telemetry = telemetry or TelemetryProps()
    if isinstance(capacity, GpuInstanceType):
        instance_type = capacity
    else:
        instance_type, fleet_types = capacity.smallest_instance_type(), tuple(capacity.resolve_instance_types())
    runs_on = problems_of(
        lambda: check_runs_on(server.name, server.accelerator, instance_type, f"models[{model.name}].server")
    )
    problems = [*runs_on, *problems_of(lambda: server.check(model))]
    # A task for the other accelerator is not sized for this one; a task that fits no instance is not counted on it.
    unfit = runs_on or problems_of(
        lambda: check_fits(model, server, instance_type, fleet_types, telemetry.log_router_reservation)
    )
    if not runs_on:
        problems += unfit
    stop = problems_of(lambda: task_timing(server, timing, model.name))
    problems += stop
    firelens = telemetry.firelens
    if not stop and firelens is not None and firelens.archive is not None:
        archive = firelens.archive
        delay, _ = task_timing(server, timing, model.name)
        problems += problems_of(lambda: check_archive_flushes(archive, delay, model.name))
    problems += problems_of(lambda: check_schedule_task_ranges(model.name, model.min_tasks, model.max_tasks, schedules))
    if not unfit and not isinstance(capacity, GpuInstanceType):
        group = capacity
        problems += problems_of(lambda: _check_joins(model, group, beside))
    return problems


def _check_joins(
    model: ModelProps, capacity: GpuCapacityProps | NeuronCapacityProps, beside: Sequence[ModelProps]
) -> None:
    """``model`` joins the group of ``capacity`` after ``beside``, as the construct counts each."""
    whole: list[ServiceDeployment] = []
    shared: list[SharedService] = []
    for other in beside:
        if other.gpu_share is None:
            whole.append(service_deployment(other, in_gpus=True))
        else:
            shared.append(shared_service(other))
    check_joins_group(
        model, capacity.max_capacity, capacity.resolve_instance_types(), whole, shared, key="capacity.max_capacity"
    )
