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
fits its share budget (the GPU's memory less the advisor's --vram-headroom) and their compute percents sum to at most
100 and it has fewer than MPS_CLIENTS_PER_GPU clients, an instance while its tasks' CPU units and memory fit what a
task may reserve there (instance_catalog's task limits, less AGENT_RESERVED_CPU). Then, on that many instances, the
tasks are spread as ECS's placement (spread across instances) would, largest first onto the instance with the fewest
tasks; if that does not fit, the first-fit placement stands.

Price: each instance's hourly price is split across its tasks in proportion to the larger of each task's GPU memory
fraction and compute fraction of the instance; the instance is paid in full by its tasks, idle room included. A model's
USD per 1M requests = its tasks' hourly share / (requests per second x 3600) x 1e6, On-Demand and Spot.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..bundled_server import BundledServer, BundledServerProps
from ..deployment_capacity import deploying_at_peak
from ..errors import ConfigError
from ..gpu_capacity import GpuCapacityProps
from ..gpu_packing import check_shared_group_holds_deployment_at_peak, shared_service
from ..gpu_share import MIN_SHARE_MIB, GpuShare, device_memory_mib
from ..instance_catalog import GpuInstanceType
from ..model_entry import server_for, split_model_entry
from ..model_props import AGENT_RESERVED_CPU, MODEL_NAME, ModelProps, service_deployment
from ..scaling_props import ModelScalingProps
from ..settings import from_dict
from .advisor import TypeAdvice, advise, types_in_region
from .model_shape import BYTES_PER_PARAM, ModelShape, from_model_dir
from .runtimes import RUNTIME_FACTORS
from .workload import SERVER_CEILING_RPS, SERVER_CEILING_SOURCE, Assumptions, Purchase, Workload

MIB = 2**20
GROUP = "shared"  # the capacity group the fragment puts the shared models in
MAX_TASKS = 100  # ModelProps.max_tasks' upper bound
MAX_INSTANCE_TYPES = 20  # the capacity lists at most this many: the best, then its fallbacks
UNBOUNDED = 10**6  # a max_capacity no packing reaches: what the deployment-at-peak check needs is its answer


@dataclass(frozen=True)
class Figure:
    """A figure the packing uses: its value, what it is (measured, documented, estimated) and its basis."""

    value: float
    label: str
    basis: str


CUDA_CONTEXT_MIB = Figure(
    512, "estimated",
    "one CUDA context per MPS client: since Volta each MPS client keeps its own GPU address space and context storage, "
    "'so the resource reduction is to a much lesser degree' (NVIDIA MPS documentation, When to Use MPS); a PyTorch "
    "process's context with lazy module loading measured 274 MiB (287,047,680 bytes, pytorch/pytorch PR #86509), "
    "'around 400MB' (pytorch/pytorch issue #109888) and 426 MiB (RTX 6000 Ada, PyTorch 2.10 cu130, "
    "unslothai/unsloth-zoo PR #1053); 512 covers the largest and the model's kernels, loaded lazily at its first "
    "forward. Not measured under MPS or on these GPUs")
CUBLAS_WORKSPACE_MIB = Figure(
    9.125, "documented",
    "PyTorch's cuBLAS workspaces before Hopper: CUBLAS_WORKSPACE_CONFIG's default ':4096:2:16:8' (8,320 KiB) and the "
    "1,024 KiB cuBLASLt workspace (aten/src/ATen/cuda/CublasHandlePool.cpp), allocated at the first GEMM and kept")
ALLOCATOR_RESERVE = Figure(
    0.25, "estimated",
    "PyTorch's caching allocator keeps freed blocks: allocations up to 1 MiB in 2 MiB segments, 1-10 MiB in 20 MiB "
    "segments, larger rounded up to 2 MiB (c10/cuda/CUDACachingAllocator.cpp: kSmallBuffer, kLargeBuffer, "
    "kRoundLarge), and batches of other shapes fragment them; 25 % of the weights and activations, at least two "
    "20 MiB segments. Not measured")
ALLOCATOR_RESERVE_MIN_MIB = 40
SHARE_GRANULARITY_MIB = MIN_SHARE_MIB  # gpu_share's own minimum: shares are whole multiples of it
MPS_CLIENTS_PER_GPU = Figure(
    48, "documented",
    "NVIDIA's MIG user guide: 'CUDA MPS is supported on top of MIG. The only limitation is that the maximum number of "
    "clients (48) is lowered proportionally to the Compute Instance size' (read in a secondary quote; verify at "
    "docs.nvidia.com/deploy/mps)")
SERVER_PROCESSES_MIB = Figure(
    544, "measured",
    "the bundled server's model process (463 MiB) and one HTTP worker (81 MiB) at ready, python -m bench.startup "
    "--repeats 3 --workers 2, 2026-12-05 (bench/README.md), on the CPU build")
CUDA_HOST_MIB = Figure(
    512, "estimated",
    "CUDA's host side (driver, runtime and libraries mapped at context creation): a process's resident memory grew "
    "1,122 MiB at its first .to('cuda') when every kernel was loaded eagerly (pytorch/pytorch issue #12873, 2018); lazy "
    "module loading, PyTorch's default since 1.13, cut the device side from 636 to 274 MiB (PR #86509): 1,122 x "
    "274 / 636 = 483, taken as 512. Not measured: bench.startup runs on the CPU")
TASK_MEMORY_GRANULARITY_MIB = 256
TASK_CPU_GRANULARITY = 256  # ModelProps' smallest cpu


@dataclass(frozen=True)
class PackModel:
    """One entry of MODELS.json: the model, its traffic, and the task size it asks for (None: the advisor's)."""

    name: str
    shape: ModelShape
    workload: Workload
    version: str = "1"
    cpu: int | None = None
    memory_mib: int | None = None


# MODELS.json's keys: the single-model advisor's flags without the dashes ('hidden_size' or 'hidden-size'), plus the
# task's size. LLMs are not packed (see refuse_llm), so neither concurrency nor PROMPT,OUTPUT tokens are taken.
MODEL_KEYS = (
    "name", "version", "model_dir", "params", "dtype", "kind", "layers", "hidden_size", "heads", "kv_heads",
    "intermediate_size", "requests_per_second", "p95_ms", "tokens_per_request", "max_batch_size", "runtime", "cpu",
    "memory_mib",
)
EXAMPLE = ('[{"name": "minilm", "params": 22000000, "dtype": "fp16", "kind": "encoder", "layers": 6, "hidden_size": 384, '
           '"heads": 12, "intermediate_size": 1536, "requests_per_second": 50, "p95_ms": 100}]')


def read_models(path: str | Path) -> list[PackModel]:
    """MODELS.json: a list of models (model_dir is relative to the file's folder)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("MODELS.json", f"{str(path)!r} does not exist; give a JSON file with a list of models, e.g. "
                                         f"{EXAMPLE}") from None
    except json.JSONDecodeError as error:
        raise ConfigError("MODELS.json", f"{str(path)!r} is not JSON ({error})") from None
    return parse_models(data, path.parent)


def parse_models(data: Any, base: Path = Path()) -> list[PackModel]:
    if not isinstance(data, list):
        raise ConfigError("models", f"expected a list of models, got {type(data).__name__}: write MODELS.json as {EXAMPLE}")
    if not data:
        raise ConfigError("models", f"the list is empty: give at least one model, e.g. {EXAMPLE}")
    models: list[PackModel] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(data):
        key = f"models[{index}]"
        if not isinstance(raw, dict):
            raise ConfigError(key, f"expected an object with the model's keys, got {type(raw).__name__}, e.g. {EXAMPLE[1:-1]}")
        entry: dict[str, Any] = {}
        spelled: dict[str, str] = {}
        for raw_key, value in raw.items():
            name = str(raw_key).replace("-", "_")
            if name not in MODEL_KEYS:
                raise ConfigError(f"{key}.{raw_key}", f"unknown key; allowed keys: {', '.join(MODEL_KEYS)} (the single-model "
                                                      "advisor's flags, with '_' or '-')")
            if name in entry:
                raise ConfigError(f"{key}.{name}", f"given twice, as {spelled[name]!r} and {raw_key!r}: keep one")
            entry[name], spelled[name] = value, str(raw_key)
        if "name" not in entry:
            raise ConfigError(f"{key}.name", "required key is missing: name the model (its path /<name>/ and S3 prefix), "
                                             "e.g. \"name\": \"minilm\"")
        name = entry["name"]
        if not isinstance(name, str) or not MODEL_NAME.match(name):
            raise ConfigError(f"{key}.name", f"{name!r} is not a model name: 2-40 lowercase letters, digits and '-', "
                                             "starting with a letter (it becomes the path /<name>/)")
        if name in seen:
            raise ConfigError(f"{key}.name", f"{name!r} is listed twice (also models[{seen[name]}]): model names must be "
                                             "unique; rename one")
        seen[name] = index
        models.append(_pack_model(entry, key, base))
    return models


def _pack_model(entry: dict[str, Any], key: str, base: Path) -> PackModel:
    try:
        shape = _shape(entry, key, base)
        workload = _workload(entry, key)
    except ConfigError as error:
        if error.key.startswith("--"):  # ModelShape's and Workload's own checks name the CLI's flag
            raise ConfigError(f"{key}.{error.key[2:].replace('-', '_')}", error.detail) from None
        raise
    if shape.kind == "llm":
        raise ConfigError(f"{key}.kind", "an LLM is not packed: vLLM takes gpu_memory_utilization of the GPU it sees and a "
                                         "latency goal of seconds leaves nothing to share; size it alone with "
                                         "python -m gpu_inference_constructs.sizing --kind llm ... (whole GPUs)")
    version = entry.get("version", "1")
    if not isinstance(version, str):
        raise ConfigError(f"{key}.version", f"{version!r}: give the version as a string, e.g. \"1\"")
    cpu = _integer(entry, "cpu", key, low=256, hint="CPU units (1024 = one vCPU), at least 256")
    memory = _integer(entry, "memory_mib", key, low=512, hint="MiB the task reserves, at least 512")
    return PackModel(entry["name"], shape, workload, version, cpu, memory)


def _shape(entry: dict[str, Any], key: str, base: Path) -> ModelShape:
    dtype, kind = entry.get("dtype"), entry.get("kind")
    if dtype is not None and dtype not in BYTES_PER_PARAM:
        raise ConfigError(f"{key}.dtype", f"{dtype!r} is not supported; use one of: {', '.join(BYTES_PER_PARAM)}")
    if kind is not None and kind not in ("encoder", "llm"):
        raise ConfigError(f"{key}.kind", f"{kind!r} is not supported; use encoder")
    if "model_dir" in entry and "params" in entry:
        raise ConfigError(f"{key}.model_dir", "give model_dir or params, not both")
    if "model_dir" in entry:
        if not isinstance(entry["model_dir"], str):
            raise ConfigError(f"{key}.model_dir", f"{entry['model_dir']!r}: give a directory path (relative to MODELS.json's folder)")
        try:
            shape = from_model_dir(base / entry["model_dir"], dtype, kind)
        except ConfigError as error:
            raise ConfigError(f"{key}.{error.key[2:].replace('-', '_')}", error.detail) from None
        return replace(shape, name=entry["name"])
    if "params" not in entry:
        raise ConfigError(f"{key}.params", "describe the model: \"params\" with \"dtype\" and \"kind\" (and its geometry: "
                                           "layers, hidden_size, heads), or \"model_dir\"")
    params = _number(entry, "params", key)
    if dtype is None or kind is None:
        raise ConfigError(f"{key}.{'dtype' if dtype is None else 'kind'}",
                          "with params also give dtype (fp16, bf16, fp32, int8, int4) and kind (encoder)")
    geometry = {k: _integer(entry, k, key, low=1, hint="a positive whole number")
                for k in ("layers", "hidden_size", "heads", "kv_heads", "intermediate_size")}
    given = [k for k in ("layers", "hidden_size", "heads") if geometry[k] is not None]
    if given and len(given) < 3:
        missing = next(k for k in ("layers", "hidden_size", "heads") if geometry[k] is None)
        raise ConfigError(f"{key}.{missing}", "give layers, hidden_size and heads together (or none)")
    return ModelShape(params=int(params), dtype=dtype, kind=kind, name=entry["name"], layers=geometry["layers"],
                      hidden_size=geometry["hidden_size"], heads=geometry["heads"], kv_heads=geometry["kv_heads"],
                      intermediate_size=geometry["intermediate_size"])


def _workload(entry: dict[str, Any], key: str) -> Workload:
    if "requests_per_second" not in entry:
        raise ConfigError(f"{key}.requests_per_second", "required key is missing: the model's traffic, e.g. 50")
    tokens = entry.get("tokens_per_request", BundledServerProps.max_sequence_length)
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise ConfigError(f"{key}.tokens_per_request", f"{tokens!r}: give the tokens per text as a whole number, e.g. 128 "
                                                       "(an encoder's; LLMs are not packed)")
    runtime = entry.get("runtime", "eager")
    if runtime not in RUNTIME_FACTORS:
        raise ConfigError(f"{key}.runtime", f"{runtime!r}: use one of {', '.join(RUNTIME_FACTORS)}")
    batch = _integer(entry, "max_batch_size", key, low=1, hint="the server's largest batch, 1 to 512")
    return Workload(_number(entry, "requests_per_second", key),
                    _number(entry, "p95_ms", key) if "p95_ms" in entry else float(ModelScalingProps.latency_p95_ms),
                    tokens, max_batch_size=batch or BundledServerProps.max_batch_size, runtime=runtime)


def _number(entry: dict[str, Any], name: str, key: str) -> float:
    value = entry[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key}.{name}", f"{value!r}: give a number")
    return float(value)


def _integer(entry: dict[str, Any], name: str, key: str, low: int, hint: str) -> int | None:
    if name not in entry:
        return None
    value = entry[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{key}.{name}", f"{value!r}: give {hint}")
    return value


@dataclass
class Share:
    """One model's share on one instance type, and why each figure is what it is."""

    model: PackModel
    advice: TypeAdvice  # the single-model advisor's, on this type: the dedicated figure
    tasks: int
    need_mib: float  # weights + activations (the advisor's Memory)
    allocator_mib: float
    memory_mib: int  # the GPU share, rounded
    utilisation: float  # of the whole GPU, per task, at the model's rate
    throughput_percent: float
    latency_percent: float
    compute_percent: int
    cpu: int
    cpu_basis: str
    task_memory_mib: int
    memory_basis: str
    requests_per_second_per_task: float  # one task on its share, as scaling's target counts it

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def gpu_share(self) -> GpuShare:
        return GpuShare(self.memory_mib, self.compute_percent)

    def memory_formula(self) -> str:
        return (f"{self.memory_mib:,} MiB = {self.need_mib:,.0f} MiB weights and activations (the advisor's estimate) + "
                f"{self.allocator_mib:,.0f} allocator reserve ({ALLOCATOR_RESERVE.label}) + {CUDA_CONTEXT_MIB.value:g} CUDA "
                f"context ({CUDA_CONTEXT_MIB.label}) + {CUBLAS_WORKSPACE_MIB.value:g} cuBLAS workspaces "
                f"({CUBLAS_WORKSPACE_MIB.label}), rounded up to {SHARE_GRANULARITY_MIB}")

    def compute_formula(self) -> str:
        return (f"{self.compute_percent} % = max(throughput {self.throughput_percent:.2f} % (utilisation "
                f"{self.utilisation:.2%} of the GPU, the advisor's estimate, / target), latency {self.latency_percent:.2f} % "
                f"(one pass alone within p95)), rounded up")


@dataclass(frozen=True)
class Refusal:
    """Why a model has no share on a type: ``kind`` is what to change (memory, compute, latency, task, other)."""

    kind: str
    text: str


@dataclass
class Placed:
    share: Share
    task: int  # 0 .. tasks - 1


@dataclass
class Instance:
    gpus: list[list[Placed]]

    @property
    def tasks(self) -> list[Placed]:
        return [p for gpu in self.gpus for p in gpu]


@dataclass
class TypePack:
    """One candidate type: whether the models pack onto it, onto how many instances, and what each model then costs."""

    instance_type: GpuInstanceType
    price_usd: float
    price_source: str
    gpu_budget_mib: int
    cpu_budget: int
    memory_budget_mib: int
    refusals: dict[str, Refusal] = field(default_factory=dict)  # model name -> why it has no share here
    shares: list[Share] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)
    placement: str = ""  # "spread" or "first-fit"
    hourly_usd: dict[str, float] = field(default_factory=dict)
    model_hourly_usd: dict[str, dict[str, float]] = field(default_factory=dict)
    usd_per_million_requests: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.instance_type.name

    @property
    def fits(self) -> bool:
        return not self.refusals

    @property
    def reason(self) -> str:
        return "; ".join(f"{name!r}: {r.text}" for name, r in self.refusals.items())

    @property
    def dedicated_hourly_usd(self) -> dict[str, float]:
        return {k: sum(s.advice.hourly_usd.get(k, 0.0) for s in self.shares) for k in ("on_demand", "spot")}


