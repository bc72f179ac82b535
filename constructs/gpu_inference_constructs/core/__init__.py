"""What needs no aws_cdk, and what every other subpackage builds on: ``ConfigError``, cdk.json's settings, the instance
catalog, the server contract's value types and the bundled server's facts, and the props (typed dataclasses, their
defaults beside each field) the constructs take. The sizing advisor runs on these alone;
``tests/infra/test_import_graph.py`` keeps aws_cdk, jsii and constructs out. Imported on first use, like the package
root's names."""

from typing import TYPE_CHECKING

from .lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .adapter_sync import AdapterSync
    from .deployment_capacity import ServiceDeployment, tasks_for_deployment_at_peak
    from .ecr_image import EcrImage
    from .errors import ConfigError, Problem, require, require_range
    from .gpu_share import GpuShare
    from .instance_catalog import CATALOG, GpuInstanceType, is_neuron_type
    from .latency_alarms import LatencyAlarmProps, LatencyAlarmThresholds
    from .log_archive_props import LogArchive
    from .lora_settings import LoraBaseModel, LoraSettings
    from .model_props import ModelProps, service_deployment
    from .pool_props import DEFAULT_POOL_VERSION, PoolAlarmProps, PoolProps
    from .scaling_props import ModelScalingProps, PredictiveScalingProps, ScalingProps
    from .schedules import CapacityPrewarm, ServiceSchedule
    from .server_contract import (
        DEFAULT_COLLECTOR_IMAGE,
        DEFAULT_FETCHER_IMAGE,
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
    from .service_timing import ServiceTimingProps
    from .settings import from_dict
    from .target_optimizer_props import TargetOptimizerProps
    from .task_size import SidecarReservation

__all__ = [
    "AdapterSync",
    "CATALOG",
    "CapacityPrewarm",
    "ConfigError",
    "DEFAULT_COLLECTOR_IMAGE",
    "DEFAULT_FETCHER_IMAGE",
    "DEFAULT_POOL_VERSION",
    "EcrImage",
    "ExpressionSignal",
    "GpuInstanceType",
    "GpuShare",
    "LatencyAlarmProps",
    "LatencyAlarmThresholds",
    "LivenessCheck",
    "LogArchive",
    "LoraBaseModel",
    "LoraSettings",
    "ModelFromS3",
    "ModelProps",
    "ModelScalingProps",
    "PoolAlarmProps",
    "PoolProps",
    "PredictiveScalingProps",
    "Problem",
    "PrometheusMetrics",
    "ScalingProps",
    "ScalingSignal",
    "ServerAlarm",
    "ServerContext",
    "ServerContract",
    "ServerDefinition",
    "ServiceDeployment",
    "ServiceSchedule",
    "ServiceTimingProps",
    "SidecarReservation",
    "StopTiming",
    "TargetOptimizerProps",
    "from_dict",
    "is_neuron_type",
    "require",
    "require_range",
    "service_deployment",
    "tasks_for_deployment_at_peak",
]

_MODULE_OF = {
    "tasks_for_deployment_at_peak": "deployment_capacity",
    "service_deployment": "model_props",
    "DEFAULT_POOL_VERSION": "pool_props",
    "is_neuron_type": "instance_catalog",
    "require_range": "errors",
    "require": "errors",
    "Problem": "errors",
    "CATALOG": "instance_catalog",
    "CapacityPrewarm": "schedules",
    "ConfigError": "errors",
    "DEFAULT_COLLECTOR_IMAGE": "server_contract",
    "DEFAULT_FETCHER_IMAGE": "server_contract",
    "EcrImage": "ecr_image",
    "ExpressionSignal": "server_contract",
    "GpuInstanceType": "instance_catalog",
    "GpuShare": "gpu_share",
    "LatencyAlarmProps": "latency_alarms",
    "LatencyAlarmThresholds": "latency_alarms",
    "LivenessCheck": "server_contract",
    "LogArchive": "log_archive_props",
    "AdapterSync": "adapter_sync",
    "LoraBaseModel": "lora_settings",
    "LoraSettings": "lora_settings",
    "ModelFromS3": "server_contract",
    "ModelProps": "model_props",
    "ModelScalingProps": "scaling_props",
    "PoolAlarmProps": "pool_props",
    "PoolProps": "pool_props",
    "PredictiveScalingProps": "scaling_props",
    "PrometheusMetrics": "server_contract",
    "ScalingProps": "scaling_props",
    "ScalingSignal": "server_contract",
    "ServerAlarm": "server_contract",
    "ServerContext": "server_contract",
    "ServerContract": "server_contract",
    "ServerDefinition": "server_contract",
    "ServiceDeployment": "deployment_capacity",
    "ServiceSchedule": "schedules",
    "ServiceTimingProps": "service_timing",
    "SidecarReservation": "task_size",
    "StopTiming": "server_contract",
    "TargetOptimizerProps": "target_optimizer_props",
    "from_dict": "settings",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
