"""A model pool: many models in one ECS service, loaded on demand from the pool's registry in the model store, behind
one listener rule (``/<pool>/...``), with per-model figures queryable from its logs."""

from __future__ import annotations

from constructs import Construct

from ..capacity.gpu_capacity import GpuCapacity
from ..capacity.neuron_capacity import NeuronCapacity
from ..core.errors import require
from ..core.model_props import ModelProps
from ..core.pool_props import POOLS_PREFIX, pool_prefix
from ..core.service_timing import ServiceTimingProps
from ..rollout.deployment import RollbackThresholds
from ..routing.load_balancer import InferenceLoadBalancer
from ..servers.pool import PoolServer
from ..shared.environment import InferenceEnvironment
from ..store.model_store import ModelStore
from .choices import ClusterCapacity, ListenerRoute, LoadBalancerRoute, ModelBucket, bucket_of
from .model_service import ModelService
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
    only, and its models run no code of their own (``ALLOW_ARTIFACT_CODE=false``). More attributes: ``queries``
    (PoolQueries: the saved Logs Insights queries and the Contributor Insights rule of the per-model figures),
    ``read_prefix`` (``pools/<name>/``)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        model: ModelProps,
        capacity: GpuCapacity | NeuronCapacity | ClusterCapacity,
        model_store: ModelStore | ModelBucket,
        route: InferenceLoadBalancer | LoadBalancerRoute | ListenerRoute,
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
            model_source=ModelBucket(bucket_of(model_store).bucket, POOLS_PREFIX),
            route=route,
            logs=logs,
            server=server,
            access=access,
            timing=timing,
            rollback_thresholds=rollback_thresholds,
        )
        self.read_prefix = pool_prefix(model.name)
        self.queries = PoolQueries(
            self,
            "Queries",
            log_group=self.log_group,
            pool_name=model.name,
            environment_name=self.environment_name,
            name_prefix=self.name_prefix,
        )
