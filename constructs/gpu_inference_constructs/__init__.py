"""AWS CDK constructs for real-time PyTorch inference on ECS GPU capacity.

Everything a consumer needs is importable from here: the constructs, their props, the server
contract and its presets. Each props class documents its defaults.
"""

from .api_keys import api_keys_secret
from .bundled_server import BundledServer, BundledServerProps, bundled_server_image
from .deployment import DeploymentProps, RollbackAlarms, RollbackProps, RollbackThresholds
from .deployment_capacity import ServiceDeployment
from .errors import ConfigError
from .gpu_capacity import GpuCapacity, GpuCapacityProps
from .gpu_share import GpuShare
from .instance_catalog import CATALOG, GpuInstanceType
from .latency_alarms import LatencyAlarmProps, LatencyAlarmThresholds
from .load_balancer import ConfiguredLoad, InferenceLoadBalancer, LoadBalancerProps, LoadBalancerQuotas
from .model_props import ModelProps
from .model_service import ModelService
from .model_store import ModelStore, ModelStoreProps
from .monitoring import InferenceMonitoring, ModelAlarms, MonitoringProps
from .network import DEFAULT_INTERFACE_ENDPOINTS, InferenceNetwork, NetworkProps, grant_logs_service
from .notifications import NotificationTopic, topic_target
from .presets import TgiProps, TgiServer, TritonProps, TritonServer
from .result_cache import ModelCacheProps, ResultCache, ResultCacheProps
from .scaling_props import ModelScalingProps, PredictiveScalingProps, ScalingProps
from .schedules import CapacityPrewarm, ServiceSchedule
from .server_contract import (
    DEFAULT_COLLECTOR_IMAGE,
    DEFAULT_FETCHER_IMAGE,
    EcrImage,
    LivenessCheck,
    ModelFromS3,
    PrometheusMetrics,
    ScalingSignal,
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
from .target_group_metrics import TargetGroupMetrics
from .task_starts import TaskStarts
from .vllm_server import VllmProps, VllmServer
from .warm_pool import WarmPoolLaunches, WarmPoolProps

__all__ = [
    "bundled_server_image",
    "api_keys_secret",
    "ModelCacheProps",
    "ResultCache",
    "ResultCacheProps",
    "BundledServer",
    "BundledServerProps",
    "CATALOG",
    "CapacityPrewarm",
    "ClusterCapacity",
    "ConfigError",
    "ConfiguredLoad",
    "DEFAULT_COLLECTOR_IMAGE",
    "DEFAULT_FETCHER_IMAGE",
    "DEFAULT_INTERFACE_ENDPOINTS",
    "DeploymentProps",
    "EcrImage",
    "GpuCapacity",
    "GpuCapacityProps",
    "GpuInstanceType",
    "GpuShare",
    "InferenceLoadBalancer",
    "InferenceMonitoring",
    "InferenceNetwork",
    "LatencyAlarmProps",
    "LatencyAlarmThresholds",
    "ListenerRoute",
    "LivenessCheck",
    "LoadBalancerRoute",
    "LoadBalancerProps",
    "LoadBalancerQuotas",
    "ModelAlarms",
    "ModelBucket",
    "ModelFromS3",
    "ModelProps",
    "ModelScalingProps",
    "ModelService",
    "ModelStore",
    "ModelStoreProps",
    "MonitoringProps",
    "NetworkProps",
    "NotificationTopic",
    "PredictiveScalingProps",
    "PrometheusMetrics",
    "RollbackAlarms",
    "TargetGroupMetrics",
    "TaskStarts",
    "TgiProps",
    "TgiServer",
    "TritonProps",
    "TritonServer",
    "RollbackProps",
    "RollbackThresholds",
    "ScalingProps",
    "ScalingSignal",
    "ServerContext",
    "ServerContract",
    "ServerDefinition",
    "ServiceAccess",
    "ServiceDeployment",
    "ServiceLogs",
    "ServiceScaling",
    "ServiceSchedule",
    "ServiceTimingProps",
    "SglangProps",
    "SglangServer",
    "StopTiming",
    "VllmProps",
    "VllmServer",
    "WarmPoolLaunches",
    "WarmPoolProps",
    "from_dict",
    "grant_logs_service",
    "topic_target",
]