@dataclass
class PackResult:
    models: list[PackModel]
    purchase: Purchase
    assumptions: Assumptions
    types: list[TypePack]  # cheapest packing first, the ones that cannot hold the models last
    dedicated: dict[str, TypeAdvice | None] = field(default_factory=dict)  # per model: the advisor's cheapest type
    capacity: dict | None = None
    model_blocks: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> TypePack | None:
        return self.types[0] if self.types and self.types[0].fits else None

    def snippet(self) -> dict:
        """What to paste into the environment: a capacity group of its own (a GPU in MPS mode takes only MPS
        containers) and the models."""
        names = [block["name"] for block in self.model_blocks]
        return {"capacity_groups": {GROUP: {"capacity": self.capacity, "models": names}}, "models": self.model_blocks}


def candidate_types(purchase: Purchase, only: list[str] | None) -> list[GpuInstanceType]:
    types = types_in_region(purchase.region)
    if only:
        known = {t.name: t for t in types}
        unknown = [name for name in only if name not in known]
        if unknown:
            raise ConfigError("--instance-types", f"{unknown} not offered in {purchase.region} or not in the catalog; "
                                                  f"known here: {', '.join(sorted(known))}")
        refused = [name for name in only if not known[name].cuda]
        if refused:
            raise ConfigError("--instance-types", f"{refused}: GPU sharing is NVIDIA MPS, a CUDA feature; pick CUDA types "
                                                  "(g4dn, g5, g6, g6e)")
        return [known[name] for name in dict.fromkeys(only)]
    return [t for t in types if t.cuda]


