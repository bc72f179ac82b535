"""AWS CDK constructs for real-time PyTorch inference on ECS GPU capacity.

Everything a consumer needs is importable from here: the constructs, their props, the server
contract and its presets. Each props class documents its defaults.
"""

from .api_keys import api_keys_secret
from .bundled_server import BundledServer, BundledServerProps, bundled_server_image, bundled_stop
from .bundled_signals import BundledScalingProps
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
from .service_scaling import ServiceScaling
from .service_timing import ServiceTimingProps
from .settings import from_dict
from .sglang_server import SglangProps, SglangServer
from .target_group_metrics import TargetGroupMetrics
from .task_starts import TaskStarts
from .vllm_server import VllmProps, VllmServer, vllm_stop
from .warm_pool import WarmPoolLaunches, WarmPoolProps

__all__ = [
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
    "DeploymentProps",
    "EcrImage",
    "ExpressionSignal",
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
    "SglangProps",
    "SglangServer",
    "StopTiming",
    "TargetGroupMetrics",
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
    "tgi_stop",
    "topic_target",
    "triton_stop",
    "vllm_stop",
]
