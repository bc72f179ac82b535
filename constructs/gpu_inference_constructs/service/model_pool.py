"""A model pool: many models in one ECS service, loaded on demand from the pool's registry in the model store, behind
one listener rule (``/<pool>/...``), with per-model figures queryable from its logs."""

from __future__ import annotations

from dataclasses import dataclass

from constructs import Construct

from ..capacity.service_capacity import ServiceCapacity
from ..core.errors import require
from ..core.model_props import ModelProps
from ..core.pool_props import POOLS_PREFIX, pool_prefix
from ..core.service_timing import ServiceTimingProps
from ..rollout.deployment import RollbackThresholds
from ..routing.service_route import ServiceRoute
from ..servers.pool import POOL_PEER_DNS_NAME, PoolServer
from ..shared.environment import InferenceEnvironment
from ..store.model_bucket import BoundModelSource, ModelSource
from .choices import bucket_of
from .model_service import ModelService
from .pool_discovery import PoolDiscovery
from .pool_queries import PoolQueries
from .props import ServiceAccess, ServiceLogs


class ModelPool(ModelService):
    """One service for many models: a ModelService whose ``model`` is the pool (its name, the path ``/<name>/``,
    capacity as whole GPUs or a ``gpu_share``, tasks, scaling, deployment, rollback, alarms; its ``version`` labels the
    pool's server settings, not a model) and whose server is a PoolServer (default PoolServer(): the bundled server's
    defaults, PoolProps()). Which models it serves, and their versions, is its registry, ``pools/<name>/registry.json``
    in ``model_store`` (a ModelStore, or ``ModelBucket(bucket)`` of your own: pools are under the bucket's ``pools/``),
    written by ``python -m inference_server.publish --pool <name>``: the template is the same whether it lists 10
    models or 1,000.

    The other arguments are ModelService's; so are its attributes (give it to ServiceScaling and ModelAlarms as any
    model service: they add the pool's alarms from its contract). The pool's task role reads ``pools/<name>/*``
    only, and its models run no code of their own (``ALLOW_ARTIFACT_CODE=false``). Its tasks find each other in a
    Cloud Map namespace of the pool's own and forward each request to the task that owns its model (model affinity,
    docs/server.md "Routing"). More attributes: ``queries`` (PoolQueries: the saved Logs Insights queries and the
    Contributor Insights rule of the per-model figures), ``read_prefix`` (``pools/<name>/``), ``discovery``
    (PoolDiscovery: the namespace, the Cloud Map service, and ``dns_name``, the server's POOL_PEER_DNS_NAME)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model: ModelProps,
        capacity: ServiceCapacity,
        model_store: ModelSource,
        route: ServiceRoute,
        environment: InferenceEnvironment | str | None = None,
        logs: ServiceLogs | None = None,
        environment_name: str | None = None,
        server: PoolServer | None = None,
        access: ServiceAccess | None = None,
        timing: ServiceTimingProps | None = None,
        rollback_thresholds: RollbackThresholds | None = None,
    ) -> None:
        require(
            environment_name is None or environment is None,
            "environment_name",
            "is given beside environment=, which takes an InferenceEnvironment or the environment's name: give one",
        )
        server = server or PoolServer()
        require(
            isinstance(server, PoolServer),
            "server",
            f"got {type(server).__name__}: a pool runs PoolServer(props=BundledServerProps(...), pool=PoolProps(...))",
        )
        super().__init__(
            scope,
            construct_id,
            model=model,
            environment=environment if environment_name is None else environment_name,
            capacity=capacity,
            model_source=_PoolsOf(model_store),
            route=route,
            logs=logs,
            server=server,
            access=access,
            timing=timing,
            rollback_thresholds=rollback_thresholds,
        )
        self.read_prefix = pool_prefix(model.name)
        self.discovery = PoolDiscovery(
            self,
            "Discovery",
            service=self.service,
            vpc=self.service.cluster.vpc,
            security_group=self.security_group,
            port=self.contract.port,
            pool_name=model.name,
            environment_name=self.environment_name,
            name_prefix=self.name_prefix,
        )
        self.container.add_environment(POOL_PEER_DNS_NAME, self.discovery.dns_name)
        self.queries = PoolQueries(
            self,
            "Queries",
            log_group=self.log_group,
            pool_name=model.name,
            environment_name=self.environment_name,
            name_prefix=self.name_prefix,
        )


@dataclass(frozen=True)
class _PoolsOf(ModelSource):
    """The pools' folder of ``source``'s bucket: its ``pools/``, whatever folder the source keeps models in."""

    source: object

    def bind(self, service: Construct) -> BoundModelSource:
        return BoundModelSource(bucket_of(self.source, service, key="model_store").bucket, POOLS_PREFIX)