def pack(models: list[PackModel], purchase: Purchase, assumptions: Assumptions | None = None,
         only: list[str] | None = None) -> PackResult:
    """Shares, packing and prices of ``models`` on each candidate type; the cheapest packing's cdk.json blocks."""
    assumptions = assumptions or Assumptions()
    if not models:
        raise ConfigError("models", f"the list is empty: give at least one model, e.g. {EXAMPLE}")
    types = candidate_types(purchase, only)
    names = [t.name for t in types]
    advice = {m.name: {a.name: a for a in advise(m.shape, m.workload, purchase, assumptions, only=names)} for m in models}
    results = [_pack_type(t, models, advice, purchase, assumptions) for t in types]
    for index, model in enumerate(models):
        if all(model.name in r.refusals for r in results):
            _refuse(index, model, results)
    results.sort(key=lambda r: (not r.fits, r.hourly_usd.get("on_demand", math.inf), r.name))
    dedicated = {m.name: next((a for a in sorted(advice[m.name].values(), key=_dedicated_order) if a.ranked), None)
                 for m in models}
    result = PackResult(models, purchase, assumptions, results, dedicated)
    if result.best is None:
        raise ConfigError("models", "each model packs on some candidate type, but no type holds them all: "
                                    + "; ".join(f"{r.name}: {r.reason}" for r in results)
                                    + ". Split MODELS.json into files whose models share a type, or pass --instance-types")
    _recommend(result, assumptions)
    return result


