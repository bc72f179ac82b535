"""What a model's task sends out: ``TelemetryProps`` (FireLens logs, traces), the log archive, and the OpenTelemetry
collector sidecar. Imported on first use, like the package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
