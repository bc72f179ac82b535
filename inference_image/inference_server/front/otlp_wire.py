"""OTLP trace export requests (ExportTraceServiceRequest) written directly in protobuf's wire format: the messages of
opentelemetry-proto's trace, common and resource protos, the fields this server sets. Through the opentelemetry-proto
classes a span cost about 9 µs (each message and attribute built, then serialized); written here, with the
attributes that repeat (a model's name, a batch size, a span's name) encoded once and reused, about 1.5 µs
(bench/README.md, "Tracing's cost"). tests/server/test_otlp_wire.py parses what it writes with opentelemetry-proto
and compares it with the package's own messages."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

SPAN_KIND_INTERNAL, SPAN_KIND_SERVER = 1, 2  # trace.proto, Span.SpanKind
STATUS_ERROR = 2  # trace.proto, Status.StatusCode
INT64 = range(-(1 << 63), 1 << 63)  # AnyValue.int_value; a wider int is written as a string
CACHED_ATTRIBUTES = 4096  # attribute encodings kept for reuse; past it the cache starts again

_fixed64 = struct.Struct("<Q").pack
_double = struct.Struct("<d").pack


class SpanData(NamedTuple):
    """A finished span as the request path records it; the exporter writes it out with a batch."""

    trace_id: bytes  # 16 bytes
    span_id: bytes  # 8 bytes
    parent_span_id: bytes  # b"": a trace's first span
    name: str
    kind: int  # SPAN_KIND_*
    start_ns: int  # Unix epoch nanoseconds
    end_ns: int
    attributes: Mapping[str, Any] | None
    error: bool = False  # the span's status is ERROR (else unset)


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 as protobuf writes it: ten bytes of two's complement
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (a string, bytes or a message); ``tag`` is (field number << 3) | 2, one byte."""
    return bytes((tag,)) + _varint(len(payload)) + payload


def _text(value: str) -> bytes:
    return value.encode("utf-8", "replace")  # a lone surrogate (from a percent-decoded path) as '?'


def key_value(key: str, value: Any) -> bytes:
    """A KeyValue message: bool, int64, float or string (anything else, and a wider int, as its str())."""
    if value.__class__ is bool:
        any_value = b"\x10\x01" if value else b"\x10\x00"
    elif isinstance(value, int) and value in INT64:
        any_value = b"\x18" + _varint(value)
    elif isinstance(value, float):
        any_value = b"\x21" + _double(value)
    else:
        any_value = _field(0x0A, _text(str(value)))
    return _field(0x0A, _text(key)) + _field(0x12, any_value)


def resource(attributes: Mapping[str, Any]) -> bytes:
    """A Resource message."""
    return b"".join(_field(0x0A, key_value(key, value)) for key, value in attributes.items())


def scope(name: str, version: str) -> bytes:
    """An InstrumentationScope message."""
    return _field(0x0A, _text(name)) + _field(0x12, _text(version))


class SpanWriter:
    """ExportTraceServiceRequest bodies for one resource and scope (its caches are dicts, each step atomic under the
    GIL: a flush draining on its own thread may share it)."""

    def __init__(self, resource_attributes: Mapping[str, Any], scope_name: str, scope_version: str) -> None:
        self._resource = _field(0x0A, resource(resource_attributes))  # ResourceSpans.resource
        self._scope = _field(0x0A, scope(scope_name, scope_version))  # ScopeSpans.scope
        self._attributes: dict[tuple[str, type, Any], bytes] = {}
        self._names: dict[str, bytes] = {}

    def request(self, spans: Iterable[SpanData]) -> bytes:
        scope_spans = self._scope + b"".join([_field(0x12, self.span(span)) for span in spans])
        return _field(0x0A, self._resource + _field(0x12, scope_spans))

    def span(self, span: SpanData) -> bytes:
        """A Span message: its ids, name, kind, times, attributes and an ERROR status."""
        name = self._names.get(span.name)
        if name is None:
            name = self._names[span.name] = _field(0x2A, _text(span.name))
        parts = [b"\x0a\x10", span.trace_id, b"\x12\x08", span.span_id]
        if span.parent_span_id:
            parts += (b"\x22\x08", span.parent_span_id)
        parts += (name, b"\x30", _varint(span.kind), b"\x39", _fixed64(span.start_ns), b"\x41", _fixed64(span.end_ns))
        if span.attributes:
            parts += [self._attribute(key, value) for key, value in span.attributes.items()]
        if span.error:
            parts.append(b"\x7a\x02\x18" + bytes((STATUS_ERROR,)))
        return b"".join(parts)

    def _attribute(self, key: str, value: Any) -> bytes:
        """Span.attributes' field for (key, value), reused while cached (True, 1 and 1.0 are cached apart)."""
        cached = (key, value.__class__, value)
        try:
            found = self._attributes.get(cached)
        except TypeError:  # an unhashable value
            return _field(0x4A, key_value(key, value))
        if found is None:
            if len(self._attributes) >= CACHED_ATTRIBUTES:
                self._attributes.clear()
            found = self._attributes[cached] = _field(0x4A, key_value(key, value))
        return found
