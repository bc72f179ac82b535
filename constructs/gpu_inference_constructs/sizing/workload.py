"""The inputs besides the model: the traffic, the latency goal, the purchase mix and the stated assumptions."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import ConfigError
from .runtimes import RUNTIME_FACTORS

# Measured, not assumed: our server's ceiling with a null model (the HTTP path alone) and one HTTP worker, the full
# `make bench` of 2026-12-05 on the 2-core build machine (bench/README.md, "Latest results"). One HTTP worker per
# task, though a task with more vCPUs runs more (2 workers: 1.71 x in the same run).
SERVER_CEILING_RPS = 5252.0
SERVER_CEILING_SOURCE = (
    "our server with a null model and one HTTP worker, make bench 2026-12-05 on a 2-core build "
    "machine (bench/README.md)"
)


@dataclass(frozen=True)
class Workload:
    requests_per_second: float
    p95_ms: float
    prompt_tokens: int  # an encoder's tokens per text (its sequence length); an LLM's prompt
    output_tokens: int = 0
    """LLMs: tokens generated per request. Default: 0 (encoders)."""
    concurrency: int = 1
    """LLMs: sequences one task decodes together. Default: 1."""
    max_batch_size: int = 32
    """Encoders: the server's largest batch. Default: 32 (BundledServerProps.max_batch_size)."""
    max_batch_wait_ms: int = 2
    """Encoders: the server's wait to fill a batch, added to a request's latency. Default: 2."""
    runtime: str = "eager"
    """Encoders: BundledServerProps.runtime; scales the estimate by sizing.runtimes' factor. Default: "eager"."""
    lora_rank: int = 0
    """LLMs with LoRA adapters: the server's largest rank (``lora.max_rank``). Default: 0 (no adapters)."""
    lora_resident: int = 0
    """LLMs with LoRA adapters: adapter slots on the GPU (``lora.max_gpu_adapters``). Default: 0 (no adapters)."""

    def __post_init__(self) -> None:
        _positive(self.requests_per_second, "--requests-per-second", "requests per second, e.g. 200")
        _positive(self.p95_ms, "--p95-ms", "milliseconds, e.g. 250")
        _positive(
            self.prompt_tokens, "--tokens-per-request", "tokens, e.g. 128 (encoders) or 512,256 (LLMs: prompt,output)"
        )
        if self.output_tokens < 0:
            raise ConfigError("--tokens-per-request", f"{self.output_tokens} output tokens must be 0 or more")
        _positive(self.concurrency, "--concurrency", "sequences decoded together per task, e.g. 8")
        if self.runtime not in RUNTIME_FACTORS:
            raise ConfigError("--runtime", f"{self.runtime!r}: use one of {', '.join(RUNTIME_FACTORS)}")
        if (self.lora_rank > 0) != (self.lora_resident > 0) or min(self.lora_rank, self.lora_resident) < 0:
            raise ConfigError(
                "--lora-rank", "give --lora-rank and --lora-resident together, both positive (or neither)"
            )
        if not 1 <= self.max_batch_size <= 512:
            raise ConfigError(
                "--max-batch-size", f"{self.max_batch_size} is out of range; allowed 1 to 512 (BundledServerProps)"
            )

    @property
    def tokens_per_request(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True)
class Purchase:
    """How the fleet is bought: the environment's On-Demand base and share, and Spot's price as a fraction."""

    region: str = "us-east-1"
    """Where the fleet runs (prices and the types offered). Default: "us-east-1"."""
    on_demand_base: int = 0
    """Instances bought On-Demand before any Spot (GpuCapacityProps.on_demand_base_capacity). Default: 0."""
    on_demand_percent: int = 0
    """On-Demand share above the base (GpuCapacityProps.on_demand_percentage_above_base). Default: 0 (all Spot)."""
    spot_fraction: float = 0.4
    """Spot's price as a fraction of On-Demand. Default: 0.4 (MonitoringProps.spot_price_fraction's)."""
    prices: dict[str, float] = field(default_factory=dict)
    """Instance type -> USD per hour, overriding the catalog. Default: empty (the catalog's prices)."""

    def __post_init__(self) -> None:
        if self.on_demand_base < 0:
            raise ConfigError("--on-demand-base", f"{self.on_demand_base} must be 0 or more")
        if not 0 <= self.on_demand_percent <= 100:
            raise ConfigError("--on-demand-percent", f"{self.on_demand_percent} is out of range; allowed 0 to 100")
        if not 0 < self.spot_fraction <= 1:
            raise ConfigError("--spot-fraction", f"{self.spot_fraction} is out of range; a fraction above 0, at most 1")

    def on_demand_instances(self, instances: int) -> int:
        """The same split as the dashboard's metric math (monitoring.on_demand_instances_expression)."""
        if instances <= self.on_demand_base:
            return instances
        return self.on_demand_base + -(-(instances - self.on_demand_base) * self.on_demand_percent // 100)


@dataclass(frozen=True)
class Assumptions:
    """Modelling choices, not measurements: printed with every report, each replaceable by a flag."""

    efficiency: float = 0.5
    """Fraction of peak bandwidth and tensor throughput a real server reaches. Default: 0.5."""
    vram_headroom: float = 0.10
    """GPU memory kept free: CUDA context, cuBLAS workspace, fragmentation. Default: 0.10."""
    target_utilization: float = 0.7
    """Tasks are sized to run at this fraction of their throughput. Default: 0.7."""
    peak_factor: float = 2.0
    """max_tasks = tasks needed x this. Default: 2.0."""
    server_ceiling_rps: float = SERVER_CEILING_RPS
    """One task's requests per second at most: our server's measured HTTP ceiling. Default: SERVER_CEILING_RPS
    (5252)."""

    def __post_init__(self) -> None:
        for key, low, high in (("efficiency", 0, 1), ("vram_headroom", 0, 0.9), ("target_utilization", 0, 1)):
            value = getattr(self, key)
            if not low < value <= high and not (key == "vram_headroom" and value == 0):
                raise ConfigError(
                    f"--{key.replace('_', '-')}", f"{value} is out of range; a fraction above {low}, at most {high}"
                )
        if self.peak_factor < 1:
            raise ConfigError("--peak-factor", f"{self.peak_factor} must be at least 1")
        _positive(self.server_ceiling_rps, "--server-ceiling-rps", "requests per second")


@dataclass(frozen=True)
class Measurement:
    """Throughput one task sustained within the latency goal, from a benchmark JSON."""

    gpu_model: str
    requests_per_second: float
    p95_ms: float
    clients: int
    max_batch_size: int | None
    source: str


def _positive(value: float, key: str, what: str) -> None:
    if not value > 0:
        raise ConfigError(key, f"{value} must be greater than 0 ({what})")