def _dedicated_order(advice: TypeAdvice) -> tuple[float, str]:
    """The single-model advisor's own order: cheapest mix first."""
    return advice.usd_per_million_requests.get("mix") or math.inf, advice.name


# What to change when a model has no share on any type, by the kind of refusal (the first kind all types share).
REFUSAL_KEYS = {"memory": "params", "compute": "requests_per_second", "latency": "p95_ms", "task": "memory_mib",
                "other": "dtype"}


def _refuse(index: int, model: PackModel, results: list[TypePack]) -> None:
    """A model that no candidate type can hold on a share: refused, naming what to change."""
    why = {r.name: r.refusals[model.name] for r in results}
    if all(r.kind == "memory" for r in why.values()):
        largest = max(results, key=lambda r: r.gpu_budget_mib)
        raise ConfigError(f"models[{index}].params",
                          f"{model.name!r} is larger than any candidate GPU can share: {why[largest.name].text}. Serve it "
                          "in a smaller dtype (int8 halves the weights), or give it whole GPUs: leave it out of "
                          "MODELS.json and size it with python -m gpu_inference_constructs.sizing (it splits a model "
                          "over GPUs)")
    kinds = {r.kind for r in why.values()}
    kind = next(k for k in ("compute", "latency", "task", "memory", "other") if k in kinds)
    raise ConfigError(f"models[{index}].{REFUSAL_KEYS[kind]}", f"{model.name!r} cannot be packed on any candidate type: "
                                                               + "; ".join(f"{name}: {r.text}" for name, r in why.items()))


