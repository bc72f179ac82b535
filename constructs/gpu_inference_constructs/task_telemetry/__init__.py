"""What a model's task sends out: ``TelemetryProps`` (FireLens logs, traces), the log archive, and the OpenTelemetry
collector sidecar. Imported on first use, like the package root's names."""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .otel_collector import DEFAULT_OTEL_COLLECTOR_IMAGE, GEN_AI_TIME_PER_OUTPUT_TOKEN, GEN_AI_TIME_TO_FIRST_TOKEN
    from .telemetry import FireLensProps, TelemetryProps

__all__ = [
    "DEFAULT_OTEL_COLLECTOR_IMAGE",
    "FireLensProps",
    "GEN_AI_TIME_PER_OUTPUT_TOKEN",
    "GEN_AI_TIME_TO_FIRST_TOKEN",
    "TelemetryProps",
]

_MODULE_OF = {
    "DEFAULT_OTEL_COLLECTOR_IMAGE": "otel_collector",
    "FireLensProps": "telemetry",
    "GEN_AI_TIME_PER_OUTPUT_TOKEN": "otel_collector",
    "GEN_AI_TIME_TO_FIRST_TOKEN": "otel_collector",
    "TelemetryProps": "telemetry",
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
