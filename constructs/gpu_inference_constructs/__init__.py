"""AWS CDK constructs for real-time PyTorch inference on ECS GPU capacity.

Everything a consumer needs is importable from here: the constructs, their props, the server
contract and its presets. Each props class documents its defaults.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .api_keys import api_keys_secret
    from .bundled_server import BundledServer, BundledServerProps, bundled_server_image, bundled_stop
    from .bundled_signals import BundledScalingProps
    from .capacity_group import CapacityGroup
    from .deployment import DeploymentProps, RollbackAlarms, RollbackProps, RollbackThresholds
    from .deployment_capacity import ServiceDeployment
    from .errors import ConfigError
    from .gpu_capacity import GpuCapacity, GpuCapacityProps
    from .gpu_share import GpuShare
    from .instance_catalog import CATALOG, GpuInstanceType
    from .latency_alarms import LatencyAlarmProps, LatencyAlarmThresholds
    from .load_balancer import ConfiguredLoad, InferenceLoadBalancer, LoadBalancerProps, LoadBalancerQuotas
    from .log_archive_props import LogArchive
    from .model_pool import ModelPool
    from .model_props import ModelProps
    from .model_service import ModelService
    from .model_store import ModelStore, ModelStoreProps
    from .monitoring import InferenceMonitoring, ModelAlarms, MonitoringProps
    from .network import DEFAULT_INTERFACE_ENDPOINTS, InferenceNetwork, NetworkProps, grant_logs_service
    from .neuron_capacity import NeuronCapacity, NeuronCapacityProps
    from .neuron_server import NeuronServer
    from .neuron_server_props import NeuronEcrImage, NeuronServerProps
    from .notifications import NotificationTopic, topic_target
    from .otel_collector import DEFAULT_OTEL_COLLECTOR_IMAGE, GEN_AI_TIME_PER_OUTPUT_TOKEN, GEN_AI_TIME_TO_FIRST_TOKEN
    from .pool_props import PoolAlarmProps, PoolProps
    from .pool_queries import PoolQueries
    from .pool_server import PoolServer
    from .presets import TgiProps, TgiServer, TritonProps, TritonServer, tgi_stop, triton_stop
    from .result_cache import ModelCacheProps, ResultCache, ResultCacheProps
    from .scaling_props import ModelScalingProps, PredictiveScalingProps, ScalingProps
    from .schedules import CapacityPrewarm, ServiceSchedule
    from .server_contract import (
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
    from .service_choices import ClusterCapacity, ListenerRoute, LoadBalancerRoute, ModelBucket
    from .service_props import ServiceAccess, ServiceLogs
    from .service_scaling import ServiceScaling
    from .service_timing import ServiceTimingProps
    from .settings import from_dict
    from .sglang_server import SglangProps, SglangServer
    from .stack_limits import MAX_STACK_RESOURCES, stacks_per_model
    from .target_group_metrics import TargetGroupMetrics
    from .target_optimizer_props import TargetOptimizerProps
    from .task_size import SidecarReservation
    from .task_starts import TaskStarts
    from .telemetry import FireLensProps, TelemetryProps
    from .vllm_server import VllmProps, VllmServer, vllm_stop
    from .warm_pool import WarmPoolLaunches, WarmPoolProps


__all__ = [
    "CapacityGroup",
    "ClusterCapacity",
    "ListenerRoute",
    "LoadBalancerRoute",
    "ModelBucket",
    "ServiceAccess",
    "ServiceLogs",
    "TelemetryProps",
    "FireLensProps",
    "LogArchive",
    "BundledScalingProps",
    "BundledServer",
    "BundledServerProps",
    "CATALOG",
    "CapacityPrewarm",
    "ConfigError",
    "ConfiguredLoad",
    "DEFAULT_COLLECTOR_IMAGE",
    "DEFAULT_FETCHER_IMAGE",
    "DEFAULT_INTERFACE_ENDPOINTS",
    "DEFAULT_OTEL_COLLECTOR_IMAGE",
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
    "PoolProps",
    "PoolQueries",
    "PoolServer",
    "PredictiveScalingProps",
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
    "stacks_per_model",
    "tgi_stop",
    "topic_target",
    "triton_stop",
    "vllm_stop",
]


# Imported on first use, so that the pure-Python parts (the sizing advisor) run without loading aws_cdk and its Node
# runtime; `from gpu_inference_constructs import X` and type checkers see the names as before.
_MODULE_OF = {
    "CapacityGroup": "capacity_group",
    "ClusterCapacity": "service_choices",
    "ListenerRoute": "service_choices",
    "LoadBalancerRoute": "service_choices",
    "ModelBucket": "service_choices",
    "ServiceAccess": "service_props",
    "ServiceLogs": "service_props",
    "TelemetryProps": "telemetry",
    "FireLensProps": "telemetry",
    "LogArchive": "log_archive_props",
    "BundledScalingProps": "bundled_signals",
    "bundled_stop": "bundled_server",
    "ExpressionSignal": "server_contract",
    "ServerAlarm": "server_contract",
    "tgi_stop": "presets",
    "triton_stop": "presets",
    "vllm_stop": "vllm_server",
    "api_keys_secret": "api_keys",
    "BundledServer": "bundled_server",
    "BundledServerProps": "bundled_server",
    "bundled_server_image": "bundled_server",
    "DeploymentProps": "deployment",
    "RollbackAlarms": "deployment",
    "RollbackProps": "deployment",
    "RollbackThresholds": "deployment",
    "ServiceDeployment": "deployment_capacity",
    "ConfigError": "errors",
    "GpuCapacity": "gpu_capacity",
    "GpuCapacityProps": "gpu_capacity",
    "GpuShare": "gpu_share",
    "CATALOG": "instance_catalog",
    "GpuInstanceType": "instance_catalog",
    "LatencyAlarmProps": "latency_alarms",
    "LatencyAlarmThresholds": "latency_alarms",
    "ConfiguredLoad": "load_balancer",
    "InferenceLoadBalancer": "load_balancer",
    "LoadBalancerProps": "load_balancer",
    "LoadBalancerQuotas": "load_balancer",
    "ModelPool": "model_pool",
    "ModelProps": "model_props",
    "ModelService": "model_service",
    "ModelStore": "model_store",
    "ModelStoreProps": "model_store",
    "InferenceMonitoring": "monitoring",
    "ModelAlarms": "monitoring",
    "MonitoringProps": "monitoring",
    "DEFAULT_INTERFACE_ENDPOINTS": "network",
    "InferenceNetwork": "network",
    "NetworkProps": "network",
    "NeuronCapacity": "neuron_capacity",
    "NeuronCapacityProps": "neuron_capacity",
    "grant_logs_service": "network",
    "NotificationTopic": "notifications",
    "PoolAlarmProps": "pool_props",
    "PoolProps": "pool_props",
    "PoolQueries": "pool_queries",
    "PoolServer": "pool_server",
    "topic_target": "notifications",
    "TgiProps": "presets",
    "TgiServer": "presets",
    "TritonProps": "presets",
    "TritonServer": "presets",
    "NeuronServer": "neuron_server",
    "NeuronEcrImage": "neuron_server_props",
    "NeuronServerProps": "neuron_server_props",
    "ModelCacheProps": "result_cache",
    "ResultCache": "result_cache",
    "ResultCacheProps": "result_cache",
    "ModelScalingProps": "scaling_props",
    "PredictiveScalingProps": "scaling_props",
    "ScalingProps": "scaling_props",
    "CapacityPrewarm": "schedules",
    "ServiceSchedule": "schedules",
    "MAX_STACK_RESOURCES": "stack_limits",
    "stacks_per_model": "stack_limits",
    "SidecarReservation": "task_size",
    "DEFAULT_COLLECTOR_IMAGE": "server_contract",
    "DEFAULT_OTEL_COLLECTOR_IMAGE": "otel_collector",
    "GEN_AI_TIME_PER_OUTPUT_TOKEN": "otel_collector",
    "GEN_AI_TIME_TO_FIRST_TOKEN": "otel_collector",
    "DEFAULT_FETCHER_IMAGE": "server_contract",
    "EcrImage": "server_contract",
    "LivenessCheck": "server_contract",
    "ModelFromS3": "server_contract",
    "PrometheusMetrics": "server_contract",
    "ScalingSignal": "server_contract",
    "ServerContext": "server_contract",
    "ServerContract": "server_contract",
    "ServerDefinition": "server_contract",
    "StopTiming": "server_contract",
    "ServiceScaling": "service_scaling",
    "ServiceTimingProps": "service_timing",
    "from_dict": "settings",
    "SglangProps": "sglang_server",
    "SglangServer": "sglang_server",
    "TargetGroupMetrics": "target_group_metrics",
    "TargetOptimizerProps": "target_optimizer_props",
    "TaskStarts": "task_starts",
    "VllmProps": "vllm_server",
    "VllmServer": "vllm_server",
    "WarmPoolLaunches": "warm_pool",
    "WarmPoolProps": "warm_pool",
}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