def _share(model: PackModel, advice: TypeAdvice, instance: GpuInstanceType, gpu_budget: int,
           assumptions: Assumptions) -> Share | Refusal:
    """The model's share on ``instance``, or why it has none."""
    if advice.memory is None or not advice.fits:
        return Refusal("memory" if advice.memory is not None else "other", advice.reason)
    throughput = advice.throughput
    if advice.gpus_per_task > 1:
        return Refusal("memory", f"needs {advice.gpus_per_task} GPUs per task, and a share is of one GPU")
    if throughput is None or not throughput.requests_per_second or advice.tasks is None:
        return Refusal("other", f"not costed ({throughput.formula if throughput else advice.reason})")
    if advice.too_slow:
        return Refusal("latency", f"misses its latency goal even on the whole GPU ({advice.reason.rsplit('; ', 1)[-1]})")
    if throughput.gpu_requests_per_second is None or throughput.single_pass_ms is None:
        return Refusal("other", f"no estimate of the whole GPU's throughput to size a compute share from ({throughput.source})")
    need = advice.memory.total_gib * 1024
    allocator = max(ALLOCATOR_RESERVE_MIN_MIB, ALLOCATOR_RESERVE.value * need)
    total = need + allocator + CUDA_CONTEXT_MIB.value + CUBLAS_WORKSPACE_MIB.value
    memory = math.ceil(total / SHARE_GRANULARITY_MIB - 1e-9) * SHARE_GRANULARITY_MIB
    if memory > gpu_budget:
        return Refusal("memory", f"needs {memory:,} MiB of GPU memory ({need:,.0f} MiB weights and activations + allocator, "
                                 f"CUDA context and cuBLAS), more than one {instance.gpu_model} of {instance.name} offers "
                                 f"shares ({gpu_budget:,} MiB)")
    tasks = advice.tasks
    per_task = model.workload.requests_per_second / tasks
    utilisation = per_task / throughput.gpu_requests_per_second
    throughput_percent = 100 * utilisation / assumptions.target_utilization
    room = model.workload.p95_ms - model.workload.max_batch_wait_ms
    latency_percent = 100 * 2 * throughput.single_pass_ms / room
    needed = max(throughput_percent, latency_percent)
    if needed > 100:
        return Refusal("compute", f"needs {needed:.0f} % of one {instance.gpu_model}'s compute per task (utilisation "
                                  f"{utilisation:.1%} at {per_task:g} req/s over the {assumptions.target_utilization:.0%} "
                                  "target, or one pass within p95): give it whole GPUs")
    percent = max(1, math.ceil(needed - 1e-9))
    cpu, cpu_basis = _task_cpu(model, per_task, assumptions)
    task_memory, memory_basis = _task_memory(model)
    capacity = min(throughput.gpu_requests_per_second * percent / 100, assumptions.server_ceiling_rps)
    return Share(model, advice, tasks, need, allocator, memory, utilisation, throughput_percent, latency_percent, percent,
                 cpu, cpu_basis, task_memory, memory_basis, capacity)


def _task_cpu(model: PackModel, per_task_rps: float, assumptions: Assumptions) -> tuple[int, str]:
    if model.cpu is not None:
        return model.cpu, "MODELS.json"
    units = 1024 * per_task_rps / (SERVER_CEILING_RPS * assumptions.target_utilization)
    cpu = max(TASK_CPU_GRANULARITY, math.ceil(units / TASK_CPU_GRANULARITY - 1e-9) * TASK_CPU_GRANULARITY)
    return cpu, (f"estimated: 1024 x {per_task_rps:g} req/s / ({SERVER_CEILING_RPS:,.0f} req/s per core x "
                 f"{assumptions.target_utilization:g}) = {units:.0f} units, at least {TASK_CPU_GRANULARITY} (measured ceiling: "
                 f"{SERVER_CEILING_SOURCE}); a reservation is a CPU share under contention, not a cap")


def _task_memory(model: PackModel) -> tuple[int, str]:
    if model.memory_mib is not None:
        return model.memory_mib, "MODELS.json"
    weights = model.shape.weight_bytes / MIB
    total = SERVER_PROCESSES_MIB.value + CUDA_HOST_MIB.value + weights
    memory = math.ceil(total / TASK_MEMORY_GRANULARITY_MIB - 1e-9) * TASK_MEMORY_GRANULARITY_MIB
    return memory, (f"{SERVER_PROCESSES_MIB.value:g} MiB server processes (measured) + {CUDA_HOST_MIB.value:g} CUDA host "
                    f"side (estimated) + {weights:,.0f} weights, rounded up to {TASK_MEMORY_GRANULARITY_MIB}")


def _pack_type(instance: GpuInstanceType, models: list[PackModel], advice: dict[str, dict[str, TypeAdvice]],
               purchase: Purchase, assumptions: Assumptions) -> TypePack:
    first = advice[models[0].name][instance.name]
    gpu_budget = int(device_memory_mib(instance.gpu_model, instance.gpu_memory_gib) * (1 - assumptions.vram_headroom))
    sidecar_cpu, sidecar_memory = BundledServer().sidecar_reservation
    result = TypePack(instance, first.price_usd, first.price_source, gpu_budget,
                      instance.task_cpu_limit_units - AGENT_RESERVED_CPU, instance.task_memory_limit_mib)
    for model in models:
        share = _share(model, advice[model.name][instance.name], instance, gpu_budget, assumptions)
        if isinstance(share, Refusal):
            result.refusals[model.name] = share
            continue
        share.cpu += sidecar_cpu
        share.task_memory_mib += sidecar_memory
        if share.cpu > result.cpu_budget or share.task_memory_mib > result.memory_budget_mib:
            result.refusals[model.name] = Refusal(
                "task", f"one task ({share.cpu} CPU units, {share.task_memory_mib} MiB) is more than a task may reserve on "
                        f"{instance.name} ({result.cpu_budget} units, {result.memory_budget_mib} MiB): give it a smaller "
                        "cpu or memory_mib")
            continue
        result.shares.append(share)
    if result.refusals:
        result.shares = []
        return result
    tasks = [Placed(s, t) for s in result.shares for t in range(s.tasks)]
    tasks.sort(key=lambda p: (-p.share.memory_mib, -p.share.compute_percent, -p.share.cpu, -p.share.task_memory_mib,
                              p.share.name, p.task))
    placed = _first_fit(tasks, result)
    spread = _spread(tasks, result, len(placed))
    result.instances, result.placement = (spread, "spread") if spread is not None else (placed, "first-fit")
    _price(result, purchase)
    return result


