"""The trace context a request arrives with: a W3C ``traceparent`` header
(``00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>``), else ``X-Amzn-Trace-Id``, which the load balancer adds or
updates (``Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=1``; the Root's 32 hex digits are the W3C trace id), so
the trace is the one the load balancer's request is in."""

from __future__ import annotations

import itertools
import os
import re
from typing import NamedTuple

_TRACE_ROOT = re.compile(rb"(?:^|;)\s*Root=([A-Za-z0-9-]{1,64})")
_ID_PREFIX = os.urandom(8).hex()  # per process: ids stay unique across workers and restarts
_ID_COUNTER = itertools.count()


class Incoming(NamedTuple):
    """The caller's trace: its id, the caller's span (None: the trace's first span here) and the caller's sampling
    decision (None: ours decides)."""

    trace_id: int
    span_id: int | None
    sampled: bool | None


def incoming(headers: list[tuple[bytes, bytes]]) -> Incoming | None:
    """The trace context of a request's headers: traceparent when valid, else X-Amzn-Trace-Id's, else None."""
    traceparent = amazon = None
    for name, value in headers:
        if name == b"traceparent":
            traceparent = value
        elif name == b"x-amzn-trace-id":
            amazon = value
    parsed = _traceparent(traceparent) if traceparent is not None else None
    if parsed is None and amazon is not None:
        parsed = _amazon(amazon)
    return parsed


def _hex(raw: bytes, digits: int) -> int:
    """raw as a non-zero number of exactly `digits` hex digits, else 0."""
    if len(raw) != digits:
        return 0
    try:
        return int(raw, 16)
    except ValueError:
        return 0


def _traceparent(value: bytes) -> Incoming | None:
    parts = value.strip().split(b"-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == b"ff" or (parts[0] == b"00" and len(parts) != 4):
        return None
    trace_id, span_id, flags = _hex(parts[1], 32), _hex(parts[2], 16), parts[3]
    if not trace_id or not span_id or len(flags) != 2:
        return None
    try:
        sampled = bool(int(flags, 16) & 1)
    except ValueError:
        return None
    return Incoming(trace_id, span_id, sampled)


def _amazon(value: bytes) -> Incoming | None:
    trace_id, span_id, sampled = 0, None, None
    for part in value.split(b";"):
        key, _, field = part.strip().partition(b"=")
        if key == b"Root":
            pieces = field.split(b"-")
            if len(pieces) == 3 and pieces[0] == b"1" and len(pieces[1]) == 8:
                trace_id = _hex(pieces[1] + pieces[2], 32)
        elif key == b"Parent":
            span_id = _hex(field, 16) or None
        elif key == b"Sampled" and field in (b"0", b"1"):
            sampled = field == b"1"
    if not trace_id:
        return None
    return Incoming(trace_id, span_id, sampled if span_id is not None else None)


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The request's id: the Root of X-Amzn-Trace-Id (the load balancer's), or a new one (32 hex characters)."""
    for name, value in headers:
        if name == b"x-amzn-trace-id":
            match = _TRACE_ROOT.search(value)
            if match:
                return match.group(1).decode()
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016x}"
