"""Request spans, received by a real OTLP/HTTP receiver (otlp_receiver.py) as a collector would: the trace context from
traceparent and from the load balancer's X-Amzn-Trace-Id, the children of a request's span (the model process's
batch formation and forward among them, from the timings the link returns), parent-based sampling; and with no
endpoint, nothing built at all."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import httpx
import pytest

from inference_server import facts
from inference_server.front.app import create_app
from inference_server.front.trace_context import Incoming, incoming
from inference_server.front.tracing import tracing_from
from inference_server.settings import Settings, SettingsError, load_settings

from ..conftest import make_settings, started
from ..otlp_receiver import otlp_receiver

pytestmark = pytest.mark.anyio

PARENT_TRACE, PARENT_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
ALB_ROOT = "1-5759e988-bd862e3fe1be46a994272793"
ALB_TRACE = "5759e988bd862e3fe1be46a994272793"
CHILDREN = {"admission", "cache lookup", "preprocess", "queue wait", "batch formation", "forward", "postprocess"}


@pytest.fixture(scope="module")
def receiver():
    with otlp_receiver() as receiver:
        yield receiver


ECHO = {"model_task": None, "model_handler": "tests.server.fakes:EchoHandler"}  # no torch model to build or load


@pytest.fixture(scope="module")
def traced(tmp_path_factory, receiver):
    """A service on the fake EchoHandler, tracing to the receiver at ratio 0: only a caller's sampled trace is
    traced."""
    service = started(
        make_settings(
            tmp_path_factory.mktemp("echo"),
            result_cache_size=100,
            trace_sample_ratio=0.0,
            otel_exporter_otlp_endpoint=receiver.endpoint,
            **ECHO,
        )
    )
    yield service, create_app(service)
    service.local_model.stop()


async def post(app, path: str, body: dict, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        return await client.post(path, json=body, headers=headers)


async def test_a_sampled_traceparent_parents_the_request_span_and_its_phases(traced, receiver):
    service, app = traced
    texts = ["the first text of the traced batch", "another", "a third, longer text of the same request"]
    headers = {"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"}
    response = await post(app, "/predict/batch", {"texts": texts}, headers)
    assert response.status_code == 200, response.text
    assert service.tracing.flush()
    spans = receiver.by_trace(PARENT_TRACE)
    [root] = [span for span in spans if span.name == "POST /predict/batch"]
    assert root.parent_span_id == PARENT_SPAN  # the caller's span, honoured at ratio 0
    assert {key: root.attributes[key] for key in ("model.name", "model.version", "http.response.status_code")} == {
        "model.name": "tiny",
        "model.version": "1",
        "http.response.status_code": 200,
    }
    assert root.attributes["request.id"] == response.headers["x-request-id"]
    assert (root.resource["service.name"], root.resource["model.version"]) == ("tiny", "1")
    assert root.attributes["url.path"] == "/predict/batch"
    children = [span for span in spans if span is not root]
    assert {span.name for span in children} == CHILDREN
    assert {span.parent_span_id for span in children} == {root.span_id}
    for span in children:
        assert root.start_ns <= span.start_ns <= span.end_ns <= root.end_ns, span.name
    batches = [span for span in children if span.name == "batch formation"]
    assert sum(span.attributes["batch.size"] for span in batches) == len(texts)  # no other traffic: the batches' own
    for span in batches:
        assert span.attributes["batch.sequence_bucket"] >= span.attributes["batch.sequence_length"] > 0
    forwards = sorted(span.start_ns for span in children if span.name == "forward")
    assert forwards == sorted(span.end_ns for span in batches)  # each forward starts as its batch is formed
    [queue] = [span for span in children if span.name == "queue wait"]
    assert queue.end_ns == min(span.start_ns for span in batches)


async def test_the_load_balancers_trace_header_gives_the_trace_and_parent(traced, receiver):
    service, app = traced
    headers = {"x-amzn-trace-id": f"Root={ALB_ROOT};Parent=53995c3f42cd8ad8;Sampled=1"}
    response = await post(app, "/tiny/predict", {"text": "from behind the load balancer"}, headers)
    assert response.status_code == 200, response.text
    assert service.tracing.flush()
    [root] = [span for span in receiver.by_trace(ALB_TRACE) if span.name == "POST /tiny/predict"]
    assert root.parent_span_id == "53995c3f42cd8ad8"


async def test_a_cached_answer_has_no_model_spans(traced, receiver):
    service, app = traced
    trace = "0af7651916cd43dd8448eb211c80319c"
    for _ in range(2):  # the second is the cache's
        response = await post(
            app, "/predict", {"text": "asked twice"}, {"traceparent": f"00-{trace}-b7ad6b7169203331-01"}
        )
        assert response.status_code == 200
    assert service.tracing.flush()
    names = [span.name for span in receiver.by_trace(trace)]
    assert names.count("POST /predict") == 2 and names.count("cache lookup") == 2
    assert names.count("forward") == 1


def test_ratio_0_without_a_parent_exports_nothing_and_an_unsampled_parent_is_honoured(tmp_path):
    with otlp_receiver() as receiver:
        tracing = tracing_from(
            make_settings(
                tmp_path, trace_sample_ratio=0.0, otel_exporter_otlp_traces_endpoint=f"{receiver.endpoint}/v1/traces"
            )
        )
        assert tracing is not None
        alb_root_only = [(b"x-amzn-trace-id", f"Root={ALB_ROOT}".encode())]
        assert tracing.start([], "POST", "/predict", "r1") is None
        assert tracing.start(alb_root_only, "POST", "/predict", "r2") is None
        tracing.shutdown()
        assert receiver.posts == []
    with otlp_receiver() as receiver:
        tracing = tracing_from(
            make_settings(tmp_path, trace_sample_ratio=1.0, otel_exporter_otlp_endpoint=receiver.endpoint + "/")
        )
        assert tracing is not None
        unsampled_parent = [(b"traceparent", f"00-{PARENT_TRACE}-{PARENT_SPAN}-00".encode())]
        assert tracing.start(unsampled_parent, "POST", "/predict", "r3") is None
        request = tracing.start(alb_root_only, "POST", "/predict", "r4")
        assert request is not None
        request.end(200)
        tracing.shutdown()
        [span] = receiver.spans
        assert (span.trace_id, span.parent_span_id) == (ALB_TRACE, "")  # the load balancer's trace, first span here


@pytest.mark.parametrize(
    ("sampler", "argument", "ratio", "decided"),
    [
        (None, None, 0.25, (True, 0.25)),
        ("parentbased_traceidratio", "0.5", 0.5, (True, 0.5)),
        ("parentbased_traceidratio", None, 1.0, (True, 1.0)),
        ("parentbased_traceidratio", "2", 1.0, (True, 1.0)),
        ("parentbased_traceidratio", "0.1", 0.1, (True, 0.1)),
        ("always_on", None, None, (False, 1.0)),
        ("always_off", None, None, (False, 0.0)),
        ("traceidratio", "0.5", None, (False, 0.5)),
        ("parentbased_always_off", None, None, (True, 0.0)),
        ("parentbased_always_on", None, None, (True, 1.0)),
        ("jaeger_remote", None, None, (True, 1.0)),
    ],
)
def test_the_standard_sampler_variables_choose_the_sampler(tmp_path, monkeypatch, sampler, argument, ratio, decided):
    """parent_based_ratio: the parent-based ratio, None for another sampler; sampler_of: (whether a caller's sampled
    flag decides, the share of the other requests traced), as the SDK reads the variables."""
    from inference_server.front.spans import parent_based_ratio, sampler_of

    for name, value in (("OTEL_TRACES_SAMPLER", sampler), ("OTEL_TRACES_SAMPLER_ARG", argument)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    settings = make_settings(tmp_path, trace_sample_ratio=0.25)
    assert parent_based_ratio(settings) == ratio
    assert sampler_of(settings) == decided


def test_what_the_infrastructure_sets_samples_by_its_ratio_and_another_sampler_by_the_sdk(tmp_path, monkeypatch):
    """OTEL_TRACES_SAMPLER=parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG=0 (what the library's tasks set,
    per environment): no parent, nothing traced; a sampled parent, traced. always_on: the SDK's sampler traces all."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    settings = make_settings(tmp_path, trace_sample_ratio=1.0, otel_exporter_otlp_endpoint="http://127.0.0.1:9")
    tracing = tracing_from(settings)
    assert tracing is not None
    sampled_parent = [(b"traceparent", f"00-{PARENT_TRACE}-{PARENT_SPAN}-01".encode())]
    assert tracing.start([], "POST", "/predict", "r1") is None
    assert tracing.start(sampled_parent, "POST", "/predict", "r2") is not None
    tracing.shutdown()
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    tracing = tracing_from(settings.replace(trace_sample_ratio=0.0))
    assert tracing is not None and tracing.start([], "POST", "/predict", "r3") is not None
    tracing.shutdown()


