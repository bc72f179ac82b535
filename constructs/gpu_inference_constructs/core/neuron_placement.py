"""Where a task of a Neuron (Inferentia2) instance type can run, proven at synth, since ECS on EC2 does not.

ECS schedules GPUs, but not Neuron devices, on EC2: ``resourceRequirements`` of type ``NeuronDevice`` is for
Managed Instances only, and on the EC2 launch type a task maps the device files itself (``linuxParameters.devices``,
ECS developer guide, "Amazon ECS task definitions for AWS Neuron machine learning workloads"). So ECS would place a
second task on an instance whose devices the first one holds, and that task fails to open them ("Only one inference
task can run on each Inferentia chip"). The placement is made safe here instead: a task maps every device of its
instance, and it reserves more than half of the instance's CPU or memory, so ECS never finds room for a second one.
"""

from __future__ import annotations

from .errors import require
from .gpu_share import GpuShare
from .instance_catalog import GpuInstanceType

NEURON_DEVICE_PATH = "/dev/neuron{index}"
# The Neuron runtime reserves the NeuronCores this range names for the process (AWS Neuron docs, "Neuron Runtime
# configuration": NEURON_RT_VISIBLE_CORES, "Range of specific NeuronCores needed by the process"; NEURON_RT_NUM_CORES,
# their number, defaults to all). A server that chooses its own cores sets either, and this one is then left out.
NEURON_CORES_VARIABLE = "NEURON_RT_VISIBLE_CORES"
NEURON_CORE_VARIABLES = (NEURON_CORES_VARIABLE, "NEURON_RT_NUM_CORES")


def neuron_device_paths(instance_type: GpuInstanceType) -> list[str]:
    """``/dev/neuron0`` to ``/dev/neuron<N-1>``: every Neuron device of ``instance_type``."""
    return [NEURON_DEVICE_PATH.format(index=index) for index in range(instance_type.gpus)]


def visible_cores(instance_type: GpuInstanceType) -> str:
    """Every NeuronCore of ``instance_type`` as the runtime's range, such as ``0-1`` on an inf2.xlarge."""
    return f"0-{instance_type.neuron_cores - 1}"


def check_neuron_task(
    instance_type: GpuInstanceType,
    *,
    devices: int,
    gpu_share: GpuShare | None,
    cpu: int,
    memory_mib: int,
    sidecars: tuple[int, int],
) -> None:
    """A task reserving ``devices``, ``cpu`` units and ``memory_mib`` in all (``sidecars`` of them its sidecars') runs
    alone on an ``instance_type`` and holds every device of it."""
    name, count = instance_type.name, instance_type.gpus
    require(
        gpu_share is None,
        "gpu_share",
        f"a GPU share (NVIDIA MPS) on {name}, a Neuron type: Neuron devices are not shared; remove gpu_share",
    )
    require(
        devices == count,
        "gpus",
        f"{devices} Neuron devices per task on {name} ({count}): ECS on EC2 does not schedule Neuron devices, so a "
        f"task maps every device of its instance and runs alone on it; set gpus to {count}, or pick a type with "
        f"{devices} devices",
    )
    instance_cpu, instance_memory = instance_type.task_cpu_limit_units, instance_type.memory_gib * 1024
    if 2 * cpu > instance_cpu or 2 * memory_mib > instance_memory:
        return
    sidecar_cpu, sidecar_memory = sidecars
    cpu_needed = instance_cpu // 2 + 1 - sidecar_cpu
    memory_needed = instance_memory // 2 + 1 - sidecar_memory
    require(
        False,
        "cpu",
        f"the task reserves {cpu} CPU units and {memory_mib} MiB (sidecars included), each at most half of {name}'s "
        f"{instance_cpu} units and {instance_memory} MiB, so ECS could place two tasks on one instance and the second "
        f"could not open its Neuron devices; set cpu to at least {cpu_needed} or memory_mib to at least "
        f"{memory_needed} (more than half of the instance with the sidecars)",
    )
