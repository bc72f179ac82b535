"""The worker's OTLP span processor (front/otlp_exporter.py) on the OpenTelemetry SDK's spans, against a real
OTLP/HTTP receiver: batches, the standard variables (headers, gzip, batch size, queue size), retries on the
specification's retryable statuses and none on others, flush and shutdown; and the resource attributes the SDK's
variables choose (front/spans.py; its samplers are test_tracing.py's)."""

from __future__ import annotations

import asyncio
import time

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

from inference_server.front.otlp_exporter import OtlpExporter
from inference_server.front.spans import RequestTrace, resource_of

from ..conftest import make_settings
from ..otlp_receiver import otlp_receiver


def exporting(exporter: OtlpExporter, resource: dict | None = None) -> tuple[OtlpExporter, Tracer]:
    """``exporter`` as the span processor of a tracer provider of its own, and that provider's tracer."""
    provider = TracerProvider(resource=Resource(resource or {}), shutdown_on_exit=False)
    provider.add_span_processor(exporter)
    return exporter, provider.get_tracer("s", "1")


def trace(tracer: Tracer, name: str = "POST /predict", status: int = 200) -> None:
    request = RequestTrace(tracer, None, name, {"model.name": "m"})
    request.child("forward", request.started, request.started + 0.001, {"batch.size": 3, "ratio": 0.5, "ok": True})
    request.end(status)


def test_spans_arrive_with_the_variables_headers_gzip_and_resource():
    environ = {
        "OTEL_EXPORTER_OTLP_HEADERS": "x-team=ml%20platform,authorization=Bearer%20k,broken",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
    }
    with otlp_receiver() as receiver:
        exporter, tracer = exporting(
            OtlpExporter(f"{receiver.endpoint}/v1/traces", environ), {"service.name": "m", "worker": 1}
        )
        trace(tracer, status=503)
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
        exporter, tracer = exporting(
            OtlpExporter(f"{receiver.endpoint}/v1/traces", {"OTEL_EXPORTER_OTLP_TIMEOUT": "5"})
        )
        trace(tracer)
        assert exporter.flush(8000)
        assert len(receiver.posts) == 2 and len(receiver.spans) == 2  # refused once, then accepted
        receiver.refuse[:] = [400]
        trace(tracer)
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
    environ = {
        "OTEL_BSP_SCHEDULE_DELAY": "60000",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "0.5",
    }  # no time for a retry's pause: only an immediate one can succeed

    async def traced(receiver) -> None:
        exporter, tracer = exporting(OtlpExporter(f"{receiver.endpoint}/v1/traces", environ))
        for sent in range(1, 4):
            trace(tracer)  # a full batch: sent now, not after a minute
            await arrived(receiver, 2 * sent)
        assert len(receiver.posts) == 3 and len(set(receiver.clients)) == 1  # one connection for every batch
        receiver.drop_connections = True
        for sent in range(4, 6):
            trace(tracer)
            await arrived(receiver, 2 * sent)
        assert len(receiver.spans) == 10 and len(set(receiver.clients)) == 2  # the dropped connection, replaced
        assert exporter.flush(100)  # nothing left

    with otlp_receiver() as receiver:
        asyncio.run(traced(receiver))


def test_spans_left_at_the_loops_end_are_sent_by_flush_and_a_full_queue_drops_new_spans():
    environ = {
        "OTEL_BSP_SCHEDULE_DELAY": "60000",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4",
        "OTEL_BSP_MAX_QUEUE_SIZE": "6",
    }

    async def traced(tracer: Tracer) -> None:
        trace(tracer)  # 2 spans, waiting for the schedule delay when the loop ends

    with otlp_receiver() as receiver:
        exporter, tracer = exporting(OtlpExporter(f"{receiver.endpoint}/v1/traces", environ))
        asyncio.run(traced(tracer))
        assert receiver.spans == [] and exporter.flush(5000) and len(receiver.spans) == 2
        exporter.shutdown()
    blocked, blocked_tracer = exporting(
        OtlpExporter("http://127.0.0.1:9/v1/traces", {**environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "100"})
    )
    for _ in range(4):
        trace(blocked_tracer)
    assert blocked.dropped == 2  # 6 queued, the fourth request's 2 spans found no room
    blocked.shutdown(100)


def test_an_unreachable_endpoint_is_given_up_within_its_timeout_and_a_flush_out_of_time_says_so(caplog):
    exporter, tracer = exporting(OtlpExporter("http://127.0.0.1:9/v1/traces", {"OTEL_EXPORTER_OTLP_TIMEOUT": "1"}))
    trace(tracer)
    assert not exporter.flush(0)  # queued, not sent: no time given
    assert exporter.flush(5000)  # tried within its second and given up, said in the log
    assert "spans not exported (2)" in caplog.text
    exporter.shutdown(100)


def test_resource_attributes_merge_as_the_sdk_merges_them(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=ml%20platform,model.name=overridden")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "search")
    found = resource_of(make_settings(tmp_path), 2).attributes
    assert (found["team"], found["service.name"], found["model.name"], found["worker"]) == (
        "ml platform",
        "search",
        "tiny",
        2,
    )
    assert (found["telemetry.sdk.name"], found["telemetry.sdk.language"]) == ("opentelemetry", "python")
