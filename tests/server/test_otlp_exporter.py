"""The worker's OTLP exporter (front/otlp_exporter.py) against a real OTLP/HTTP receiver: batches, the standard
variables (headers, gzip, batch size, queue size), retries on the specification's retryable statuses and none on
others, flush and shutdown; and the resource attributes the SDK's variables choose (front/spans.py; its samplers are
test_tracing.py's)."""

from __future__ import annotations

import asyncio
import time

from inference_server.front.otlp_exporter import OtlpExporter, headers_of
from inference_server.front.spans import RequestTrace, resource_attributes

from .conftest import make_settings
from .otlp_receiver import otlp_receiver


def trace(exporter: OtlpExporter, name: str = "POST /predict", status: int = 200) -> None:
    request = RequestTrace(exporter, 0x0123456789ABCDEF0123456789ABCDEF, None, name, {"model.name": "m"})
    request.child("forward", request.started, request.started + 0.001, {"batch.size": 3, "ratio": 0.5, "ok": True})
    request.end(status)


def test_spans_arrive_with_the_variables_headers_gzip_and_resource():
    environ = {"OTEL_EXPORTER_OTLP_HEADERS": "x-team=ml%20platform,authorization=Bearer%20k,broken",
               "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip"}
    with otlp_receiver() as receiver:
        exporter = OtlpExporter(f"{receiver.endpoint}/v1/traces", {"service.name": "m", "worker": 1}, ("s", "1"), environ)
        trace(exporter, status=503)
        assert exporter.flush(5000)
        exporter.shutdown()
        root, child = sorted(receiver.spans, key=lambda span: span.parent_span_id)
        assert (root.name, child.name, child.parent_span_id) == ("POST /predict", "forward", root.span_id)
        assert root.attributes == {"model.name": "m", "http.response.status_code": 503}
        assert child.attributes == {"batch.size": 3, "ratio": 0.5, "ok": True}
        assert root.resource == {"service.name": "m", "worker": 1} and root.start_ns <= child.start_ns
        sent = receiver.headers[0]
        assert (sent["x-team"], sent["authorization"], sent["content-encoding"]) == ("ml platform", "Bearer k", "gzip")


def test_a_retryable_status_is_retried_and_another_is_not(caplog):
    with otlp_receiver() as receiver:
        receiver.refuse[:] = [503]
        exporter = OtlpExporter(f"{receiver.endpoint}/v1/traces", {}, ("s", "1"), {"OTEL_EXPORTER_OTLP_TIMEOUT": "5"})
        trace(exporter)
        assert exporter.flush(8000)
        assert len(receiver.posts) == 2 and len(receiver.spans) == 2  # refused once, then accepted
        receiver.refuse[:] = [400]
        trace(exporter)
        assert exporter.flush(8000)
        exporter.shutdown()
        assert len(receiver.posts) == 3 and len(receiver.spans) == 2  # a 400 is not retried: dropped, and said
        assert "HTTP 400" in caplog.text


async def arrived(receiver, spans: int, within_s: float = 10.0) -> None:
    """Wait (on the loop, so that its export task runs) until the receiver holds ``spans`` spans."""
    give_up = time.monotonic() + within_s
    while len(receiver.spans) < spans and time.monotonic() < give_up:
        await asyncio.sleep(0.01)


def test_full_batches_leave_from_the_loop_over_one_kept_alive_connection_and_a_dropped_one_is_replaced_at_once():
    environ = {"OTEL_BSP_SCHEDULE_DELAY": "60000", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",
               "OTEL_EXPORTER_OTLP_TIMEOUT": "0.5"}  # no time for a retry's pause: only an immediate one can succeed

    async def traced(receiver) -> None:
        exporter = OtlpExporter(f"{receiver.endpoint}/v1/traces", {}, ("s", "1"), environ)
        for sent in range(1, 4):
            trace(exporter)  # a full batch: sent now, not after a minute
            await arrived(receiver, 2 * sent)
        assert len(receiver.posts) == 3 and len(set(receiver.clients)) == 1  # one connection for every batch
        receiver.drop_connections = True
        for sent in range(4, 6):
            trace(exporter)
            await arrived(receiver, 2 * sent)
        assert len(receiver.spans) == 10 and len(set(receiver.clients)) == 2  # the dropped connection, replaced
        assert exporter.flush(100)  # nothing left

    with otlp_receiver() as receiver:
        asyncio.run(traced(receiver))


def test_spans_left_at_the_loops_end_are_sent_by_flush_and_a_full_queue_drops_new_spans():
    environ = {"OTEL_BSP_SCHEDULE_DELAY": "60000", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4", "OTEL_BSP_MAX_QUEUE_SIZE": "6"}

    async def traced(exporter: OtlpExporter) -> None:
        trace(exporter)  # 2 spans, waiting for the schedule delay when the loop ends

    with otlp_receiver() as receiver:
        exporter = OtlpExporter(f"{receiver.endpoint}/v1/traces", {}, ("s", "1"), environ)
        asyncio.run(traced(exporter))
        assert receiver.spans == [] and exporter.flush(5000) and len(receiver.spans) == 2
        exporter.shutdown()
    blocked = OtlpExporter("http://127.0.0.1:9/v1/traces", {}, ("s", "1"), {**environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "100"})
    for _ in range(4):
        trace(blocked)
    assert blocked.dropped == 2  # 6 queued, the fourth request's 2 spans found no room
    blocked.shutdown(100)


def test_an_unreachable_endpoint_is_given_up_within_its_timeout_and_a_flush_out_of_time_says_so(caplog):
    exporter = OtlpExporter("http://127.0.0.1:9/v1/traces", {}, ("s", "1"), {"OTEL_EXPORTER_OTLP_TIMEOUT": "1"})
    trace(exporter)
    assert not exporter.flush(0)  # queued, not sent: no time given
    assert exporter.flush(5000)  # tried within its second and given up, said in the log
    assert "spans not exported (2)" in caplog.text
    exporter.shutdown(100)


def test_resource_attributes_merge_as_the_sdk_merges_them(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=ml%20platform,model.name=overridden")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "search")
    found = resource_attributes(make_settings(tmp_path), 2)
    assert (found["team"], found["service.name"], found["model.name"], found["worker"]) == ("ml platform", "search", "tiny", 2)
    assert headers_of("a=1, b = 2 ,=x,c") == {"a": "1", "b": "2"}
