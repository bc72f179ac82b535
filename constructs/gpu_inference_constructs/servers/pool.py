"""The bundled server run as a pool: the bundled preset's contract for the pool's one service, with the pool's
variables (its name, its store prefix, the registry poll, the memory budgets), artifact code off, and the pool's
alarms on metrics that do not grow with its model count."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.alarm_thresholds import NOT_KEEPING_UP_MINUTES
from ..core.errors import require
from ..core.gpu_share import registered_memory_mib
from ..core.model_props import ModelProps
from ..core.pool_props import PoolAlarmProps, PoolProps
from ..core.result_cache_props import ModelCacheProps
from ..core.server_contract import ServerContext, ServerContract, ServerDefinition, require_props
from ..core.server_signals import ServerAlarm
from ..core.stop_timing import StopTiming
from ..core.task_size import SidecarReservation
from .bundled import (
    BUNDLED_DOCS_PATHS,
    BUNDLED_PUBLIC_PATHS,
    BundledServer,
    BundledServerProps,
    bundled_environment_keys,
)

if TYPE_CHECKING:
    from aws_cdk import aws_ecs as ecs

# The pool's metrics (EMF, namespace GpuInference, dimensions Environment and ModelName = the pool's name; the model
# is a property, never a dimension): /work/notes/pool-contract.md, the server's side of the same names.
POOL_RESIDENT_MODELS = "PoolResidentModels"
POOL_HIT_RATE = "PoolHitRate"
POOL_LOADS = "PoolLoads"
POOL_LOAD_TIME = "PoolLoadTime"
POOL_EVICTIONS = "PoolEvictions"
POOL_FAILED_LOADS = "PoolFailedLoads"
POOL_METRICS = (POOL_RESIDENT_MODELS, POOL_HIT_RATE, POOL_LOADS, POOL_LOAD_TIME, POOL_EVICTIONS, POOL_FAILED_LOADS)
# The pool server's routes below /<pool>/ (inference_server/pool): the bundled server's, and the native route with
# the model in the path, /<pool>/models/<model>/predict.
POOL_PUBLIC_PATHS = (*BUNDLED_PUBLIC_PATHS, "/models/*")
POOL_PREDICTION_ROUTES = ("/models/{model}/predict", "/v1/embeddings", "/v2/models/{model}/infer")
# The fields of the one log line per model and metrics interval that per-model queries read (pool_queries.py).
POOL_MODEL_FIELD = "PoolModel"
POOL_MODEL_REQUESTS_FIELD = "PoolModelRequests"
POOL_MODEL_LATENCY_P95_FIELD = "PoolModelLatencyP95"
POOL_MODEL_ERRORS_FIELD = "PoolModelErrors"

# What the pool preset sets beyond the bundled preset's variables (ModelProps.environment may not set them).
POOL_ENVIRONMENT_KEYS = (
    "POOL_NAME",
    "MODEL_STORE_URI",
    "POOL_REGISTRY_POLL_SECONDS",
    "POOL_GPU_MEMORY_MIB",
    "POOL_HOST_MEMORY_MIB",
    "POOL_DISK_CACHE_MIB",
    "ALLOW_ARTIFACT_CODE",
    "POOL_PEER_DNS_NAME",
)
# The name whose A records are the pool's running tasks (ModelPool's PoolDiscovery sets it on the container).
POOL_PEER_DNS_NAME = "POOL_PEER_DNS_NAME"
# GPU memory the pool leaves for the CUDA context, cuBLAS workspaces and the allocator when it sizes its own budget.
GPU_BUDGET_RESERVE = 0.10


def pool_alarms(alarms: PoolAlarmProps) -> tuple[ServerAlarm, ...]:
    """One alarm per pool metric, each over the whole pool (every task, every model), so their number never grows
    with the pool's models."""
    return (
        ServerAlarm(
            "PoolHitRate",
            POOL_HIT_RATE,
            "Average",
            threshold=alarms.hit_rate_percent,
            periods=NOT_KEEPING_UP_MINUTES,
            below=True,
            description="hit rate below {threshold}% for {periods} minutes: the pool reloads models "
            "more than it serves them (raise gpu_memory_budget_mib or max_tasks, or split the pool)",
        ),
        ServerAlarm(
            "PoolLoads",
            POOL_LOADS,
            "Sum",
            threshold=alarms.loads_per_minute,
            periods=NOT_KEEPING_UP_MINUTES,
            description="{threshold} or more model loads a minute for {periods} minutes",
        ),
        ServerAlarm(
            "PoolLoadTimeP95",
            POOL_LOAD_TIME,
            "p95",
            threshold=alarms.load_time_p95_ms,
            periods=NOT_KEEPING_UP_MINUTES,
            description="p95 of a model load at or above {threshold} ms for {periods} minutes (disk or S3 tier slow)",
        ),
        ServerAlarm(
            "PoolEvictions",
            POOL_EVICTIONS,
            "Sum",
            threshold=alarms.evictions_per_minute,
            periods=NOT_KEEPING_UP_MINUTES,
            description="{threshold} or more evictions a minute for {periods} minutes: "
            "the working set exceeds the GPU budget",
        ),
        ServerAlarm(
            "PoolResidentModels",
            POOL_RESIDENT_MODELS,
            "Maximum",
            threshold=alarms.resident_models,
            periods=NOT_KEEPING_UP_MINUTES,
            description="{threshold} or more models resident on one task for {periods} "
            "minutes: more than the pool was sized to hold",
        ),
        ServerAlarm(
            "PoolFailedLoads",
            POOL_FAILED_LOADS,
            "Sum",
            threshold=alarms.failed_loads_per_5_minutes,
            period_seconds=300,
            description="{threshold} or more model loads failed in 5 minutes: a registered "
            "version does not load or fails its checks (the server log names it)",
        ),
    )


