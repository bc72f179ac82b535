"""Whether a worker traces. No OpenTelemetry here: with no OTLP endpoint set, tracing_from returns None, the SDK is
never imported and a request pays one `is None` branch (spans.py is the SDK side, trace_context.py reads the trace a
request arrives in). The SDK is the server's `tracing` extra (`pip install inference-server[tracing]`; the image
installs it): an endpoint set without it is a settings error at start, not a server that silently sends nothing."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..settings import SettingsError

if TYPE_CHECKING:
    from .spans import Tracing
    from .trace_settings import TraceSettings

TRACE = "inference_server.trace"  # scope key: the request's RequestTrace, for the protocols' routes (None: unsampled)


def tracing_from(settings: TraceSettings, worker: int = 0) -> Tracing | None:
    """The worker's tracing when an OTLP endpoint is set (and OTEL_SDK_DISABLED is not true), else None."""
    endpoint = settings.traces_endpoint
    if endpoint is None or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    try:
        from .spans import Tracing
    except ImportError as missing:
        raise SettingsError(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            f"set, but the OpenTelemetry SDK is not installed "
            f"({missing.name}): install the server's tracing extra (pip install "
            f"'inference-server[tracing]'), or unset the endpoint",
        ) from missing
    return Tracing(settings, endpoint, worker)