def test_without_an_endpoint_nothing_is_built_and_nothing_imported(tmp_path):
    """A worker's service serving a sampled traceparent, the standard sampler set to always_on, no endpoint: no
    tracer, no SDK or exporter module, no exporter thread."""
    script = f"""
import asyncio, sys, threading
import httpx
from inference_server import facts
from inference_server.front.app import create_app
from tests.server.conftest import make_settings, started
service = started(make_settings({str(tmp_path)!r}, **{ECHO!r}))
async def main():
    transport = httpx.ASGITransport(app=create_app(service))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.post("/predict", json={{"text": "x"}},
                                     headers={{"traceparent": "00-{PARENT_TRACE}-{PARENT_SPAN}-01"}})
    return response.status_code
status = asyncio.run(main())
loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter",
                                                        "opentelemetry.proto", "inference_server.front.spans",
                                                        "inference_server.front.otlp_exporter")))
threads = [t.name for t in threading.enumerate() if "otel" in t.name.lower() or "otlp" in t.name.lower()]
print(status, service.tracing, loaded, threads)
service.local_model.stop()
"""
    env = {**os.environ, "OTEL_TRACES_SAMPLER": "always_on"}
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "200 None [] []", done.stdout + done.stderr[-3000:]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (
            [(b"traceparent", f"00-{PARENT_TRACE}-{PARENT_SPAN}-01".encode())],
            Incoming(int(PARENT_TRACE, 16), int(PARENT_SPAN, 16), True),
        ),
        (
            [
                (b"traceparent", f"00-{PARENT_TRACE}-{PARENT_SPAN}-00".encode()),
                (b"x-amzn-trace-id", b"Root=" + ALB_ROOT.encode()),
            ],
            Incoming(int(PARENT_TRACE, 16), int(PARENT_SPAN, 16), False),
        ),
        (
            [
                (b"traceparent", b"00-zz-00f067aa0ba902b7-01"),
                (b"x-amzn-trace-id", f"Root={ALB_ROOT};Sampled=1".encode()),
            ],
            Incoming(int(ALB_TRACE, 16), None, None),
        ),
        (
            [
                (
                    b"x-amzn-trace-id",
                    f"Self=1-67891234-12456789abcdef012345678;Root={ALB_ROOT};Parent=53995c3f42cd8ad8;"
                    "Sampled=0".encode(),
                )
            ],
            Incoming(int(ALB_TRACE, 16), 0x53995C3F42CD8AD8, False),
        ),
        ([(b"traceparent", f"00-{'0' * 32}-{PARENT_SPAN}-01".encode())], None),
        ([(b"x-amzn-trace-id", b"Root=2-5759e988-bd862e3fe1be46a994272793")], None),
        ([], None),
    ],
)
def test_the_trace_context_of_the_headers(headers, expected):
    assert incoming(headers) == expected


