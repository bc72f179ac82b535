"""AWS CDK constructs for real-time PyTorch inference on ECS GPU capacity.

Everything a consumer needs is importable from here: the constructs, their props, the server
contract and its presets. Each props class documents its defaults.
"""

import importlib
from typing import TYPE_CHECKING

from .core import old_paths as _old_paths
from .core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .capacity.capacity_group import CapacityGroup
    from .capacity.gpu_capacity import GpuCapacity, GpuCapacityProps
    from .capacity.neuron_capacity import NeuronCapacity, NeuronCapacityProps
    from .capacity.service_capacity import BoundCapacity, ClusterCapacity, ManagedCapacity, ServiceCapacity
    from .capacity.warm_pool import WarmPoolLaunches, WarmPoolProps
    from .core.adapter_sync import AdapterSync
    from .core.deployment_capacity import ServiceDeployment, tasks_for_deployment_at_peak
    from .core.errors import ConfigError, Problem, require, require_range
    from .core.gpu_share import GpuShare
    from .core.instance_catalog import CATALOG, GpuInstanceType, is_neuron_type
    from .core.latency_alarms import LatencyAlarmProps, LatencyAlarmThresholds
    from .core.log_archive_props import LogArchive
    from .core.lora_settings import LoraBaseModel, LoraSettings
    from .core.model_props import ModelProps, service_deployment
    from .core.pool_props import DEFAULT_POOL_VERSION, PoolAlarmProps, PoolProps
    from .core.scaling_props import ModelScalingProps, PredictiveScalingProps, ScalingProps
    from .core.schedules import CapacityPrewarm, ServiceSchedule
    from .core.server_contract import (
        DEFAULT_COLLECTOR_IMAGE,
        DEFAULT_FETCHER_IMAGE,
        EcrImage,
        ExpressionSignal,
        LivenessCheck,
        ModelFromS3,
        PrometheusMetrics,
        ScalingSignal,
        ServerAlarm,
        ServerContext,
        ServerContract,
        ServerDefinition,
        StopTiming,
    )
    from .core.service_timing import ServiceTimingProps
    from .core.settings import from_dict
    from .core.target_optimizer_props import TargetOptimizerProps
    from .core.task_size import SidecarReservation
    from .networking.network import DEFAULT_INTERFACE_ENDPOINTS, InferenceNetwork, NetworkProps, grant_logs_service
    from .observability.monitoring import InferenceMonitoring, ModelAlarms, MonitoringProps
    from .observability.task_starts import TaskStarts
    from .rollout.deployment import DeploymentProps, RollbackAlarms, RollbackProps, RollbackThresholds
    from .routing.listener_rules import ListenerPriorities
    from .routing.load_balancer import ConfiguredLoad, InferenceLoadBalancer, LoadBalancerProps, LoadBalancerQuotas
    from .routing.load_balancer_route import LoadBalancerRoute
    from .routing.service_route import BoundRoute, ListenerRoute, RouteRule, ServiceRoute
    from .routing.target_group_metrics import TargetGroupMetrics
    from .scaling.service_scaling import ServiceScaling
    from .servers.bundled import BundledServer, BundledServerProps, bundled_stop
    from .servers.bundled_signals import BundledScalingProps
    from .servers.handler_image import bundled_server_image
    from .servers.neuron import NeuronServer
    from .servers.neuron_props import NeuronEcrImage, NeuronServerProps
    from .servers.pool import PoolServer
    from .servers.sglang import SglangProps, SglangServer
    from .servers.tgi_triton import TgiProps, TgiServer, TritonProps, TritonServer, tgi_stop, triton_stop
    from .servers.vllm import VllmProps, VllmServer, vllm_stop
    from .service.adapter_queries import AdapterQueries
    from .service.api_keys import api_keys_secret
    from .service.checks import CheckedServer
    from .service.model_pool import ModelPool
    from .service.model_service import ModelService
    from .service.pool_discovery import PoolDiscovery
    from .service.pool_queries import PoolQueries
    from .service.props import ServiceAccess, ServiceLogs
    from .service.server_context import CdkServerContext
    from .service.stack_limits import MAX_STACK_RESOURCES, stacks_per_model
    from .service.task import NO_TRACES_WARNING
    from .service.validation import validate_service
    from .shared.environment import InferenceEnvironment
    from .shared.log_retention import retention_days
    from .shared.notifications import NotificationTopic, topic_target
    from .store.model_bucket import BoundModelSource, ModelBucket, ModelSource
    from .store.model_store import ModelStore, ModelStoreProps
    from .store.result_cache import ModelCacheProps, ResultCache, ResultCacheProps
    from .task_telemetry.otel_collector import (
        DEFAULT_OTEL_COLLECTOR_IMAGE,
        GEN_AI_TIME_PER_OUTPUT_TOKEN,
        GEN_AI_TIME_TO_FIRST_TOKEN,
    )
    from .task_telemetry.telemetry import FireLensProps, TelemetryProps


