"""A model task's traces and log route: the OpenTelemetry settings its server gets, the traces section of the
CloudWatch agent's configuration (its OTLP receiver, exporting to X-Ray, where a server's Prometheus metrics have no
histogram; every other task's collector is the ADOT collector, otel_collector.py), and whether its logs go through
a FireLens log router (:class:`TelemetryProps`). Free of aws_cdk, so cdk.json builds it and the sizing advisor loads
it."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..core.errors import require, require_range
from ..core.log_archive_props import LogArchive
from ..core.server_contract import DEFAULT_TRACE_SAMPLING_RATIO as DEFAULT_TRACE_SAMPLING_RATIO
from ..core.server_contract import TRACE_COLLECTOR_CPU as TRACE_COLLECTOR_CPU
from ..core.server_contract import TRACE_COLLECTOR_MEMORY_MIB as TRACE_COLLECTOR_MEMORY_MIB
from ..core.server_contract import EcrImage

# The CloudWatch agent's OTLP receiver: its documented defaults, on the task's loopback (awsvpc: one network namespace).
OTLP_GRPC_ADDRESS = "127.0.0.1:4317"
OTLP_HTTP_ADDRESS = "127.0.0.1:4318"
OTLP_HTTP_ENDPOINT = f"http://{OTLP_HTTP_ADDRESS}"
OTLP_GRPC_ENDPOINT = f"http://{OTLP_GRPC_ADDRESS}"
# The X-Ray actions the agent's traces pipeline calls: the managed AWSXrayWriteOnlyAccess less the three sampling
# reads (the servers sample by the OTEL_TRACES_SAMPLER ratio, never by X-Ray's sampling rules). No resource-level
# permissions exist for them: the resource is "*".
XRAY_WRITE_ACTIONS = ("xray:PutTraceSegments", "xray:PutTelemetryRecords")
# Pinned tag seen in public sources; in a VPC without a route to the internet, pass a copy in your own ECR.
DEFAULT_LOG_ROUTER_IMAGE = "public.ecr.aws/aws-observability/aws-for-fluent-bit:2.34.0"
# The record key that holds a container's line as it wrote it (the Fluentd log driver FireLens uses puts it under "log",
# beside container_name, source and the ECS metadata). The server's cloudwatch_logs output sends only this key's value
# (Fluent Bit docs, outputs/cloudwatch, log_key), so an EMF line arrives as the JSON object CloudWatch extracts metrics
# from, and a plain line as the text awslogs would have sent; the S3 archive's outputs keep the whole record.
FIRELENS_LOG_KEY = "log"
# Variables the presets set for OpenTelemetry (a model's environment may not).
OTEL_ENVIRONMENT_KEYS = (
    "OTEL_SERVICE_NAME",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
)


@dataclass(frozen=True)
class FireLensProps:
    """The server's logs go through a Fluent Bit sidecar (FireLens, the ``awsfirelens`` log driver) to the model's
    log group, with its retention and KMS key, instead of the awslogs driver; the router logs with awslogs."""

    image: EcrImage | None = None
    """Your ECR mirror of AWS for Fluent Bit (private subnets reach no public registry without NAT). Default: None
    (``DEFAULT_LOG_ROUTER_IMAGE``, from ECR Public)."""
    cpu: int = 64
    """CPU units ECS reserves for the router (32-1024). Default: 64."""
    memory_mib: int = 128
    """MiB ECS reserves for the router (64-2048). Default: 128."""
    archive: LogArchive | None = None
    """A second copy of the server's logs to S3 and/or Firehose, beside the log group (a Fluent Bit configuration
    file the router reads from S3). Default: None (CloudWatch Logs only)."""

    def __post_init__(self) -> None:
        require(
            self.image is None or isinstance(self.image, EcrImage),
            "image",
            f"got {type(self.image).__name__}: an EcrImage(repository, tag) of your mirror, or None",
        )
        require_range(self.cpu, 32, 1024, "cpu")
        require_range(self.memory_mib, 64, 2048, "memory_mib")
        require(
            self.archive is None or isinstance(self.archive, LogArchive),
            "archive",
            f"got {type(self.archive).__name__}: a LogArchive, or None",
        )


@dataclass(frozen=True)
class TelemetryProps:
    """What a model's tasks record beyond their metrics: the share of requests traced to X-Ray, and the log route."""

    trace_sampling_ratio: float = DEFAULT_TRACE_SAMPLING_RATIO
    """The share of requests without a sampled parent that the server traces (0-1, ``OTEL_TRACES_SAMPLER_ARG`` of
    ``parentbased_traceidratio``; 0 records none). Default: 0.01: the bundled server measured a sampled request at about
    0.43 ms of its worker (mostly the OTLP encoding), so 5 % cost a null model about 10 % of its saturated throughput
    (bench.tracing_cost); X-Ray also bills per trace recorded."""
    firelens: FireLensProps | None = None
    """Route the server's logs through FireLens. Default: None (the awslogs driver: no sidecar to reserve)."""
    collector_image: EcrImage | None = None
    """Your ECR mirror of the ADOT collector (``DEFAULT_OTEL_COLLECTOR_IMAGE``) for servers that name none of their
    own: our server's tasks (traces) and an LLM preset without its own ``collector_image``. Default: None (the public
    image)."""

    def __post_init__(self) -> None:
        ratio = self.trace_sampling_ratio
        require(
            isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and 0 <= ratio <= 1,
            "trace_sampling_ratio",
            f"{ratio!r}: give a share from 0 (trace nothing) to 1 (every request)",
        )

    @property
    def log_router_reservation(self) -> tuple[int, int]:
        """(CPU units, MiB) the log router adds to each task: none with awslogs."""
        return (self.firelens.cpu, self.firelens.memory_mib) if self.firelens is not None else (0, 0)


def otel_environment(service_name: str, sampling_ratio: float) -> dict[str, str]:
    """The OpenTelemetry SDK's standard variables: OTLP/HTTP to the task's collector, parent-based ratio sampling."""
    return {
        "OTEL_SERVICE_NAME": service_name,
        "OTEL_EXPORTER_OTLP_ENDPOINT": OTLP_HTTP_ENDPOINT,
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": f"{sampling_ratio:g}",
    }


def with_traces(collector_environment: dict[str, str], region: str) -> dict[str, str]:
    """The CloudWatch agent's configuration (``CW_CONFIG_CONTENT``) with its OTLP receiver exporting to X-Ray."""
    agent = json.loads(collector_environment.get("CW_CONFIG_CONTENT", json.dumps({"agent": {"region": region}})))
    agent["traces"] = {
        "traces_collected": {"otlp": {"grpc_endpoint": OTLP_GRPC_ADDRESS, "http_endpoint": OTLP_HTTP_ADDRESS}}
    }
    return {**collector_environment, "CW_CONFIG_CONTENT": json.dumps(agent, sort_keys=True)}
