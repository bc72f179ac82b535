"""What a server contract says when its server serves LoRA adapters (``ServerContract.adapter_sync``): the task gets
the ``adapter-sync`` sidecar (``python -m inference_server.adapters``), which keeps the server's adapters in step with
the adapter registry, and the target group checks the sidecar's ``/ready`` instead of the server's readiness path, so
a task takes traffic only once it serves every registered adapter. The seam with the sidecar: docs/lora-adapters.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .errors import require, require_range
from .model_source import SCRATCH_PATH, ModelFromS3

if TYPE_CHECKING:  # only its types: the props load without aws_cdk (the sizing advisor)
    from aws_cdk import aws_ecs as ecs

ADAPTER_SYNC_CONTAINER = "adapter-sync"
ADAPTER_SYNC_COMMAND = ("python", "-m", "inference_server.adapters")
ADAPTER_DIRECTORY = "/adapters"
ADAPTER_VOLUME = "adapters"
ADAPTER_READY_PORT = 8081
ADAPTER_READY_PATH = "/ready"
# The sidecar's reservation: a Python process with boto3 that streams adapter files to disk (soft: ECS sets no
# hard limit on it).
ADAPTER_SYNC_CPU, ADAPTER_SYNC_MEMORY_MIB = 128, 256
# It exits at once on SIGTERM; it stops after the server, whose drain it never shortens.
ADAPTER_SYNC_STOP_SECONDS = 10
ServerKind = Literal["vllm", "sglang"]
# The request-log middleware (inference_server/adapters/request_log.py) in the server's own process: the scratch
# owner writes its text here as REQUEST_LOG_MODULE before the server starts; the server imports it from its PYTHONPATH.
REQUEST_LOG_DIRECTORY = f"{SCRATCH_PATH}/request-log"
REQUEST_LOG_MODULE = "adapter_request_log"
REQUEST_LOG_MIDDLEWARE = f"{REQUEST_LOG_MODULE}.AdapterRequestLog"
# Its line's fields (JSON properties, never a metric dimension).
REQUEST_LOG_MESSAGE = "adapter request"
ADAPTER_NAME_FIELD, ADAPTER_STATUS_FIELD, ADAPTER_LATENCY_FIELD = "AdapterName", "StatusCode", "LatencyMs"


def adapter_prefix(model_name: str) -> str:
    """The model bucket's folder of a model's adapters and its registry (``adapters/<model>/``)."""
    return f"adapters/{model_name}/"


def registry_uri(bucket_name: str, model_name: str) -> str:
    return f"s3://{bucket_name}/{adapter_prefix(model_name)}registry.json"


@dataclass(frozen=True)
class AdapterSync:
    """The ``adapter-sync`` sidecar of a server that serves LoRA adapters."""

    server_kind: ServerKind
    """Which load and unload endpoints the sidecar calls: ``vllm`` (``/v1/load_lora_adapter``) or ``sglang``
    (``/load_lora_adapter``). Required."""
    max_rank: int
    """The largest rank the server takes: the sidecar loads no adapter above it. Required."""
    image: ecs.ContainerImage
    """The sidecar's image. Required."""
    poll_seconds: int = 10
    """How often it re-reads the registry. Default: 10."""
    ready_port: int = ADAPTER_READY_PORT
    """Where it answers ``GET /ready`` (the target group's health check). Default: 8081."""
    request_log: str | None = None
    """The request-log middleware's Python source, which the scratch owner writes to ``REQUEST_LOG_DIRECTORY`` before
    the server starts (a server that runs it: vLLM's ``--middleware``), or None: no middleware. Default: None."""

    def __post_init__(self) -> None:
        require(
            self.server_kind in ("vllm", "sglang"),
            "adapter_sync.server_kind",
            f"{self.server_kind!r}: 'vllm' or 'sglang' (the sidecar knows their endpoints)",
        )
        require_range(self.max_rank, 1, 512, "adapter_sync.max_rank")
        require_range(self.poll_seconds, 5, 3600, "adapter_sync.poll_seconds")
        require_range(self.ready_port, 1024, 65535, "adapter_sync.ready_port")

    def check_beside(self, server_port: int, model_source: ModelFromS3) -> None:
        """The sidecar fits the contract: a port of its own, and init containers (the scratch owner hands the
        adapters' volume to the server's user)."""
        require(
            model_source.init_containers > 0,
            "server.adapter_sync",
            f"needs a model source with init containers ({model_source.mode} has none): the scratch owner hands the "
            "adapters' volume to the server's user; use ModelFromS3.copy_to_scratch() or server_streams()",
        )
        require(
            self.ready_port != server_port,
            "server.adapter_sync.ready_port",
            f"{self.ready_port} is the server's own port: give the sidecar another",
        )

    def environment(
        self, *, bucket_name: str, model_name: str, server_port: int, region: str, environment_name: str
    ) -> dict[str, str]:
        """The sidecar's environment (the API key comes as a secret, ``ADAPTER_SERVER_API_KEY``;
        ``DEPLOYMENT_ENV`` is its metrics' Environment dimension, as the bundled server's)."""
        return {
            "DEPLOYMENT_ENV": environment_name,
            "ADAPTER_REGISTRY_URI": registry_uri(bucket_name, model_name),
            "ADAPTER_DIR": ADAPTER_DIRECTORY,
            "ADAPTER_SERVER_URL": f"http://127.0.0.1:{server_port}",
            "ADAPTER_SERVER_KIND": self.server_kind,
            "ADAPTER_POLL_SECONDS": str(self.poll_seconds),
            "ADAPTER_MAX_RANK": str(self.max_rank),
            "ADAPTER_READY_PORT": str(self.ready_port),
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
        }