__all__ = [
    "NO_TRACES_WARNING",
    "AdapterSync",
    "BoundCapacity",
    "BoundModelSource",
    "BoundRoute",
    "InferenceEnvironment",
    "CapacityGroup",
    "CdkServerContext",
    "ClusterCapacity",
    "ListenerRoute",
    "LoadBalancerRoute",
    "ManagedCapacity",
    "ModelBucket",
    "ModelSource",
    "RouteRule",
    "ServiceCapacity",
    "ServiceRoute",
    "ServiceAccess",
    "ServiceLogs",
    "TelemetryProps",
    "FireLensProps",
    "LogArchive",
    "LoraBaseModel",
    "LoraSettings",
    "BundledScalingProps",
    "BundledServer",
    "BundledServerProps",
    "CATALOG",
    "CapacityPrewarm",
    "CheckedServer",
    "ConfigError",
    "ConfiguredLoad",
    "DEFAULT_COLLECTOR_IMAGE",
    "DEFAULT_FETCHER_IMAGE",
    "DEFAULT_INTERFACE_ENDPOINTS",
    "DEFAULT_OTEL_COLLECTOR_IMAGE",
    "DEFAULT_POOL_VERSION",
    "DeploymentProps",
    "EcrImage",
    "ExpressionSignal",
    "GEN_AI_TIME_PER_OUTPUT_TOKEN",
    "GEN_AI_TIME_TO_FIRST_TOKEN",
    "GpuCapacity",
    "GpuCapacityProps",
    "GpuInstanceType",
    "GpuShare",
    "InferenceLoadBalancer",
    "InferenceMonitoring",
    "InferenceNetwork",
    "LatencyAlarmProps",
    "LatencyAlarmThresholds",
    "ListenerPriorities",
    "LivenessCheck",
    "LoadBalancerProps",
    "LoadBalancerQuotas",
    "ModelAlarms",
    "ModelCacheProps",
    "ModelFromS3",
    "ModelPool",
    "ModelProps",
    "MAX_STACK_RESOURCES",
    "ModelScalingProps",
    "ModelService",
    "ModelStore",
    "ModelStoreProps",
    "MonitoringProps",
    "NetworkProps",
    "NeuronCapacity",
    "NeuronCapacityProps",
    "NeuronEcrImage",
    "NeuronServer",
    "NeuronServerProps",
    "NotificationTopic",
    "PoolAlarmProps",
    "PoolDiscovery",
    "PoolProps",
    "PoolQueries",
    "AdapterQueries",
    "PoolServer",
    "PredictiveScalingProps",
    "Problem",
    "PrometheusMetrics",
    "ResultCache",
    "ResultCacheProps",
    "RollbackAlarms",
    "RollbackProps",
    "RollbackThresholds",
    "ScalingProps",
    "ScalingSignal",
    "ServerAlarm",
    "ServerContext",
    "ServerContract",
    "ServerDefinition",
    "ServiceDeployment",
    "ServiceScaling",
    "ServiceSchedule",
    "ServiceTimingProps",
    "SidecarReservation",
    "SglangProps",
    "SglangServer",
    "StopTiming",
    "TargetGroupMetrics",
    "TargetOptimizerProps",
    "TaskStarts",
    "TgiProps",
    "TgiServer",
    "TritonProps",
    "TritonServer",
    "VllmProps",
    "VllmServer",
    "WarmPoolLaunches",
    "WarmPoolProps",
    "api_keys_secret",
    "bundled_server_image",
    "bundled_stop",
    "from_dict",
    "grant_logs_service",
    "is_neuron_type",
    "require",
    "require_range",
    "retention_days",
    "service_deployment",
    "stacks_per_model",
    "tasks_for_deployment_at_peak",
    "tgi_stop",
    "topic_target",
    "triton_stop",
    "validate_service",
    "vllm_stop",
]


