"""The GPU instance types this library knows, their shape, GPU, regions and price.

cfn-lint does not check instance types inside a mixed-instances policy's ``Overrides``
(its rule E3628 covers Instance, LaunchTemplate and EC2Fleet only), so the props check every
type against this catalog, per region, before anything is synthesized.

Every figure of every entry has a source and the date it was read there: ``figure_sources(entry)``
(a test checks each field of each entry). In short:
- shapes (vCPUs, memory, GPUs): the "Accelerated computing" table of the Amazon EC2 instance types page;
- GPU memory, compute capability, BF16: NVIDIA's datasheets and CUDA GPU list, AWS's pages for the A10G;
- regions: the regional availability of each family, limited to the regions we have seen each family
  offered in; add a region here when you confirm it;
- prices: Amazon EC2 On-Demand, Linux, us-east-1, from the AWS Price List (see ``ON_DEMAND_HOURLY_USD``);
  used for the dashboard's cost estimate and the sizing advisor; pass ``hourly_price_usd`` in the
  monitoring props (or ``--price`` to the advisor) to use your own (a negotiated rate, another region);
- accelerators (memory bandwidth, dense FP16/BF16 tensor throughput): ``ACCELERATORS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .errors import ConfigError

PRICES_AS_OF = "2025-11 (us-east-1, Linux, On-Demand)"


@dataclass(frozen=True)
class GpuInstanceType:
    """One accelerated instance type as the library sizes and prices it: its shape (vCPUs, memory in GiB, GPUs), its
    GPU (model, memory in GiB, compute capability, bf16) and its On-Demand price (``PRICES_AS_OF``)."""

    name: str
    vcpus: int
    memory_gib: int
    gpus: int
    gpu_model: str
    gpu_memory_gib: int
    compute_capability: str
    supports_bf16: bool
    on_demand_hourly_usd: float
    cuda: bool = True
    """Whether its accelerators run CUDA, so the library's servers can deploy on it. Default: True (False for
    Inferentia and Trainium types, which the sizing tools list but never pick)."""
    neuron_cores_per_device: int = 0
    """NeuronCores on each of its Neuron devices (``gpus`` counts the devices). Default: 0 (not a Neuron type)."""

    @property
    def neuron(self) -> bool:
        """Whether it is a Neuron (Inferentia/Trainium) type: NeuronCapacity launches it, GpuCapacity refuses it."""
        return self.neuron_cores_per_device > 0

    @property
    def accelerator(self) -> Literal["cuda", "neuron"]:
        """What a server on it must be built for (``ServerContract.accelerator``)."""
        return "cuda" if self.cuda else "neuron"

    @property
    def neuron_cores(self) -> int:
        """NeuronCores on the whole instance (0 for a CUDA type)."""
        return self.gpus * self.neuron_cores_per_device

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def shape(self) -> tuple[int, int, int]:
        """What ECS managed scaling and task placement see: vCPUs, memory, GPUs."""
        return (self.vcpus, self.memory_gib, self.gpus)

    @property
    def task_memory_limit_mib(self) -> int:
        """Memory a task may reserve: the instance's memory less what the OS and ECS agent keep.

        The ECS-optimised AMI reports roughly 6% less than the nominal memory as registered; we
        keep a further margin so one task per GPU always fits.
        """
        return int(self.memory_gib * 1024 * 0.90)

    @property
    def task_cpu_limit_units(self) -> int:
        return self.vcpus * 1024


_T4 = ("NVIDIA T4", 16, "7.5", False)
_A10G = ("NVIDIA A10G", 24, "8.6", True)
_L4 = ("NVIDIA L4", 24, "8.9", True)
_L40S = ("NVIDIA L40S", 48, "8.9", True)


def _types(
    family_gpu: tuple[str, int, str, bool], rows: list[tuple[str, int, int, int, float]]
) -> list[GpuInstanceType]:
    gpu_model, gpu_memory, capability, bf16 = family_gpu
    return [
        GpuInstanceType(name, vcpus, memory, gpus, gpu_model, gpu_memory, capability, bf16, price)
        for name, vcpus, memory, gpus, price in rows
    ]


CATALOG: dict[str, GpuInstanceType] = {
    t.name: t
    for t in [
        *_types(
            _T4,
            [
                ("g4dn.xlarge", 4, 16, 1, 0.526),
                ("g4dn.2xlarge", 8, 32, 1, 0.752),
                ("g4dn.4xlarge", 16, 64, 1, 1.204),
                ("g4dn.8xlarge", 32, 128, 1, 2.176),
                ("g4dn.12xlarge", 48, 192, 4, 3.912),
                ("g4dn.16xlarge", 64, 256, 1, 4.352),
            ],
        ),
        *_types(
            _A10G,
            [
                ("g5.xlarge", 4, 16, 1, 1.006),
                ("g5.2xlarge", 8, 32, 1, 1.212),
                ("g5.4xlarge", 16, 64, 1, 1.624),
                ("g5.8xlarge", 32, 128, 1, 2.448),
                ("g5.12xlarge", 48, 192, 4, 5.672),
                ("g5.16xlarge", 64, 256, 1, 4.096),
            ],
        ),
        *_types(
            _L4,
            [
                ("g6.xlarge", 4, 16, 1, 0.8048),
                ("g6.2xlarge", 8, 32, 1, 0.9776),
                ("g6.4xlarge", 16, 64, 1, 1.3232),
                ("g6.8xlarge", 32, 128, 1, 2.0144),
                ("g6.12xlarge", 48, 192, 4, 4.6016),
            ],
        ),
        *_types(
            _L40S,
            [
                ("g6e.xlarge", 4, 32, 1, 1.861),
                ("g6e.2xlarge", 8, 64, 1, 2.24208),
                ("g6e.4xlarge", 16, 128, 1, 3.00424),
                ("g6e.8xlarge", 32, 256, 1, 4.52856),
                ("g6e.12xlarge", 48, 384, 4, 10.49264),
            ],
        ),
    ]
}

# Priced, non-CUDA accelerated types: the sizing advisor compares them; GpuCapacity refuses them (its AMI, user data
# and task definitions are CUDA's) and NeuronCapacity launches them (the Neuron AMI, /dev/neuron* device mappings, a
# Neuron SDK image and a compiled model). Shape (devices = ``gpus``, vCPUs, host memory): AWS Neuron docs, "AWS Inf2
# Architecture"; two NeuronCore-v2 per Inferentia2 chip and its 32 GiB: AWS Neuron docs, "Inferentia2 Architecture".
_INFERENTIA2 = ("AWS Inferentia2", 32, "n/a (Neuron)", True)
NON_CUDA_CATALOG: dict[str, GpuInstanceType] = {
    name: GpuInstanceType(name, vcpus, memory, devices, *_INFERENTIA2, price, cuda=False, neuron_cores_per_device=2)
    for name, vcpus, memory, devices, price in [
        ("inf2.xlarge", 4, 16, 1, 0.7582),
        ("inf2.8xlarge", 32, 128, 1, 1.96786),
        ("inf2.24xlarge", 96, 384, 6, 6.49063),
        ("inf2.48xlarge", 192, 768, 12, 12.98127),
    ]
}


@dataclass(frozen=True)
class AcceleratorSpec:
    """Per device. ``dense_fp16_tflops`` is tensor throughput without structured sparsity; None where no source
    publishes it."""

    memory_bandwidth_gb_per_s: float
    dense_fp16_tflops: float | None
    source: str
    as_of: str


ACCELERATORS: dict[str, AcceleratorSpec] = {
    "NVIDIA T4": AcceleratorSpec(
        320,
        65,
        "NVIDIA T4 Tensor Core GPU datasheet: 320+ GB/s GDDR6; 65 TFLOPS mixed precision (FP16/FP32), "
        "Turing has no structured sparsity so the figure is dense; no BF16",
        "2026-12-03",
    ),
    "NVIDIA A10G": AcceleratorSpec(
        600,
        None,
        "600 GB/s: Baseten, 'NVIDIA A10 vs A10G for ML model inference' (same 24 GB GDDR6 and bandwidth as "
        "the A10). Tensor throughput: the A10G is an AWS-only variant of the A10 and neither NVIDIA nor AWS publishes "
        "its FP16 tensor figure (searched 2026-12-03: NVIDIA's A10 datasheet covers the A10 only, AWS's G5 pages give "
        "none); Baseten's comparison says the A10G's tensor throughput differs from the A10's, and third-party tables "
        "disagree (62.5 TFLOPS in one, the A10's 125 in others), so none is recorded rather than a guess",
        "2026-12-03",
    ),
    "NVIDIA L4": AcceleratorSpec(
        300,
        121,
        "NVIDIA L4 datasheet: 300 GB/s; FP16/BF16 Tensor Core 242 TFLOPS with sparsity, i.e. 121 dense",
        "2026-12-03",
    ),
    "NVIDIA L40S": AcceleratorSpec(
        864,
        362.05,
        "NVIDIA L40S datasheet: 864 GB/s; FP16 and BF16 Tensor Core 362.05 TFLOPS dense (733 with sparsity)",
        "2026-12-03",
    ),
    "AWS Inferentia2": AcceleratorSpec(
        820,
        190,
        "AWS Neuron docs, Inferentia2 architecture: 32 GB HBM at 820 GB/s per chip (later revisions write "
        "GiB/s; the smaller unit is used); 190 FP16/BF16 TFLOPS per chip",
        "2026-12-03",
    ),
}

# On-Demand, Linux, USD per hour, by region. Only us-east-1 could be sourced (see the module
# docstring); a region missing here falls back to the us-east-1 price and says so.
ON_DEMAND_HOURLY_USD: dict[str, dict[str, float]] = {
    "us-east-1": {t.name: t.on_demand_hourly_usd for t in [*CATALOG.values(), *NON_CUDA_CATALOG.values()]},
}
ON_DEMAND_PRICE_SOURCE = (
    "AWS Price List (us-east-1, Linux, On-Demand) via aws/karpenter-provider-aws "
    "pkg/providers/pricing/zz_generated.pricing_aws.go, generated 2026-07-20; read 2026-12-03"
)


@dataclass(frozen=True)
class Sourced:
    """Where a catalog figure comes from, and the day (ISO date) it was read there."""

    source: str
    as_of: str


_SHAPES = Sourced(
    "vCPUs, memory and GPU count: the Accelerated computing table of the Amazon EC2 instance types page (recorded "
    "2026-12-02); re-checked 2026-12-03 against meta-pytorch/torchx torchx/specs/named_resources_aws.py (g4dn, g5, "
    "g6e, 'taken from aws.amazon.com/ec2/instance-types') and public instance maps listing g6 (xlarge to 16xlarge: 4 "
    "to 64 vCPUs at 4 GiB each, 12xlarge 48 vCPUs, 192 GiB, 4 GPUs)",
    "2026-12-03",
)
SHAPE_SOURCES: dict[str, Sourced] = {
    **{family: _SHAPES for family in ("g4dn", "g5", "g6", "g6e")},
    "inf2": Sourced(
        "AWS Neuron docs, 'AWS Inf2 Architecture' (aws-neuron/aws-neuron-sdk general/arch/neuron-hardware/"
        "inf2-arch.rst): Inferentia2 devices, vCPUs and host memory of inf2.xlarge (1, 4, 16 GiB), 8xlarge (1, 32, "
        "128), 24xlarge (6, 96, 384), 48xlarge (12, 192, 768); inf2.xlarge also EC2 DescribeInstanceTypes as "
        "captured in aws/karpenter-provider-aws pkg/fake/zz_generated.describe_instance_types.go",
        "2026-12-06",
    ),
}
GPU_SOURCES: dict[str, Sourced] = {
    # GPU memory, compute capability, BF16 support, and whether it runs CUDA.
    "NVIDIA T4": Sourced(
        "NVIDIA T4 datasheet: 16 GB GDDR6, Turing (compute capability 7.5, no BF16), recorded 2026-12-02", "2026-12-02"
    ),
    "NVIDIA A10G": Sourced(
        "24 GB GDDR6: Baseten's A10 vs A10G comparison and the RAPIDS deployment docs' AWS instance "
        "table (g5: A10G, 24 GB); Ampere GA102 (compute capability 8.6, BF16)",
        "2026-12-03",
    ),
    "NVIDIA L4": Sourced(
        "NVIDIA L4 datasheet: 24 GB GDDR6, FP16/BF16 tensor cores; Ada Lovelace (compute capability "
        "8.9), recorded 2026-12-02",
        "2026-12-02",
    ),
    "NVIDIA L40S": Sourced(
        "NVIDIA L40S datasheet: 48 GB GDDR6, FP16/BF16 tensor cores; Ada Lovelace (compute capability "
        "8.9), recorded 2026-12-02",
        "2026-12-02",
    ),
    "AWS Inferentia2": Sourced(
        "AWS Neuron docs, Inferentia2 architecture: 32 GB HBM, FP16/BF16, two NeuronCore-v2 per "
        "chip; runs Neuron-compiled models, not CUDA",
        "2026-12-06",
    ),
}
REGION_SOURCES: dict[str, Sourced] = {
    **{
        family: Sourced(
            "the family's regional availability on its Amazon EC2 page, limited to the regions we have seen "
            "it offered in",
            "2026-12-02",
        )
        for family in ("g4dn", "g5", "g6", "g6e")
    },
    "inf2": Sourced("us-east-1 only: the one region whose price was sourced", "2026-12-03"),
}
PRICE_SOURCE = Sourced(ON_DEMAND_PRICE_SOURCE, "2026-12-03")
PRICE_SOURCES_BY_FAMILY: dict[str, Sourced] = {
    "inf2": Sourced(
        "AWS Price List (us-east-1, Linux, On-Demand) via aws/karpenter-provider-aws pkg/providers/pricing/"
        "zz_generated.pricing_aws.go at 031e72b6, generated 2026-01-19 (inf2.xlarge 0.7582 as in the 2026-07-20 "
        "file the other prices come from)",
        "2026-12-06",
    ),
}


def figure_sources(instance_type: GpuInstanceType) -> dict[str, Sourced]:
    """Each figure of a catalog entry (its fields but the name, its regions, its accelerator's) -> its source and
    date."""
    shape, gpu = SHAPE_SOURCES[instance_type.family], GPU_SOURCES[instance_type.gpu_model]
    spec = ACCELERATORS[instance_type.gpu_model]
    accelerator = Sourced(spec.source, spec.as_of)
    return {
        "vcpus": shape,
        "memory_gib": shape,
        "gpus": shape,
        "gpu_model": shape,
        "gpu_memory_gib": gpu,
        "compute_capability": gpu,
        "supports_bf16": gpu,
        "cuda": gpu,
        "on_demand_hourly_usd": PRICE_SOURCES_BY_FAMILY.get(instance_type.family, PRICE_SOURCE),
        "neuron_cores_per_device": gpu,
        "regions": REGION_SOURCES[instance_type.family],
        "memory_bandwidth_gb_per_s": accelerator,
        "dense_fp16_tflops": accelerator,
    }


REGIONS_BY_FAMILY: dict[str, frozenset[str]] = {
    "g4dn": frozenset(
        {
            "us-east-1",
            "us-east-2",
            "us-west-1",
            "us-west-2",
            "ca-central-1",
            "sa-east-1",
            "eu-west-1",
            "eu-west-2",
            "eu-west-3",
            "eu-central-1",
            "eu-north-1",
            "ap-northeast-1",
            "ap-northeast-2",
            "ap-southeast-1",
            "ap-southeast-2",
            "ap-south-1",
        }
    ),
    "g5": frozenset(
        {
            "us-east-1",
            "us-east-2",
            "us-west-2",
            "ca-central-1",
            "eu-west-1",
            "eu-west-2",
            "eu-central-1",
            "eu-north-1",
            "ap-northeast-1",
            "ap-northeast-2",
            "ap-southeast-2",
            "ap-south-1",
        }
    ),
    "g6": frozenset(
        {
            "us-east-1",
            "us-east-2",
            "us-west-2",
            "ca-central-1",
            "eu-west-2",
            "eu-central-1",
            "ap-northeast-1",
            "ap-south-1",
        }
    ),
    "g6e": frozenset({"us-east-1", "us-east-2", "us-west-2"}),
    # Only where a price was sourced (us-east-1); add regions as you confirm them.
    "inf2": frozenset({"us-east-1"}),
}


def on_demand_price(name: str, region: str) -> tuple[float, str]:
    """USD per hour for ``name`` in ``region`` and where the figure comes from (a fallback says so)."""
    instance_type = CATALOG.get(name) or NON_CUDA_CATALOG[name]
    regional = ON_DEMAND_HOURLY_USD.get(region, {})
    if name in regional:
        return regional[name], f"{region} On-Demand, {ON_DEMAND_PRICE_SOURCE}"
    return instance_type.on_demand_hourly_usd, f"us-east-1 price: no sourced {region} price (pass --price {name}=USD)"


def lookup(name: str, key: str) -> GpuInstanceType:
    """The catalog entry for ``name``, or a ConfigError naming ``key`` if the name is unknown (or not a CUDA type).

    The region is not checked here: see :func:`~.instance_regions.region_warning`."""
    if name in NON_CUDA_CATALOG:
        raise ConfigError(
            key,
            f"{name!r} is an {NON_CUDA_CATALOG[name].gpu_model} (Neuron, not CUDA) instance type: the GPU capacity "
            "construct launches CUDA GPU types only (GPU AMI, NVIDIA runtime, CUDA image). Put Inferentia types in a "
            "NeuronCapacity (NeuronCapacityProps: the Neuron AMI, /dev/neuron device mappings) of their own; pick a "
            "g4dn, g5, g6 or g6e type here",
        )
    instance_type = CATALOG.get(name)
    if instance_type is None:
        raise ConfigError(
            key,
            f"{name!r} is not a known GPU instance type; known: {', '.join(sorted(CATALOG))} "
            "(add new types to gpu_inference_constructs.core.instance_catalog)",
        )
    return instance_type


def lookup_neuron(name: str, key: str) -> GpuInstanceType:
    """The Neuron catalog entry for ``name``, or a ConfigError naming ``key`` (a CUDA type, or an unknown one)."""
    instance_type = NON_CUDA_CATALOG.get(name)
    if name in CATALOG:
        raise ConfigError(
            key,
            f"{name!r} is a CUDA GPU type: a NeuronCapacity launches Inferentia2 types only (the Neuron "
            "AMI has no NVIDIA driver); put it in a GpuCapacity, or pick an inf2 type here",
        )
    if instance_type is None or not instance_type.neuron:
        known = sorted(n for n, t in NON_CUDA_CATALOG.items() if t.neuron)
        raise ConfigError(
            key,
            f"{name!r} is not a known Neuron instance type; known: {', '.join(known)} "
            "(add new types to gpu_inference_constructs.core.instance_catalog)",
        )
    return instance_type


def lookup_any(name: str, key: str) -> GpuInstanceType:
    """The catalog entry for ``name``, CUDA or Neuron (a capacity provider of a team's own launches either)."""
    return lookup_neuron(name, key) if name in NON_CUDA_CATALOG else lookup(name, key)


def is_neuron_type(name: str) -> bool:
    """Whether ``name`` is a Neuron type of the catalog."""
    return name in NON_CUDA_CATALOG and NON_CUDA_CATALOG[name].neuron