@dataclass(frozen=True)
class PoolServer(ServerDefinition):
    """This repository's server serving many models in one service, loaded on demand from the pool's registry
    (``pools/<pool>/registry.json``): the bundled preset's contract (``props``: task, batching, timeouts for every
    model of the pool) with the pool's variables (``pool``) and alarms. Artifact code is off: no model of a pool may
    run its own code. Its tasks read ``MODEL_STORE_URI``, ``s3://<bucket>/pools/<pool>/``, the folder above
    the version of the URI ModelService gives (ModelPool's model source is the store's ``pools/`` prefix)."""

    props: BundledServerProps = field(default_factory=BundledServerProps)
    """The server's settings for every model of the pool. Default: BundledServerProps()."""
    pool: PoolProps = field(default_factory=PoolProps)
    """The pool's own settings. Default: PoolProps()."""
    image: ecs.ContainerImage | None = None
    """Default: the bundled server's image (BundledServer's)."""

    name = "pool"
    sheds_load_itself = True  # the bundled server's admission: 503 once its queue is full

    def cache_client(self) -> ModelCacheProps:
        """The pool's server reads the shared result cache as the bundled server does (``props.shared_cache``), its keys
        naming the pool, the model and its registered version (``ModelPool.use_cache``)."""
        return self.props.shared_cache

    def __post_init__(self) -> None:
        require_props(self.props, BundledServerProps, type(self).__name__)
        require(isinstance(self.pool, PoolProps), "pool", f"got {type(self.pool).__name__}: pass a PoolProps")
        require(
            self.props.runtime == "eager",
            "runtime",
            f"{self.props.runtime!r}: a pool loads its models on demand with the eager runtime; leave runtime out",
        )
        require(
            self.props.result_cache_size == 0,
            "result_cache_size",
            "a pool's results are not cached per task (one cache would be shared by all its models); leave it out",
        )

    @property
    def _bundled(self) -> BundledServer:
        return BundledServer(props=self.props, image=self.image)

    @property
    def stop(self) -> StopTiming:
        return self._bundled.stop

    @property
    def longest_request_seconds(self) -> int:
        return self._bundled.longest_request_seconds

    @property
    def sidecar_reservation(self) -> SidecarReservation:
        return self._bundled.sidecar_reservation

    @property
    def handler(self) -> str | None:
        return self._bundled.handler

    def check(self, model: ModelProps) -> None:
        """The bundled preset's checks, and none of the pool's variables set by hand."""
        self._bundled.check(model)
        model.check_reserved_environment((*bundled_environment_keys(), *POOL_ENVIRONMENT_KEYS), self.name)

    def gpu_budget_mib(self, model: ModelProps, context: ServerContext) -> int:
        """``pool.gpu_memory_budget_mib``, else the share's or the smallest GPU's memory less GPU_BUDGET_RESERVE."""
        if self.pool.gpu_memory_budget_mib is not None:
            return self.pool.gpu_memory_budget_mib
        if model.gpu_share is not None:
            device = model.gpu_share.memory_mib
        elif context.instance_type is not None:
            device = registered_memory_mib(context.instance_type.gpu_model, context.instance_type.gpu_memory_gib)
        else:
            device = 0
        return int(device * (1 - GPU_BUDGET_RESERVE))

    def contract(self, context: ServerContext) -> ServerContract:
        """The bundled contract for the pool's service; ``context.model_uri`` is the pool's prefix in the store."""
        model = context.model
        self.check(model)
        base = self._bundled.contract(context)
        # ModelService's URI is <prefix>/<pool>/<version>/ (ModelPool's source prefix is pools/): the pool's store is
        # the folder above the version, pools/<pool>/, which is also all its task role may read.
        version = f"{model.version}/"
        require(context.model_uri.endswith(version), "model_uri", f"{context.model_uri!r} does not end in {version!r}")
        store_uri = context.model_uri.removesuffix(version)
        environment = {
            **base.environment,
            "MODEL_URI": store_uri,
            "POOL_NAME": model.name,
            "MODEL_STORE_URI": store_uri,
            "POOL_REGISTRY_POLL_SECONDS": str(self.pool.registry_poll_seconds),
            "POOL_GPU_MEMORY_MIB": str(self.gpu_budget_mib(model, context)),
            "POOL_HOST_MEMORY_MIB": str(self.pool.host_budget_mib(model.memory_mib)),
            "POOL_DISK_CACHE_MIB": str(self.pool.disk_cache_mib),
            "ALLOW_ARTIFACT_CODE": "false",
        }
        docs = BUNDLED_DOCS_PATHS if self.props.api_docs else ()
        return dataclasses.replace(
            base,
            name=self.name,
            environment=environment,
            public_paths=(*POOL_PUBLIC_PATHS, *docs),
            prediction_routes=POOL_PREDICTION_ROUTES,
            alarms=(*base.server_alarms, *pool_alarms(self.pool.alarms)),
        )