# Imported on first use, so that the pure-Python parts (the sizing advisor) run without loading aws_cdk and its Node
# runtime; `from gpu_inference_constructs import X` and type checkers see the names as before.
_MODULE_OF = {
    "NO_TRACES_WARNING": "service.task",
    "InferenceEnvironment": "shared.environment",
    "CdkServerContext": "service.server_context",
    "retention_days": "shared.log_retention",
    "tasks_for_deployment_at_peak": "core.deployment_capacity",
    "service_deployment": "core.model_props",
    "ListenerPriorities": "routing.listener_rules",
    "CheckedServer": "service.checks",
    "validate_service": "service.validation",
    "DEFAULT_POOL_VERSION": "core.pool_props",
    "is_neuron_type": "core.instance_catalog",
    "require_range": "core.errors",
    "require": "core.errors",
    "Problem": "core.errors",
    "CapacityGroup": "capacity.capacity_group",
    "BoundCapacity": "capacity.service_capacity",
    "BoundModelSource": "store.model_bucket",
    "BoundRoute": "routing.service_route",
    "ClusterCapacity": "capacity.service_capacity",
    "ListenerRoute": "routing.service_route",
    "LoadBalancerRoute": "routing.load_balancer_route",
    "ManagedCapacity": "capacity.service_capacity",
    "ModelBucket": "store.model_bucket",
    "ModelSource": "store.model_bucket",
    "RouteRule": "routing.service_route",
    "ServiceCapacity": "capacity.service_capacity",
    "ServiceRoute": "routing.service_route",
    "ServiceAccess": "service.props",
    "ServiceLogs": "service.props",
    "TelemetryProps": "task_telemetry.telemetry",
    "FireLensProps": "task_telemetry.telemetry",
    "LogArchive": "core.log_archive_props",
    "AdapterSync": "core.adapter_sync",
    "LoraBaseModel": "core.lora_settings",
    "LoraSettings": "core.lora_settings",
    "BundledScalingProps": "servers.bundled_signals",
    "bundled_stop": "servers.bundled",
    "ExpressionSignal": "core.server_contract",
    "ServerAlarm": "core.server_contract",
    "tgi_stop": "servers.tgi_triton",
    "triton_stop": "servers.tgi_triton",
    "vllm_stop": "servers.vllm_stop",
    "api_keys_secret": "service.api_keys",
    "BundledServer": "servers.bundled",
    "BundledServerProps": "servers.bundled",
    "bundled_server_image": "servers.handler_image",
    "DeploymentProps": "rollout.deployment",
    "RollbackAlarms": "rollout.deployment",
    "RollbackProps": "rollout.deployment",
    "RollbackThresholds": "rollout.deployment",
    "ServiceDeployment": "core.deployment_capacity",
    "ConfigError": "core.errors",
    "GpuCapacity": "capacity.gpu_capacity",
    "GpuCapacityProps": "capacity.gpu_capacity",
    "GpuShare": "core.gpu_share",
    "CATALOG": "core.instance_catalog",
    "GpuInstanceType": "core.instance_catalog",
    "LatencyAlarmProps": "core.latency_alarms",
    "LatencyAlarmThresholds": "core.latency_alarms",
    "ConfiguredLoad": "routing.load_balancer",
    "InferenceLoadBalancer": "routing.load_balancer",
    "LoadBalancerProps": "routing.load_balancer",
    "LoadBalancerQuotas": "routing.load_balancer",
    "ModelPool": "service.model_pool",
    "ModelProps": "core.model_props",
    "ModelService": "service.model_service",
    "ModelStore": "store.model_store",
    "ModelStoreProps": "store.model_store",
    "InferenceMonitoring": "observability.monitoring",
    "ModelAlarms": "observability.monitoring",
    "MonitoringProps": "observability.monitoring",
    "DEFAULT_INTERFACE_ENDPOINTS": "networking.network",
    "InferenceNetwork": "networking.network",
    "NetworkProps": "networking.network",
    "NeuronCapacity": "capacity.neuron_capacity",
    "NeuronCapacityProps": "capacity.neuron_capacity",
    "grant_logs_service": "networking.network",
    "NotificationTopic": "shared.notifications",
    "PoolAlarmProps": "core.pool_props",
    "PoolProps": "core.pool_props",
    "PoolDiscovery": "service.pool_discovery",
    "PoolQueries": "service.pool_queries",
    "AdapterQueries": "service.adapter_queries",
    "PoolServer": "servers.pool",
    "topic_target": "shared.notifications",
    "TgiProps": "servers.tgi_triton",
    "TgiServer": "servers.tgi_triton",
    "TritonProps": "servers.tgi_triton",
    "TritonServer": "servers.tgi_triton",
    "NeuronServer": "servers.neuron",
    "NeuronEcrImage": "servers.neuron_props",
    "NeuronServerProps": "servers.neuron_props",
    "ModelCacheProps": "store.result_cache",
    "ResultCache": "store.result_cache",
    "ResultCacheProps": "store.result_cache",
    "ModelScalingProps": "core.scaling_props",
    "PredictiveScalingProps": "core.scaling_props",
    "ScalingProps": "core.scaling_props",
    "CapacityPrewarm": "core.schedules",
    "ServiceSchedule": "core.schedules",
    "MAX_STACK_RESOURCES": "service.stack_limits",
    "stacks_per_model": "service.stack_limits",
    "SidecarReservation": "core.task_size",
    "DEFAULT_COLLECTOR_IMAGE": "core.server_contract",
    "DEFAULT_OTEL_COLLECTOR_IMAGE": "task_telemetry.otel_collector",
    "GEN_AI_TIME_PER_OUTPUT_TOKEN": "task_telemetry.otel_collector",
    "GEN_AI_TIME_TO_FIRST_TOKEN": "task_telemetry.otel_collector",
    "DEFAULT_FETCHER_IMAGE": "core.server_contract",
    "EcrImage": "core.ecr_image",
    "LivenessCheck": "core.server_contract",
    "ModelFromS3": "core.server_contract",
    "PrometheusMetrics": "core.server_contract",
    "ScalingSignal": "core.server_contract",
    "ServerContext": "core.server_contract",
    "ServerContract": "core.server_contract",
    "ServerDefinition": "core.server_contract",
    "StopTiming": "core.server_contract",
    "ServiceScaling": "scaling.service_scaling",
    "ServiceTimingProps": "core.service_timing",
    "from_dict": "core.settings",
    "SglangProps": "servers.sglang",
    "SglangServer": "servers.sglang",
    "TargetGroupMetrics": "routing.target_group_metrics",
    "TargetOptimizerProps": "core.target_optimizer_props",
    "TaskStarts": "observability.task_starts",
    "VllmProps": "servers.vllm_props",
    "VllmServer": "servers.vllm",
    "WarmPoolLaunches": "capacity.warm_pool",
    "WarmPoolProps": "capacity.warm_pool",
}


_exported, __dir__ = lazy_exports(__name__, _MODULE_OF)


# Issue 56: the 0.2 module paths (gpu_inference_constructs.<module>) still import, with a warning, until 0.4.
_old_paths.install()


def __getattr__(name: str) -> object:
    if name in _old_paths.OLD_PATHS:  # gpu_inference_constructs.<old module> as an attribute
        return importlib.import_module(_old_paths.warn_moved(name))
    return _exported(name)