def _fits(instance: Instance, gpu: int, task: Placed, result: TypePack) -> bool:
    on_gpu = instance.gpus[gpu]
    everyone = instance.tasks
    return (sum(p.share.memory_mib for p in on_gpu) + task.share.memory_mib <= result.gpu_budget_mib
            and sum(p.share.compute_percent for p in on_gpu) + task.share.compute_percent <= 100
            and len(on_gpu) < MPS_CLIENTS_PER_GPU.value
            and sum(p.share.cpu for p in everyone) + task.share.cpu <= result.cpu_budget
            and sum(p.share.task_memory_mib for p in everyone) + task.share.task_memory_mib <= result.memory_budget_mib)


def _empty(result: TypePack) -> Instance:
    return Instance([[] for _ in range(result.instance_type.gpus)])


def _first_fit(tasks: list[Placed], result: TypePack) -> list[Instance]:
    """First-fit decreasing: each task onto the first instance and GPU that holds it, else a new instance."""
    instances: list[Instance] = []
    for task in tasks:
        spot = next(((i, g) for i in instances for g in range(len(i.gpus)) if _fits(i, g, task, result)), None)
        if spot is None:
            instances.append(_empty(result))
            spot = (instances[-1], 0)
            assert _fits(*spot, task, result)  # one task fits an empty instance: checked by _pack_type
        spot[0].gpus[spot[1]].append(task)
    return instances


def _spread(tasks: list[Placed], result: TypePack, count: int) -> list[Instance] | None:
    """The same tasks on ``count`` instances as ECS spreads them: largest first onto the instance with the fewest tasks
    (then the lowest), on its GPU with the most free memory; None if one does not fit there."""
    instances = [_empty(result) for _ in range(count)]
    for task in tasks:
        for instance in sorted(instances, key=lambda i: len(i.tasks)):
            gpus = sorted(range(len(instance.gpus)), key=lambda g: sum(p.share.memory_mib for p in instance.gpus[g]))
            gpu = next((g for g in gpus if _fits(instance, g, task, result)), None)
            if gpu is not None:
                instance.gpus[gpu].append(task)
                break
        else:
            return None
    return instances


def task_weight(placed: Placed, result: TypePack) -> float:
    """A task's claim on its instance: the larger of its GPU memory and compute fractions of the whole instance."""
    gpus = result.instance_type.gpus
    return max(placed.share.memory_mib / (result.gpu_budget_mib * gpus), placed.share.compute_percent / (100 * gpus))


def _price(result: TypePack, purchase: Purchase) -> None:
    spot = result.price_usd * purchase.spot_fraction
    result.hourly_usd = {"on_demand": len(result.instances) * result.price_usd, "spot": len(result.instances) * spot}
    hourly = {s.name: {"on_demand": 0.0, "spot": 0.0} for s in result.shares}
    for instance in result.instances:
        weights = {id(p): task_weight(p, result) for p in instance.tasks}
        total = sum(weights.values())
        for p in instance.tasks:
            hourly[p.share.name]["on_demand"] += result.price_usd * weights[id(p)] / total
            hourly[p.share.name]["spot"] += spot * weights[id(p)] / total
    result.model_hourly_usd = hourly
    for s in result.shares:
        per_hour = s.model.workload.requests_per_second * 3600
        result.usd_per_million_requests[s.name] = {k: v / per_hour * 1e6 for k, v in hourly[s.name].items()}


def _recommend(result: PackResult, assumptions: Assumptions) -> None:
    """The best packing as cdk.json: a capacity group of its own and each model with its gpu_share, validated."""
    best = result.best
    assert best is not None
    percents = {s.name: s.compute_percent for s in best.shares}
    fallbacks = [t for t in result.types[1:] if t.fits and t.instance_type.shape == best.instance_type.shape
                 and t.gpu_budget_mib >= best.gpu_budget_mib
                 and all(s.compute_percent <= percents[s.name] and s.memory_mib <= _memory(best, s.name) for s in t.shares)]
    chosen = [best, *fallbacks][:MAX_INSTANCE_TYPES]
    blocks = []
    for share in best.shares:
        max_tasks = min(MAX_TASKS, math.ceil(share.tasks * assumptions.peak_factor))
        block = {"name": share.name, "version": share.model.version, "task": "text-embedding",
                 "cpu": share.cpu, "memory_mib": share.task_memory_mib,
                 "gpu_share": {"memory_mib": share.memory_mib, "max_compute_percent": share.compute_percent},
                 "min_tasks": min(share.tasks, MAX_TASKS), "max_tasks": max_tasks,
                 "max_batch_size": max(1, min(512, _batch(share))),
                 "max_sequence_length": max(8, min(8192, share.model.workload.tokens_per_request)),
                 "scaling": {"requests_per_target_per_minute": max(1, math.floor(share.requests_per_second_per_task
                                                                                 * assumptions.target_utilization * 60)),
                             "latency_p95_ms": max(1, min(60_000, round(share.model.workload.p95_ms)))}}
        blocks.append(block)
    models = [_model_props(block, f"models[{i}]") for i, block in enumerate(blocks)]
    # The instances the app's own check counts for a deployment at peak (it returns them when they fit).
    peak = check_shared_group_holds_deployment_at_peak(UNBOUNDED, [t.instance_type for t in chosen],
                                                       [shared_service(m) for m in models])
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
        f"capacity_groups.{GROUP}: the shared models run on a capacity group of their own, since a GPU in MPS mode takes "
        "only MPS containers (ECS API reference, GpuSharingMode); add it beside the environment's capacity",
        f"max_capacity {max_capacity}: every model at max_tasks and {deploying.name!r} deploying "
        f"({deploying.tasks_during_deployment} tasks) need {peak} instances packed by GPU memory, CPU and memory as ECS "
        f"places them (the app's own check, gpu_packing.check_shared_group_holds_deployment_at_peak); "
        f"{len(best.instances)} hold{'s' if len(best.instances) == 1 else ''} the models at min_tasks",
        "ECS places a shared task by GPU memory only, and max_compute_percent is a limit, not a reservation (ECS API "
        "reference, NvidiaMpsAllocation): the percents on one GPU sum to at most 100 in this packing, but a task that "
        "scaling adds may land on a GPU whose limits sum past 100 (it then slows only while its neighbours are busy)",
    ]
    if len(chosen) > 1:
        result.notes.append(f"fallback types of the same shape, GPU memory and no slower GPU: {', '.join(t.name for t in chosen[1:])}")
    validate(result)