def test_the_endpoint_settings(tmp_path):
    base = {"MODEL_NAME": "tiny", "MODEL_VERSION": "1", "MODEL_URI": str(tmp_path)}
    assert load_settings([], base).traces_endpoint is None
    assert (
        load_settings([], {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"}).traces_endpoint
        == "http://localhost:4318/v1/traces"
    )
    both = {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b/t"}
    assert load_settings([], both).traces_endpoint == "http://b/t"
    with pytest.raises(SettingsError, match=r"OTEL_EXPORTER_OTLP_ENDPOINT.*http:// or https:// URL"):
        load_settings([], {**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"})
    with pytest.raises(SettingsError, match=r"TRACE_SAMPLE_RATIO.*between 0 and 1"):
        load_settings([], {**base, "TRACE_SAMPLE_RATIO": "1.5"})


def test_the_facts_name_the_tracing_settings():
    names = {f.name.upper() for f in dataclasses.fields(Settings)}
    assert {facts.TRACES_ENDPOINT_VARIABLE, facts.TRACE_SAMPLE_RATIO_VARIABLE} <= names


def test_otel_sdk_disabled_builds_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert tracing_from(make_settings(tmp_path, otel_exporter_otlp_endpoint="http://127.0.0.1:9")) is None


def test_an_endpoint_without_the_sdk_is_refused_naming_the_extra(tmp_path, monkeypatch):
    """A server installed without its tracing extra: the endpoint is a settings error at start, not silence."""
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # what an install without the SDK finds
    monkeypatch.delitem(sys.modules, "inference_server.front.spans", raising=False)
    with pytest.raises(SettingsError, match=r"OTEL_EXPORTER_OTLP_ENDPOINT.*inference-server\[tracing\]"):
        tracing_from(make_settings(tmp_path, otel_exporter_otlp_endpoint="http://127.0.0.1:9"))
