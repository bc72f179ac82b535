"""A worker's request spans on the OpenTelemetry SDK (the `tracing` extra: opentelemetry-sdk and the OTLP encoder),
sent by one span processor per worker process (otlp_exporter.py: OTLP over HTTP, in batches, from the worker's event
loop), sampled parent-based at TRACE_SAMPLE_RATIO, or by the standard OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
(always_on, always_off, traceidratio and their parentbased_ forms, decided as the SDK's samplers decide them).

The sampling decision is taken before the SDK is asked for anything (start() draws the 64 bits a ratio sampler reads,
and only a sampled request gets a span), so an unsampled request costs a random draw and a comparison rather than the
SDK's non-recording span. A sampled request gets a RequestTrace: its span (the request) and children recorded with
the phases' times (time.monotonic() marks, converted to the epoch): admission, cache lookup, preprocess, queue wait,
batch formation and forward (from the model process's BatchRuns, which the link returns for a traced job: the same
host's clock) and postprocess."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from .. import __version__
from ..link_messages import JobResult
from .otlp_exporter import OtlpExporter
from .trace_context import Incoming, incoming
from .trace_settings import TraceSettings

SHUTDOWN_FLUSH_MS = 2000  # at the worker's exit: the spans not yet sent get this long to go
TRACE_ID_LIMIT = (1 << 64) - 1  # a ratio sampler reads a trace id's low 64 bits (the SDK's TraceIdRatioBased)
SCOPE = ("inference_server", __version__)


def parent_based_ratio(settings: TraceSettings) -> float | None:
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


def sampler_of(settings: TraceSettings) -> tuple[bool, float]:
    """(whether a caller's sampled flag decides, the share of the other requests traced), as the SDK reads
    OTEL_TRACES_SAMPLER (an unknown name is its default, parentbased_always_on)."""
    ratio = parent_based_ratio(settings)
    if ratio is not None:
        return True, ratio
    name = os.environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    return {
        "always_on": (False, 1.0),
        "always_off": (False, 0.0),
        "traceidratio": (False, _sampler_argument()),
        "parentbased_always_off": (True, 0.0),
    }.get(name, (True, 1.0))


def resource_of(settings: TraceSettings, worker: int) -> Resource:
    """The SDK's resource: OTEL_RESOURCE_ATTRIBUTES (read by the SDK), then the service's name (OTEL_SERVICE_NAME,
    else the model's or the pool's) and what the server serves (the model, or the pool), later ones winning."""
    name, version = settings.trace_service
    return Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or name,
            "service.version": version,
            "deployment.environment.name": settings.deployment_env,
            **settings.trace_attributes,
            "worker": worker,
        }
    )


def new_trace_id(low: int) -> int:
    """A trace id whose low 64 bits are ``low`` (what the ratio sampler read) and that starts with the epoch second
    (X-Ray's form, which X-Ray also reads in W3C ids)."""
    return (int(time.time()) << 96) | (random.getrandbits(32) << 64) | low


class _DecidedIds(IdGenerator):
    """Span ids at random; a new trace's id is the one start() drew its sampling decision from (set just before the
    request's span starts, on the same thread)."""

    def __init__(self) -> None:
        self.next_trace_id = 0

    def generate_span_id(self) -> int:
        span_id = 0
        while not span_id:
            span_id = random.getrandbits(64)
        return span_id

    def generate_trace_id(self) -> int:
        trace_id, self.next_trace_id = self.next_trace_id, 0
        return trace_id or new_trace_id(random.getrandbits(64))


class RequestTrace:
    """A sampled request's span and its children, from marks on the time.monotonic() clock."""

    __slots__ = ("started", "_tracer", "_span", "_context", "_offset_ns")

    def __init__(self, tracer: trace.Tracer, parent: Context | None, name: str, attributes: Mapping[str, Any]) -> None:
        self._offset_ns = time.time_ns() - time.monotonic_ns()
        self.started = time.monotonic()
        self._tracer = tracer
        self._span = tracer.start_span(name, parent, SpanKind.SERVER, attributes, start_time=self._ns(self.started))
        self._context = trace.set_span_in_context(self._span)

    def _ns(self, monotonic_s: float) -> int:
        return int(monotonic_s * 1e9) + self._offset_ns

    def child(self, name: str, start: float, end: float, attributes: Mapping[str, Any] | None = None) -> None:
        span = self._tracer.start_span(name, self._context, SpanKind.INTERNAL, attributes, start_time=self._ns(start))
        span.end(end_time=self._ns(end))

    def admitted(self, shed: str | None) -> None:
        """The gate passed, from the request's start: admitted, or why it was shed."""
        self.child("admission", self.started, time.monotonic(), {"admission.result": shed or "admitted"})

    def model(self, submitted: float, result: JobResult) -> None:
        """The job's wait from its submission to its first batch, then each batch's formation and forward."""
        runs = result.batches or ()
        if runs:
            self.child("queue wait", submitted, min(run.picked for run in runs))
        for run in runs:
            batch = {
                "batch.size": run.size,
                "batch.padded_size": run.padded_size,
                "batch.sequence_bucket": run.sequence_bucket,
                "batch.sequence_length": run.sequence_length,
            }
            self.child("batch formation", run.picked, run.collated, batch)
            self.child("forward", run.collated, run.forward_end, batch)

    def set(self, attributes: Mapping[str, Any]) -> None:
        """Attributes known only once the request is under way (a pool's model, and whether it was a hit)."""
        self._span.set_attributes(attributes)

    def end(self, status: int) -> None:
        self._span.set_attribute("http.response.status_code", status)
        if status >= 500:
            self._span.set_status(Status(StatusCode.ERROR))
        self._span.end(end_time=self._ns(time.monotonic()))


class Tracing:
    """A worker's sampler, tracer and span processor; start() opens a request's trace when it is sampled."""

    def __init__(self, settings: TraceSettings, endpoint: str, worker: int = 0) -> None:
        self._parent_decides, ratio = sampler_of(settings)
        self._bound = round(ratio * (TRACE_ID_LIMIT + 1))
        self._ids = _DecidedIds()
        self.exporter = OtlpExporter(endpoint)
        self.provider = TracerProvider(
            sampler=ALWAYS_ON, resource=resource_of(settings, worker), id_generator=self._ids, shutdown_on_exit=False
        )
        self.provider.add_span_processor(self.exporter)
        self._tracer = self.provider.get_tracer(*SCOPE)
        self._model = settings.trace_attributes

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
        parent = None
        if caller.span_id is not None and caller.sampled is not None:
            remote = SpanContext(
                caller.trace_id, caller.span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
            )
            parent = trace.set_span_in_context(NonRecordingSpan(remote))
        else:  # no parent here (a new trace, or the load balancer's Root alone): the trace's first span, its id kept
            self._ids.next_trace_id = caller.trace_id
        return RequestTrace(
            self._tracer,
            parent,
            f"{method} {path}",
            {**self._model, "http.request.method": method, "url.path": path, "request.id": request_id},
        )

    def flush(self, timeout_ms: int = 30000) -> bool:
        return self.exporter.flush(timeout_ms)

    def shutdown(self) -> None:
        """The spans not sent yet go, for at most SHUTDOWN_FLUSH_MS."""
        self.exporter.shutdown(SHUTDOWN_FLUSH_MS)
