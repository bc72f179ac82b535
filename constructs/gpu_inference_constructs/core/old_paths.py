"""The module paths of 0.2 (one flat folder) and where each module lives since 0.3 (issue 56). The package root
installs :class:`OldPathFinder`, so ``import gpu_inference_constructs.<old>`` and ``from gpu_inference_constructs.<old>
import Name`` keep working for one minor version: they warn (DeprecationWarning, naming the new path) and give the very
module object of the new path, so ``isinstance`` and monkeypatching see one module. Remove in 0.4."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

ROOT = "gpu_inference_constructs"

OLD_PATHS = {
    "acknowledgements": "shared.acknowledgements",
    "api_keys": "service.api_keys",
    "bundled_server": "servers.bundled",
    "bundled_signals": "servers.bundled_signals",
    "capacity_group": "capacity.capacity_group",
    "cdk_interfaces": "shared.cdk_interfaces",
    "cron_expressions": "core.cron_expressions",
    "deployment": "rollout.deployment",
    "deployment_capacity": "core.deployment_capacity",
    "deployment_props": "core.deployment_props",
    "environment_dashboard": "observability.environment_dashboard",
    "errors": "core.errors",
    "gpu_auto_scaling_group": "capacity.auto_scaling_group",
    "gpu_capacity": "capacity.gpu_capacity",
    "gpu_capacity_props": "core.capacity_props",
    "gpu_capacity_provider": "capacity.capacity_provider",
    "gpu_instances": "capacity.instances",
    "gpu_packing": "capacity.gpu_packing",
    "gpu_share": "core.gpu_share",
    "group_events": "capacity.group_events",
    "handler_image": "servers.handler_image",
    "image_egress": "service.image_egress",
    "inline_function": "shared.inline_function",
    "instance_catalog": "core.instance_catalog",
    "instance_regions": "capacity.instance_regions",
    "latency_alarms": "core.latency_alarms",
    "latency_goal": "core.latency_goal",
    "legacy_keywords": "core.legacy_keywords",
    "listener_rules": "routing.listener_rules",
    "liveness_check": "core.liveness_check",
    "llm_preset": "servers.llm_preset",
    "llm_server_checks": "servers.llm_checks",
    "load_balancer": "routing.load_balancer",
    "load_balancer_props": "core.load_balancer_props",
    "log_archive": "task_telemetry.log_archive",
    "log_archive_props": "core.log_archive_props",
    "log_retention": "shared.log_retention",
    "metric_names": "core.metric_names",
    "model_alarms": "observability.model_alarms",
    "model_fetch": "store.model_fetch",
    "model_pool": "service.model_pool",
    "model_props": "core.model_props",
    "model_service": "service.model_service",
    "model_source": "core.model_source",
    "model_store": "store.model_store",
    "monitoring": "observability.monitoring",
    "monitoring_costs": "observability.monitoring_costs",
    "monitoring_props": "core.monitoring_props",
    "network": "networking.network",
    "neuron_capacity": "capacity.neuron_capacity",
    "neuron_capacity_props": "core.neuron_capacity_props",
    "neuron_placement": "core.neuron_placement",
    "neuron_server": "servers.neuron",
    "neuron_server_props": "servers.neuron_props",
    "notifications": "shared.notifications",
    "otel_collector": "task_telemetry.otel_collector",
    "pool_props": "core.pool_props",
    "pool_queries": "service.pool_queries",
    "pool_server": "servers.pool",
    "prediction_routes": "servers.prediction_routes",
    "presets": "servers.tgi_triton",
    "prometheus_metrics": "core.prometheus_metrics",
    "published_files": "store.published_files",
    "result_cache": "store.result_cache",
    "result_cache_props": "core.result_cache_props",
    "revision_health": "rollout.revision_health",
    "revision_hook": "rollout.revision_hook",
    "revision_hook_handler": "rollout.revision_hook_handler",
    "scaling_props": "core.scaling_props",
    "schedules": "core.schedules",
    "server_contract": "core.server_contract",
    "server_facts": "core.server_facts",
    "server_signals": "core.server_signals",
    "service_checks": "service.checks",
    "service_choices": "service.choices",
    "service_props": "service.props",
    "service_rollback": "rollout.service_rollback",
    "service_routing": "service.routing",
    "service_scaling": "scaling.service_scaling",
    "service_task": "service.task",
    "service_timing": "core.service_timing",
    "settings": "core.settings",
    "sglang_server": "servers.sglang",
    "spot_draining": "service.spot_draining",
    "stack_limits": "service.stack_limits",
    "stop_timing": "core.stop_timing",
    "subnet_selection": "networking.subnet_selection",
    "target_group_metrics": "routing.target_group_metrics",
    "target_health": "routing.target_health",
    "target_optimizer": "service.target_optimizer",
    "target_optimizer_props": "core.target_optimizer_props",
    "task_gpu_share": "service.task_gpu_share",
    "task_size": "core.task_size",
    "task_start_handler": "observability.task_start_handler",
    "task_starts": "observability.task_starts",
    "telemetry": "task_telemetry.telemetry",
    "vllm_server": "servers.vllm",
    "warm_pool": "capacity.warm_pool",
    "warm_pool_ecr_login": "capacity.warm_pool_ecr_login",
    "warm_pool_handler": "capacity.warm_pool_handler",
    "warm_pool_props": "core.warm_pool_props",
    "web_acl": "routing.web_acl",
}
"""Old module (under the package root) -> its new module (the same)."""

GONE = {
    old: "cdk.json's model entry is the app's form after 0.3.0 (stacks/model_entry.py in the library's repository): "
    "give the constructs the typed props (ModelProps, and a preset such as VllmServer(props=VllmProps(...))), and "
    "validate them with validate_service"
    for old in ("model_entry", "servers.model_entry")
}
"""Old module -> why it is gone from the library and what to use instead (an import of it raises that)."""


def warn_moved(old: str, stacklevel: int = 3) -> str:
    new = f"{ROOT}.{OLD_PATHS[old]}"
    warnings.warn(
        f"{ROOT}.{old} moved to {new} in 0.3 (import it from there, or the name from {ROOT}); the old path goes in 0.4",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return new


class _Alias(importlib.abc.Loader):
    """Gives the new module itself for the old path (one module object, so isinstance and monkeypatching agree)."""

    def __init__(self, old: str):
        self.old = old
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(warn_moved(self.old))
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system set the old path's spec on it: give the module its own back


class OldPathFinder(importlib.abc.MetaPathFinder):
    """Finds ``gpu_inference_constructs.<old>`` for every module of :data:`OLD_PATHS`; refuses each of :data:`GONE`
    naming what replaces it."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        root, _, old = fullname.partition(".")
        if root == ROOT and old in GONE:
            raise ModuleNotFoundError(f"{fullname} is gone: {GONE[old]}", name=fullname)
        if root != ROOT or old not in OLD_PATHS:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(old))


def install() -> None:
    if not any(isinstance(finder, OldPathFinder) for finder in sys.meta_path):
        sys.meta_path.append(OldPathFinder())