def _batch(share: Share) -> int:
    throughput = share.advice.throughput
    return (throughput.max_batch_size if throughput else None) or share.model.workload.max_batch_size


def _memory(result: TypePack, name: str) -> int:
    return next(s.memory_mib for s in result.shares if s.name == name)


def _model_props(block: dict, key: str) -> ModelProps:
    entry, _ = split_model_entry(block, key)
    return from_dict(ModelProps, entry, key)


def validate(result: PackResult) -> tuple[GpuCapacityProps, list[ModelProps]]:
    """The fragment through the loader and checks cdk.json goes through: capacity props, each model's props and server,
    one task fitting the group's smallest type (its share on one GPU), and the group holding a deployment at peak."""
    key = f"capacity_groups.{GROUP}.capacity"
    try:
        capacity = from_dict(GpuCapacityProps, result.capacity, key)
        smallest = capacity.smallest_instance_type()
        models = []
        for index, block in enumerate(result.model_blocks):
            entry, server_props = split_model_entry(block, f"models[{index}]")
            model = from_dict(ModelProps, entry, f"models[{index}]")
            server = server_for(server_props)
            server.check(model)
            model.check_fits(smallest, server.sidecar_reservation)
            models.append(model)
        check_shared_group_holds_deployment_at_peak(capacity.max_capacity, capacity.resolve_instance_types(),
                                                    [shared_service(m) for m in models], key=f"{key}.max_capacity")
    except ConfigError as error:
        raise ConfigError(error.key, f"the packed snippet does not validate (a bug in the advisor): {error.detail}") from None
    return capacity, models


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def figures() -> dict[str, dict]:
    """Every figure the packing takes that is not the single-model advisor's, labelled, with its basis."""
    named = {"cuda_context_mib": CUDA_CONTEXT_MIB, "cublas_workspace_mib": CUBLAS_WORKSPACE_MIB,
             "allocator_reserve": ALLOCATOR_RESERVE, "mps_clients_per_gpu": MPS_CLIENTS_PER_GPU,
             "server_processes_mib": SERVER_PROCESSES_MIB, "cuda_host_mib": CUDA_HOST_MIB}
    return {name: {"value": f.value, "label": f.label, "basis": f.basis} for name, f in named.items()}


def as_json(result: PackResult) -> dict:
    return {
        "models": [{"name": m.name, "version": m.version, "params": m.shape.params, "dtype": m.shape.dtype,
                    "kind": m.shape.kind, "requests_per_second": m.workload.requests_per_second,
                    "p95_ms": m.workload.p95_ms, "tokens_per_request": m.workload.tokens_per_request,
                    "cpu": m.cpu, "memory_mib": m.memory_mib} for m in result.models],
        "purchase": {"region": result.purchase.region, "spot_fraction": result.purchase.spot_fraction},
        "assumptions": {f.name: getattr(result.assumptions, f.name) for f in fields(result.assumptions)},
        "figures": figures(),
        "instance_types": [_type_json(t) for t in result.types],
        "dedicated": {name: _dedicated_json(a) for name, a in result.dedicated.items()},
        "recommendation": None if result.best is None else {**result.snippet(), "notes": result.notes},
    }


def _type_json(t: TypePack) -> dict:
    return {
        "instance_type": t.name,
        "fits": t.fits,
        "reason": t.reason,
        "refusals": {name: {"kind": r.kind, "reason": r.text} for name, r in t.refusals.items()},
        "gpus": t.instance_type.gpus,
        "gpu_memory_mib_for_shares": t.gpu_budget_mib,
        "task_cpu_units": t.cpu_budget,
        "task_memory_mib": t.memory_budget_mib,
        "on_demand_hourly_usd": t.price_usd,
        "price_source": t.price_source,
        "instances": len(t.instances) if t.fits else None,
        "placement": t.placement or None,
        "tasks_per_instance": [[[p.share.name for p in gpu] for gpu in i.gpus] for i in t.instances],
        "hourly_usd": {k: _round(v) for k, v in t.hourly_usd.items()},
        "dedicated_hourly_usd": {k: _round(v) for k, v in t.dedicated_hourly_usd.items()} if t.fits else None,
        "models": [{
            "name": s.name,
            "gpu_share": {"memory_mib": s.memory_mib, "max_compute_percent": s.compute_percent},
            "gpu_memory_mib": {"weights_and_activations": _round(s.need_mib, 1), "allocator_reserve": _round(s.allocator_mib, 1),
                               "cuda_context": CUDA_CONTEXT_MIB.value, "cublas_workspaces": CUBLAS_WORKSPACE_MIB.value,
                               "formula": s.memory_formula()},
            "utilisation": _round(s.utilisation, 5),
            "compute_percent": {"throughput": _round(s.throughput_percent, 3), "latency": _round(s.latency_percent, 3),
                                "formula": s.compute_formula()},
            "tasks": s.tasks,
            "cpu": s.cpu, "cpu_basis": s.cpu_basis,
            "memory_mib": s.task_memory_mib, "memory_basis": s.memory_basis,
            "requests_per_second_per_task": _round(s.requests_per_second_per_task, 2),
            "hourly_usd": {k: _round(v, 6) for k, v in t.model_hourly_usd[s.name].items()},
            "usd_per_million_requests": {
                "shared": {k: _round(v) for k, v in t.usd_per_million_requests[s.name].items()},
                "dedicated": {k: _round(s.advice.usd_per_million_requests.get(k)) for k in ("on_demand", "spot")},
            },
        } for s in t.shares],
    }


