"""A worker's request spans, with the OpenTelemetry SDK: one exporter per worker process (OTLP over HTTP, in batches,
on the SDK's thread), parent-based sampling at TRACE_SAMPLE_RATIO, or at the standard OTEL_TRACES_SAMPLER_ARG
with OTEL_TRACES_SAMPLER=parentbased_traceidratio (another standard sampler is the SDK's).

A sampled request gets a RequestTrace: its span (the request) and children recorded from the phases' marks on the
time.monotonic() clock, each ended as it is recorded with explicit times: admission, cache lookup, preprocess, queue
wait, batch formation and forward (from the model process's BatchRuns, which the link returns for a traced job: the
same host's clock) and postprocess. An unsampled request gets none, and its job asks the model for nothing more."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    set_span_in_context,
)

from .. import __version__
from ..link_messages import JobResult
from ..settings import Settings
from .trace_context import Incoming, incoming

SHUTDOWN_FLUSH_MS = 2000  # at the worker's exit: the spans not yet sent get this long to go


def parent_based_ratio(settings: Settings) -> float | None:
    """The share of requests traced where the caller does not decide: OTEL_TRACES_SAMPLER_ARG when
    OTEL_TRACES_SAMPLER is parentbased_traceidratio (1 when missing or not a share, as the SDK reads it), else
    TRACE_SAMPLE_RATIO when OTEL_TRACES_SAMPLER is unset; None for any other standard sampler."""
    sampler = os.environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if not sampler:
        return settings.trace_sample_ratio
    if sampler != "parentbased_traceidratio":
        return None
    try:
        ratio = float(os.environ.get("OTEL_TRACES_SAMPLER_ARG", "1"))
    except ValueError:
        return 1.0
    return ratio if 0 <= ratio <= 1 else 1.0


class _TraceIds(IdGenerator):
    """A new trace's id starts with the epoch second (X-Ray's form, which X-Ray also reads in W3C ids), or is the
    one a request brought without a parent span (the load balancer's Root): set just before its span starts, on the
    event loop's one thread."""

    def __init__(self) -> None:
        self.next_trace_id = 0

    def generate_span_id(self) -> int:
        span_id = 0
        while not span_id:
            span_id = random.getrandbits(64)
        return span_id

    def generate_trace_id(self) -> int:
        trace_id, self.next_trace_id = self.next_trace_id, 0
        return trace_id or self.new_trace_id()

    @staticmethod
    def new_trace_id() -> int:
        return (int(time.time()) << 96) | random.getrandbits(96)


class RequestTrace:
    """A sampled request's span and its children, from marks on the time.monotonic() clock."""

    __slots__ = ("span", "started", "_tracer", "_context", "_offset_ns")

    def __init__(self, tracer: Tracer, span: Span) -> None:
        self.span, self._tracer, self._context = span, tracer, set_span_in_context(span)
        self._offset_ns = time.time_ns() - time.monotonic_ns()
        self.started = time.monotonic()

    def _ns(self, monotonic_s: float) -> int:
        return int(monotonic_s * 1e9) + self._offset_ns

    def child(self, name: str, start: float, end: float, attributes: Mapping[str, Any] | None = None) -> None:
        span = self._tracer.start_span(name, self._context, start_time=self._ns(start), attributes=attributes)
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
            attributes = {"batch.size": run.size, "batch.padded_size": run.padded_size,
                          "batch.sequence_bucket": run.sequence_bucket, "batch.sequence_length": run.sequence_length}
            self.child("batch formation", run.picked, run.collated, attributes)
            self.child("forward", run.collated, run.forward_end, attributes)

    def end(self, status: int) -> None:
        span = self.span
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        span.end()


class Tracing:
    """A worker's tracer provider and exporter; start() opens a request's trace when it is sampled."""

    def __init__(self, settings: Settings, endpoint: str, worker: int = 0) -> None:
        attributes = {"service.version": settings.model_version, "deployment.environment.name": settings.deployment_env,
                      "model.name": settings.model_name, "model.version": settings.model_version, "worker": worker}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attributes["service.name"] = settings.model_name
        # Parent-based at a ratio is decided by start() before the SDK is asked (an unsampled request costs a header
        # scan and a comparison); another standard sampler is the SDK's, from the environment.
        sampler, self._bound, ratio = None, None, parent_based_ratio(settings)
        if ratio is not None:
            by_trace_id = TraceIdRatioBased(ratio)
            sampler, self._bound = ParentBased(by_trace_id), by_trace_id.bound
        self._ids = _TraceIds()
        self.provider = TracerProvider(sampler=sampler, resource=Resource.create(attributes), id_generator=self._ids,
                                       shutdown_on_exit=False)
        self.exporter = OTLPSpanExporter(endpoint=endpoint)
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("inference_server", __version__)
        self._model = {"model.name": settings.model_name, "model.version": settings.model_version}

    def start(self, headers: list[tuple[bytes, bytes]], method: str, path: str, request_id: str) -> RequestTrace | None:
        """The request's trace, or None when it is not sampled."""
        caller = incoming(headers)
        if self._bound is not None:  # what ParentBased(TraceIdRatioBased) will decide, without the SDK
            if caller is not None and caller.span_id is not None and caller.sampled is not None:
                if not caller.sampled:
                    return None
            else:
                trace_id = caller.trace_id if caller is not None else self._ids.new_trace_id()
                if trace_id & TraceIdRatioBased.TRACE_ID_LIMIT >= self._bound:
                    return None
                caller = Incoming(trace_id, None, None)
        context = None
        if caller is not None:
            if caller.span_id is None or caller.sampled is None:  # the trace's first span here, on our sampling
                self._ids.next_trace_id = caller.trace_id
            else:
                flags = TraceFlags(TraceFlags.SAMPLED if caller.sampled else TraceFlags.DEFAULT)
                context = set_span_in_context(NonRecordingSpan(SpanContext(caller.trace_id, caller.span_id, True, flags)))
        span = self.tracer.start_span(f"{method} {path}", context, SpanKind.SERVER)
        self._ids.next_trace_id = 0
        if not span.is_recording():
            return None
        span.set_attributes({**self._model, "http.request.method": method, "url.path": path, "request.id": request_id})
        return RequestTrace(self.tracer, span)

    def flush(self, timeout_ms: int = 30000) -> bool:
        return self.provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        """The spans not sent yet go (for at most SHUTDOWN_FLUSH_MS), then the exporter's thread stops."""
        self.provider.force_flush(SHUTDOWN_FLUSH_MS)
        self.provider.shutdown()
