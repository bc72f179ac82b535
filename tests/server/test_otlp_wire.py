"""The OTLP request bodies the worker writes itself (front/otlp_wire.py) against the opentelemetry-proto package: what
it writes parses, with the package, to the messages the package builds from the same spans, and is the package's own
bytes; every attribute type, ids, kinds, an error status, a trace's first span, the attribute cache."""

from __future__ import annotations

import random

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from inference_server.front import otlp_wire
from inference_server.front.otlp_wire import SPAN_KIND_INTERNAL, SPAN_KIND_SERVER, SpanData, SpanWriter

RESOURCE = {"service.name": "search", "worker": 3, "deployment.environment.name": "prod", "sampled": 0.01}


def any_value(value) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int) and -(1 << 63) <= value < 1 << 63:
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value).encode("utf-8", "replace").decode())


def package_span(data: SpanData) -> Span:
    """The span as the opentelemetry-proto package builds it."""
    return Span(trace_id=data.trace_id, span_id=data.span_id, parent_span_id=data.parent_span_id, name=data.name,
                kind=Span.SpanKind.ValueType(data.kind), start_time_unix_nano=data.start_ns, end_time_unix_nano=data.end_ns,
                attributes=[KeyValue(key=key, value=any_value(value)) for key, value in (data.attributes or {}).items()],
                status=Status(code=Status.STATUS_CODE_ERROR) if data.error else None)


def package_request(spans: list[SpanData]) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=Resource(attributes=[KeyValue(key=key, value=any_value(value)) for key, value in RESOURCE.items()]),
        scope_spans=[ScopeSpans(scope=InstrumentationScope(name="inference_server", version="1.2.3"),
                                spans=[package_span(span) for span in spans])])])


def random_spans(seed: int, count: int) -> list[SpanData]:
    pick = random.Random(seed)
    values = [True, False, 0, 1, -1, 127, 128, 300, -(1 << 63), (1 << 63) - 1, 1 << 63, -(1 << 70), 0.0, -2.5, 1e300,
              float("inf"), "", "admitted", "héllo wörld ✓", "x" * 300, "\udcff path", None, (1, 2)]
    spans = []
    for index in range(count):
        attributes = {f"key.{pick.randrange(6)}": pick.choice(values) for _ in range(pick.randrange(0, 7))}
        spans.append(SpanData(pick.randbytes(16), pick.randbytes(8), pick.randbytes(8) if index % 3 else b"",
                              pick.choice(["POST /predict", "forward", "queue wait", "ünïcode ✓", "n" * 200]),
                              pick.choice([SPAN_KIND_SERVER, SPAN_KIND_INTERNAL]), pick.getrandbits(64),
                              pick.getrandbits(64), attributes or None, pick.random() < 0.2))
    return spans


@pytest.mark.parametrize("seed", range(5))
def test_the_written_request_is_what_the_package_builds_and_writes(seed):
    spans = random_spans(seed, 60)
    writer = SpanWriter(RESOURCE, "inference_server", "1.2.3")
    body = writer.request(spans)
    expected = package_request(spans)
    assert ExportTraceServiceRequest.FromString(body) == expected
    assert body == expected.SerializeToString()
    assert writer.request(spans) == body  # again, from the attribute cache


def test_the_attribute_cache_keeps_true_one_and_one_point_zero_apart_and_starts_again_when_full(monkeypatch):
    monkeypatch.setattr(otlp_wire, "CACHED_ATTRIBUTES", 3)
    writer = SpanWriter({}, "s", "1")
    spans = [SpanData(b"t" * 16, b"s" * 8, b"", "n", SPAN_KIND_INTERNAL, 1, 2, {"v": value}) for value in
             (True, 1, 1.0, True, 2, [1], 1)]
    parsed = ExportTraceServiceRequest.FromString(writer.request(spans)).resource_spans[0].scope_spans[0].spans
    written = [span.attributes[0].value for span in parsed]
    assert written == [AnyValue(bool_value=True), AnyValue(int_value=1), AnyValue(double_value=1.0),
                       AnyValue(bool_value=True), AnyValue(int_value=2), AnyValue(string_value="[1]"),
                       AnyValue(int_value=1)]
    assert len(writer._attributes) <= 3


def test_an_empty_batch_is_a_request_with_no_spans():
    body = SpanWriter(RESOURCE, "inference_server", "1.2.3").request([])
    assert ExportTraceServiceRequest.FromString(body) == package_request([])