def _dedicated_json(advice: TypeAdvice | None) -> dict | None:
    if advice is None:
        return None
    return {"instance_type": advice.name, "tasks": advice.tasks, "instances": advice.instances,
            "usd_per_million_requests": {k: _round(advice.usd_per_million_requests.get(k)) for k in ("on_demand", "spot")}}


def _money(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if value >= 1 else f"{value:.4f}"


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)] if rows else [len(c) for c in columns]
    return ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(),
            "  ".join("-" * w for w in widths),
            *("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)]


def _ranges(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} ({len(names)} models)"


def table(result: PackResult) -> str:
    purchase, assumptions = result.purchase, result.assumptions
    lines = [f"pack: {len(result.models)} models on shared GPUs (ECS GPU sharing, NVIDIA MPS); {purchase.region}, Spot at "
             f"{purchase.spot_fraction:.0%} of On-Demand", ""]
    rows = []
    for t in result.types:
        if not t.fits:
            rows.append([t.name, str(t.instance_type.gpus), "-", "-", "-", "-", "-", "-"])
            continue
        per_instance = " ".join(str(len(i.tasks)) for i in t.instances)
        rows.append([t.name, str(t.instance_type.gpus), str(len(t.instances)), per_instance,
                     _money(t.hourly_usd["on_demand"]), _money(t.hourly_usd["spot"]),
                     _money(t.dedicated_hourly_usd["on_demand"]), _money(t.dedicated_hourly_usd["spot"])])
    lines += _table(["type", "GPUs", "inst", "tasks/inst", "shared $/h OD", "Spot", "dedicated $/h OD", "Spot"], rows)
    unfit = [t for t in result.types if not t.fits]
    if unfit:
        lines += ["", "Cannot pack:"] + [f"  {t.name}: {t.reason}" for t in unfit]
    best = result.best
    assert best is not None  # pack() refuses a list no type holds
    lines += ["", f"{best.name} x {len(best.instances)} ({best.placement}; GPU memory for shares {best.gpu_budget_mib:,} MiB "
                  f"per GPU, tasks may reserve {best.cpu_budget:,} CPU units and {best.memory_budget_mib:,} MiB per instance):"]
    where = {}
    for n, instance in enumerate(best.instances):
        for g, gpu in enumerate(instance.gpus):
            for p in gpu:
                where.setdefault(p.share.name, []).append(f"{n}/{g}")
    rows = []
    for s in best.shares:
        shared, alone = best.usd_per_million_requests[s.name], result.dedicated[s.name]
        dedicated = alone.usd_per_million_requests if alone else {}
        rows.append([s.name, ",".join(where[s.name]), f"{s.memory_mib:,}", str(s.compute_percent), f"{s.utilisation:.1%}",
                     str(s.cpu), f"{s.task_memory_mib:,}", _money(shared["on_demand"]), _money(dedicated.get("on_demand")),
                     _money(shared["spot"]), _money(dedicated.get("spot")), alone.name if alone else "-"])
    lines += _table(["model", "inst/GPU", "GPU MiB", "compute %", "util", "cpu", "memory MiB", "$/1M OD shared",
                     "dedicated", "Spot shared", "dedicated", "dedicated on"], rows)
    lines += ["", "Shares (estimates; each figure's basis under --json's figures):"]
    for text, names in _grouped(best, lambda s: f"GPU memory {s.memory_formula()}; compute {s.compute_formula()}"):
        lines.append(f"  {_ranges(names)}: {text}")
    for text, names in _grouped(best, lambda s: f"cpu {s.cpu} ({s.cpu_basis}); memory_mib {s.task_memory_mib} ({s.memory_basis})"):
        lines.append(f"  {_ranges(names)}: {text}")
    lines += [
        "",
        f"Split rule: each instance's hourly price is shared by its tasks in proportion to max(GPU memory share / "
        f"({best.gpu_budget_mib:,} MiB x GPUs), compute % / (100 x GPUs)); the instance is paid in full by its tasks. "
        "Dedicated: the single-model advisor's figure, whole GPUs, on its cheapest type (per type: --json).",
        f"Assumptions (flags of the single-model advisor): efficiency {assumptions.efficiency:g} of peak, "
        f"{assumptions.vram_headroom:.0%} of GPU memory kept free, tasks at {assumptions.target_utilization:.0%} utilisation, "
        f"max_tasks = {assumptions.peak_factor:g} x tasks",
        "",
        "cdk.json fragment (validated with GpuCapacityProps, ModelProps and gpu_packing's deployment-at-peak check):",
        compact_json(result.snippet()),
    ]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def compact_json(snippet: dict) -> str:
    """The fragment with one model (and the capacity) a line: twenty models stay readable."""
    group = snippet["capacity_groups"][GROUP]
    models = ",\n    ".join(json.dumps(m) for m in snippet["models"])
    return (f'{{\n  "capacity_groups": {{"{GROUP}": {{\n    "capacity": {json.dumps(group["capacity"])},\n'
            f'    "models": {json.dumps(group["models"])}}}}},\n  "models": [\n    {models}\n  ]\n}}')


def _grouped(result: TypePack, text) -> list[tuple[str, list[str]]]:
    groups: dict[str, list[str]] = {}
    for s in result.shares:
        groups.setdefault(text(s), []).append(s.name)
    return list(groups.items())

