"""A worker's request spans, sent by one exporter per worker process (otlp_exporter.py: OTLP over HTTP, in batches,
from the worker's event loop), sampled parent-based at TRACE_SAMPLE_RATIO, or by the standard OTEL_TRACES_SAMPLER and
OTEL_TRACES_SAMPLER_ARG (always_on, always_off, traceidratio and their parentbased_ forms, decided as the
OpenTelemetry SDK decides them).

A sampled request gets a RequestTrace: its span (the request) and children recorded from the phases' marks on the
time.monotonic() clock, each a plain tuple (otlp_wire.SpanData) made as it is recorded: admission, cache lookup,
preprocess, queue wait, batch formation and forward (from the model process's BatchRuns, which the link returns for a
traced job: the same host's clock) and postprocess; the exporter writes a batch of them out as protobuf. An unsampled
request gets none, and its job asks the model for nothing more. Why not the SDK's span objects: a sampled request
cost its worker about 0.43 ms through them, and a null model at saturation lost 7-9 % of its throughput at 1 %
sampling (bench/README.md, "Tracing's cost")."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from typing import Any

from .. import __version__
from ..link_messages import JobResult
from ..settings import Settings
from .otlp_exporter import OtlpExporter, key_values
from .otlp_wire import SPAN_KIND_INTERNAL, SPAN_KIND_SERVER, SpanData
from .trace_context import Incoming, incoming

SHUTDOWN_FLUSH_MS = 2000  # at the worker's exit: the spans not yet sent get this long to go
TRACE_ID_LIMIT = (1 << 64) - 1  # a ratio sampler reads a trace id's low 64 bits (the SDK's TraceIdRatioBased)
SCOPE = ("inference_server", __version__)


def parent_based_ratio(settings: Settings) -> float | None:
    """The share of requests traced where the caller does not decide: OTEL_TRACES_SAMPLER_ARG when
    OTEL_TRACES_SAMPLER is parentbased_traceidratio (1 when missing or not a share, as the SDK reads it), else
    TRACE_SAMPLE_RATIO when OTEL_TRACES_SAMPLER is unset; None for any other standard sampler."""
    sampler = os.environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if not sampler:
        return settings.trace_sample_ratio
    if sampler != "parentbased_traceidratio":
        return None
    return _sampler_argument()


def _sampler_argument() -> float:
    try:
        ratio = float(os.environ.get("OTEL_TRACES_SAMPLER_ARG", "1"))
    except ValueError:
        return 1.0
    return ratio if 0 <= ratio <= 1 else 1.0


def sampler_of(settings: Settings) -> tuple[bool, float]:
    """(whether a caller's sampled flag decides, the share of the other requests traced), as the SDK reads
    OTEL_TRACES_SAMPLER (an unknown name is its default, parentbased_always_on)."""
    ratio = parent_based_ratio(settings)
    if ratio is not None:
        return True, ratio
    name = os.environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    return {"always_on": (False, 1.0), "always_off": (False, 0.0), "traceidratio": (False, _sampler_argument()),
            "parentbased_always_off": (True, 0.0)}.get(name, (True, 1.0))


def resource_attributes(settings: Settings, worker: int) -> dict[str, Any]:
    """OTEL_RESOURCE_ATTRIBUTES (comma-separated key=value, URL-encoded), then OTEL_SERVICE_NAME, then the model's
    own attributes, later ones winning, as the SDK merges them."""
    found: dict[str, Any] = dict(key_values(os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")))
    found["service.name"] = os.environ.get("OTEL_SERVICE_NAME") or settings.model_name
    found.update({"service.version": settings.model_version, "deployment.environment.name": settings.deployment_env,
                  "model.name": settings.model_name, "model.version": settings.model_version, "worker": worker,
                  "telemetry.sdk.language": "python", "telemetry.sdk.name": SCOPE[0], "telemetry.sdk.version": SCOPE[1]})
    return found


def _span_id() -> bytes:
    span_id = 0
    while not span_id:
        span_id = random.getrandbits(64)
    return span_id.to_bytes(8, "big")


def new_trace_id(low: int) -> int:
    """A trace id whose low 64 bits are ``low`` (what the ratio sampler read) and that starts with the epoch second
    (X-Ray's form, which X-Ray also reads in W3C ids)."""
    return (int(time.time()) << 96) | (random.getrandbits(32) << 64) | low


class RequestTrace:
    """A sampled request's span and its children, from marks on the time.monotonic() clock."""

    __slots__ = ("started", "_exporter", "_trace_id", "_span_id", "_parent", "_name", "_attributes", "_offset_ns",
                 "_children")

    def __init__(self, exporter: OtlpExporter, trace_id: int, parent: int | None, name: str,
                 root_attributes: dict[str, Any]) -> None:
        self._exporter, self._trace_id, self._span_id = exporter, trace_id.to_bytes(16, "big"), _span_id()
        self._parent = parent.to_bytes(8, "big") if parent else b""
        self._name, self._attributes = name, root_attributes
        self._offset_ns = time.time_ns() - time.monotonic_ns()
        self.started = time.monotonic()
        self._children: list[SpanData] = []

    def _ns(self, monotonic_s: float) -> int:
        return int(monotonic_s * 1e9) + self._offset_ns

    def child(self, name: str, start: float, end: float, attributes: Mapping[str, Any] | None = None) -> None:
        self._children.append(SpanData(self._trace_id, _span_id(), self._span_id, name, SPAN_KIND_INTERNAL,
                                       self._ns(start), self._ns(end), attributes))

    def admitted(self, shed: str | None) -> None:
        """The gate passed, from the request's start: admitted, or why it was shed."""
        self.child("admission", self.started, time.monotonic(), {"admission.result": shed or "admitted"})

    def model(self, submitted: float, result: JobResult) -> None:
        """The job's wait from its submission to its first batch, then each batch's formation and forward."""
        runs = result.batches or ()
        if runs:
            self.child("queue wait", submitted, min(run.picked for run in runs))
        for run in runs:
            batch = {"batch.size": run.size, "batch.padded_size": run.padded_size,
                     "batch.sequence_bucket": run.sequence_bucket, "batch.sequence_length": run.sequence_length}
            self.child("batch formation", run.picked, run.collated, batch)
            self.child("forward", run.collated, run.forward_end, batch)

    def end(self, status: int) -> None:
        self._attributes["http.response.status_code"] = status
        root = SpanData(self._trace_id, self._span_id, self._parent, self._name, SPAN_KIND_SERVER,
                        self._ns(self.started), self._ns(time.monotonic()), self._attributes, status >= 500)
        self._exporter.add([root, *self._children])


class Tracing:
    """A worker's sampler and exporter; start() opens a request's trace when it is sampled."""

    def __init__(self, settings: Settings, endpoint: str, worker: int = 0) -> None:
        self._parent_decides, ratio = sampler_of(settings)
        self._bound = round(ratio * (TRACE_ID_LIMIT + 1))
        self.exporter = OtlpExporter(endpoint, resource_attributes(settings, worker), SCOPE)
        self._model = {"model.name": settings.model_name, "model.version": settings.model_version}

    def start(self, headers: list[tuple[bytes, bytes]], method: str, path: str, request_id: str) -> RequestTrace | None:
        """The request's trace, or None when it is not sampled: a caller that says whether it sampled decides (under
        a parent-based sampler), else the trace id's low bits against the ratio."""
        caller: Incoming | None = incoming(headers)
        if caller is None:  # most requests: the low bits are drawn first, the whole id only for a sampled one
            low = random.getrandbits(64)
            if low >= self._bound:
                return None
            caller = Incoming(new_trace_id(low), None, None)
        elif caller.span_id is not None and caller.sampled is not None and self._parent_decides:
            if not caller.sampled:
                return None
        elif caller.trace_id & TRACE_ID_LIMIT >= self._bound:
            return None
        elif caller.sampled is None:
            caller = Incoming(caller.trace_id, None, None)  # a Root alone, or Sampled=?: the trace's first span here
        return RequestTrace(self.exporter, caller.trace_id, caller.span_id, f"{method} {path}",
                            {**self._model, "http.request.method": method, "url.path": path, "request.id": request_id})

    def flush(self, timeout_ms: int = 30000) -> bool:
        return self.exporter.flush(timeout_ms)

    def shutdown(self) -> None:
        """The spans not sent yet go, for at most SHUTDOWN_FLUSH_MS."""
        self.exporter.shutdown(SHUTDOWN_FLUSH_MS)
