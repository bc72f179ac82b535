"""The HTTP API through an in-process ASGI client: responses, every kind of bad input, shedding and auth."""

from __future__ import annotations

import json
import logging
import time

import httpx
import pytest

from inference_server import metric_names as m
from inference_server.app import create_app
from inference_server.logs import JsonFormatter
from inference_server.service import ModelService

from .conftest import make_settings

pytestmark = pytest.mark.anyio


def client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@pytest.fixture(scope="module")
def classifier_app(classifier_service):
    return create_app(classifier_service)


async def test_predict_returns_label_score_and_all_scores(classifier_app):
    async with client(classifier_app) as c:
        r = await c.post("/predict", json={"text": "the food was good"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["model"], body["version"]) == ("tiny", "1")
    prediction = body["prediction"]
    assert set(prediction["scores"]) == {"negative", "positive"}
    assert prediction["label"] == max(prediction["scores"], key=prediction["scores"].get)
    assert prediction["score"] == max(prediction["scores"].values())
    assert sum(prediction["scores"].values()) == pytest.approx(1.0, abs=1e-5)


async def test_predict_batch_keeps_order_and_matches_single_predictions(classifier_app):
    texts = ["good", "the service was very slow and rude " * 5, "hello world"]
    async with client(classifier_app) as c:
        batch = await c.post("/predict/batch", json={"texts": texts})
        singles = [await c.post("/predict", json={"text": t}) for t in texts]
    assert batch.status_code == 200, batch.text
    predictions = batch.json()["predictions"]
    assert len(predictions) == 3
    for prediction, single in zip(predictions, singles):
        assert prediction["scores"] == pytest.approx(single.json()["prediction"]["scores"], abs=1e-5)


@pytest.mark.parametrize("path", ["/tiny/predict", "/tiny/health", "/tiny/ready", "/tiny/metrics",
                                  "/tiny/openapi.json", "/tiny/docs", "/tiny/predict/batch"])
async def test_every_route_is_also_under_the_model_name(classifier_app, path):
    async with client(classifier_app) as c:
        if "predict" in path:
            body = {"texts": ["a"]} if path.endswith("batch") else {"text": "a"}
            r = await c.post(path, json=body)
        else:
            r = await c.get(path)
    assert r.status_code == 200, r.text


async def test_openapi_documents_every_error_status(classifier_app):
    async with client(classifier_app) as c:
        doc = (await c.get("/openapi.json")).json()
        prefixed = (await c.get("/tiny/openapi.json")).json()
    assert set(doc["paths"]) == {"/health", "/ready", "/metrics", "/predict", "/predict/batch"}
    for path in ("/predict", "/predict/batch"):
        assert set(doc["paths"][path]["post"]["responses"]) == {"200", "400", "413", "415", "422", "500", "503",
                                                                "504"}
    predict_request = doc["components"]["schemas"]["PredictRequest"]
    assert predict_request["additionalProperties"] is False
    assert predict_request["properties"]["text"]["maxLength"] == 2000
    assert doc["components"]["schemas"]["PredictBatchRequest"]["properties"]["texts"]["maxItems"] == 16
    assert prefixed["servers"] == [{"url": "/tiny"}]
    assert "securitySchemes" not in doc.get("components", {})


async def test_health_ready_metrics(classifier_app):
    async with client(classifier_app) as c:
        assert (await c.get("/health")).json() == {"status": "ok"}
        assert (await c.get("/ready")).json() == {"status": "ready", "model": "tiny", "version": "1"}
        await c.post("/predict", json={"text": "counted"})
        metrics = await c.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert 'requests_total{endpoint="predict",status="200"}' in metrics.text
    assert "queue_depth 0.0" in metrics.text and "ready 1.0" in metrics.text


async def test_request_id_comes_from_the_amazon_trace_header_or_is_generated(classifier_app):
    trace = "Self=1-67891234-12456789abcdef012345678;Root=1-67891233-abcdef012345678912345678;Sampled=1"
    async with client(classifier_app) as c:
        traced = await c.get("/health", headers={"X-Amzn-Trace-Id": trace})
        plain = await c.get("/health")
    assert traced.headers["x-request-id"] == "1-67891233-abcdef012345678912345678"
    assert len(plain.headers["x-request-id"]) == 32


async def test_each_predict_request_logs_one_emf_line(classifier_app, caplog):
    caplog.set_level(logging.INFO, logger="inference_server.access")
    async with client(classifier_app) as c:
        await c.post("/predict", json={"text": "log me please"}, headers={"X-Amzn-Trace-Id": "Root=1-abc-def"})
    [record] = [r for r in caplog.records if r.name == "inference_server.access"]
    line = json.loads(JsonFormatter().format(record))
    assert line["request_id"] == "1-abc-def" and line["status"] == 200 and line["path"] == "/predict"
    assert line["model"] == "tiny" and line["model_version"] == "1" and line["input_tokens"] >= 3
    directive = line["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == m.NAMESPACE
    assert directive["Dimensions"] == [[m.DIMENSION_ENVIRONMENT, m.DIMENSION_MODEL]]
    assert {d["Name"]: d["Unit"] for d in directive["Metrics"]} == {
        m.REQUEST_LATENCY: "Milliseconds", m.QUEUE_WAIT: "Milliseconds", m.INFERENCE_TIME: "Milliseconds"}
    assert line[m.DIMENSION_ENVIRONMENT] == "local" and line[m.DIMENSION_MODEL] == "tiny"
    assert line[m.REQUEST_LATENCY] == line["total_ms"] >= line[m.QUEUE_WAIT] + line[m.INFERENCE_TIME] - 1
    assert line["queue_wait_ms"] == line[m.QUEUE_WAIT] and line["inference_ms"] == line[m.INFERENCE_TIME]


async def test_result_cache_hits_and_misses(classifier_app, classifier_service):
    registry = classifier_service.metrics.registry
    hits = registry.get_sample_value("cache_hits_total") or 0
    misses = registry.get_sample_value("cache_misses_total") or 0
    async with client(classifier_app) as c:
        first = await c.post("/predict/batch", json={"texts": ["cache me", "cache me too"]})
        second = await c.post("/predict/batch", json={"texts": ["cache me", "not cached yet"]})
    assert first.json()["predictions"][0] == second.json()["predictions"][0]
    assert registry.get_sample_value("cache_hits_total") == hits + 1
    assert registry.get_sample_value("cache_misses_total") == misses + 3


LONG = "x" * 2001
BAD_INPUTS = [
    # (name, path, body bytes or JSON, headers, status, error code)
    ("malformed JSON", "/predict", b'{"text":', None, 400, "invalid_json"),
    ("empty body", "/predict", b"", None, 400, "invalid_json"),
    ("null body", "/predict", b"null", None, 422, "invalid_request"),
    ("invalid UTF-8", "/predict", b'{"text": "\xff"}', None, 400, "invalid_json"),
    ("deeply nested JSON", "/predict", b"[" * 100_000 + b"]" * 100_000, None, 413, "payload_too_large"),
    ("JSON nested past the parser's depth", "/predict", b"[" * 20_000 + b"]" * 20_000, None, 400, "invalid_json"),
    ("empty text", "/predict", {"text": ""}, None, 422, "invalid_request"),
    ("oversize text", "/predict", {"text": LONG}, None, 422, "invalid_request"),
    ("number instead of text", "/predict", {"text": 1}, None, 422, "invalid_request"),
    ("list instead of text", "/predict", {"text": ["a"]}, None, 422, "invalid_request"),
    ("null text", "/predict", {"text": None}, None, 422, "invalid_request"),
    ("NaN text", "/predict", b'{"text": NaN}', None, 422, "invalid_request"),
    ("extra field", "/predict", {"text": "a", "top_k": 3}, None, 422, "invalid_request"),
    ("missing field", "/predict", {}, None, 422, "invalid_request"),
    ("array body", "/predict", [], None, 422, "invalid_request"),
    ("string body", "/predict", "just text", None, 422, "invalid_request"),
    ("lone surrogate", "/predict", b'{"text": "\\ud800"}', None, 422, "invalid_request"),
    ("batch body on /predict", "/predict", {"texts": ["a"]}, None, 422, "invalid_request"),
    ("empty batch", "/predict/batch", {"texts": []}, None, 422, "invalid_request"),
    ("too many texts", "/predict/batch", {"texts": ["a"] * 17}, None, 422, "invalid_request"),
    ("empty text in batch", "/predict/batch", {"texts": ["a", ""]}, None, 422, "invalid_request"),
    ("oversize text in batch", "/predict/batch", {"texts": ["a", LONG]}, None, 422, "invalid_request"),
    ("number in batch", "/predict/batch", {"texts": ["a", 2]}, None, 422, "invalid_request"),
    ("string instead of list", "/predict/batch", {"texts": "a"}, None, 422, "invalid_request"),
    ("text/plain", "/predict", b'{"text": "a"}', {"content-type": "text/plain"}, 415, "unsupported_media_type"),
    ("form", "/predict", b"text=a", {"content-type": "application/x-www-form-urlencoded"}, 415,
     "unsupported_media_type"),
    ("no content type", "/predict", b'{"text": "a"}', {"content-type": ""}, 415, "unsupported_media_type"),
    ("body over the limit", "/predict", {"text": "a" * 70_000}, None, 413, "payload_too_large"),
]


@pytest.mark.parametrize("name,path,body,headers,status,code", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
async def test_bad_input_gets_a_clear_4xx(classifier_app, name, path, body, headers, status, code):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    request_headers = {"content-type": "application/json", **(headers or {})}
    if request_headers["content-type"] == "":
        del request_headers["content-type"]
    async with client(classifier_app) as c:
        r = await c.post(path, content=content, headers=request_headers)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    error = r.json()["error"]
    assert error["code"] == code and error["message"]


async def test_streamed_body_over_the_limit_is_cut_off(classifier_app):
    sent = []

    async def chunks():
        for _ in range(100):
            sent.append(1)
            yield b" " * 4096

    async with client(classifier_app) as c:
        r = await c.post("/predict", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large"
    assert len(sent) < 20  # stopped reading at the limit (64 KiB), not at the end of the stream


async def test_bad_content_length_is_refused_before_reading(classifier_service):
    app = create_app(classifier_service)
    messages = []

    async def receive():
        raise AssertionError("the body must not be read")

    async def send(message):
        messages.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "path": "/predict", "raw_path": b"/predict", "query_string": b"", "root_path": "", "scheme": "http",
             "server": ("test", 80), "client": ("c", 1),
             "headers": [(b"content-type", b"application/json"), (b"content-length", b"12abc")]}
    await app(scope, receive, send)
    assert messages[0]["status"] == 400
    scope["headers"][1] = (b"content-length", b"99999999")
    await app(scope, receive, send)
    assert messages[2]["status"] == 413


@pytest.mark.parametrize("method,path,status", [("GET", "/predict", 405), ("PUT", "/predict/batch", 405),
                                                ("POST", "/health", 405), ("DELETE", "/ready", 405),
                                                ("GET", "/nope", 404), ("GET", "/predict/", 404),
                                                ("GET", "/other-model/predict", 404)])
async def test_unknown_routes_and_wrong_methods_get_json(classifier_app, method, path, status):
    async with client(classifier_app) as c:
        r = await c.request(method, path)
    assert r.status_code == status
    assert r.json()["error"]["code"] in ("not_found", "method_not_allowed")
    if status == 405:
        assert r.headers["allow"]


async def test_draining_sheds_new_work_and_fails_readiness_but_not_liveness(echo_service):
    service = echo_service()
    app = create_app(service)
    service.begin_drain()
    async with client(app) as c:
        predict = await c.post("/predict", json={"text": "late"})
        ready = await c.get("/ready")
        health = await c.get("/health")
    assert predict.status_code == 503 and predict.json()["error"]["code"] == "draining"
    assert predict.headers["retry-after"]
    assert ready.status_code == 503 and ready.json()["error"]["code"] == "not_ready"
    assert health.status_code == 200
    assert service.metrics.registry.get_sample_value("rejected_requests_total") == 1


async def test_a_full_queue_gets_503_with_retry_after(echo_service):
    service = echo_service(max_queue_size=2)
    handler = service.batcher.handler
    handler.gate.clear()
    handler.entered.clear()
    service.batcher.submit(["running"], time.monotonic() + 60)
    assert handler.entered.wait(10)
    service.batcher.submit(["queued"], time.monotonic() + 60)
    async with client(create_app(service)) as c:
        too_many = await c.post("/predict/batch", json={"texts": ["a", "b"]})  # room for one only
        service.batcher.submit(["queued too"], time.monotonic() + 60)
        full = await c.post("/predict", json={"text": "a"})
    handler.gate.set()
    for r in (too_many, full):
        assert r.status_code == 503 and r.json()["error"]["code"] == "overloaded"
        assert r.headers["retry-after"] == "1"
    assert service.metrics.take_interval()[m.REJECTED_REQUESTS] == 2


async def test_a_request_past_its_deadline_gets_504(echo_service):
    service = echo_service(request_timeout_s=0.2)
    service.batcher.handler.gate.clear()
    async with client(create_app(service)) as c:
        r = await c.post("/predict", json={"text": "slow"})
    service.batcher.handler.gate.set()
    assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
    assert service.metrics.take_interval()[m.TIMED_OUT_REQUESTS] == 1


async def test_input_the_model_refuses_gets_422_and_a_model_bug_gets_500(echo_service):
    service = echo_service()
    async with client(create_app(service)) as c:
        refused = await c.post("/predict", json={"text": "nul \u0000 byte"})
        service.batcher.handler.error = ValueError("a bug")
        failed = await c.post("/predict", json={"text": "fine"})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_input"
    assert failed.status_code == 500 and failed.json()["error"]["code"] == "internal_error"


async def test_a_cuda_error_answers_503_and_asks_the_process_to_exit(echo_service):
    service = echo_service()
    exits = []
    service.request_exit = exits.append
    service.batcher.handler.error = RuntimeError("CUDA error: an illegal memory access was encountered")
    async with client(create_app(service)) as c:
        r = await c.post("/predict", json={"text": "boom"})
        ready = await c.get("/ready")
        after = await c.post("/predict", json={"text": "again"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_unavailable"
    assert after.status_code == 503
    assert ready.status_code == 503
    deadline = time.monotonic() + 10
    while not exits and time.monotonic() < deadline:  # the inference thread reports just after failing the batch
        time.sleep(0.01)
    assert exits == [1] and service.exit_code == 1


async def test_while_loading_predict_and_ready_are_503_and_health_is_200(tmp_path):
    settings = make_settings(tmp_path, model_task=None, model_handler="tests.server.fakes:EchoHandler")
    service = ModelService(settings)  # never started: still "loading"
    async with client(create_app(service)) as c:
        predict = await c.post("/predict", json={"text": "early"})
        ready = await c.get("/ready")
        health = await c.get("/health")
    assert predict.status_code == 503 and predict.json()["error"]["code"] == "not_ready"
    assert ready.status_code == 503 and "loading" in ready.json()["error"]["message"]
    assert health.status_code == 200


async def test_api_keys_guard_predict_only(echo_service):
    service = echo_service(api_keys=("first-key", "second-key"))
    app = create_app(service)
    async with client(app) as c:
        missing = await c.post("/predict", json={"text": "a"})
        wrong = await c.post("/predict", json={"text": "a"}, headers={"x-api-key": "first-ke"})
        wrong_before_bad_body = await c.post("/predict", content=b"{", headers={"x-api-key": "nope",
                                                                                  "content-type": "text/plain"})
        first = await c.post("/predict", json={"text": "a"}, headers={"x-api-key": "first-key"})
        second = await c.post("/tiny/predict/batch", json={"texts": ["a"]}, headers={"x-api-key": "second-key"})
        open_routes = [await c.get(p) for p in ("/health", "/ready", "/metrics", "/openapi.json")]
    for r in (missing, wrong, wrong_before_bad_body):
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert first.status_code == 200 and second.status_code == 200
    assert [r.status_code for r in open_routes] == [200, 200, 200, 200]
    doc = open_routes[-1].json()
    assert doc["components"]["securitySchemes"]["APIKeyHeader"]["name"] == "x-api-key"
    assert "401" in doc["paths"]["/predict"]["post"]["responses"]


def test_the_periodic_metrics_line_is_an_emf_document(echo_service, caplog):
    service = echo_service(max_queue_size=1)
    service.metrics.take_interval()  # drop the start-up readiness probe's batch
    for text in ("a", "b c"):
        service.batcher.submit([text], time.monotonic() + 60).result(10)
    service.metrics.record_rejected()
    service.metrics.record_cache(hits=2, misses=1)
    with caplog.at_level(logging.INFO, logger="inference_server.service"):
        service.emit_interval_metrics()
    [record] = [r for r in caplog.records if r.getMessage() == "metrics"]
    line = json.loads(JsonFormatter().format(record))
    names = {d["Name"]: d["Unit"] for d in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert names == {m.REJECTED_REQUESTS: "Count", m.TIMED_OUT_REQUESTS: "Count", m.CACHE_HITS: "Count",
                     m.CACHE_MISSES: "Count", m.BATCH_SIZE: "Count", m.QUEUE_DEPTH: "Count"}  # no GPU on CPU
    assert line[m.REJECTED_REQUESTS] == 1 and line[m.TIMED_OUT_REQUESTS] == 0
    assert (line[m.CACHE_HITS], line[m.CACHE_MISSES], line[m.QUEUE_DEPTH]) == (2, 1, 0)
    assert sorted(line[m.BATCH_SIZE]) == [1, 1]
    assert line[m.DIMENSION_ENVIRONMENT] == "local" and line[m.DIMENSION_MODEL] == "tiny"
    assert service.metrics.take_interval()[m.REJECTED_REQUESTS] == 0  # counts are per interval


def test_gpu_metrics_are_omitted_without_a_gpu():
    from inference_server.gpu import GpuSampler

    assert GpuSampler(None).sample() == {}
    assert GpuSampler(0).sample() == {}  # no NVIDIA driver here


async def test_failed_requests_log_a_line_without_latency_metrics(classifier_app, caplog):
    caplog.set_level(logging.INFO, logger="inference_server.access")
    async with client(classifier_app) as c:
        await c.post("/predict", json={"text": ""})
    [record] = [r for r in caplog.records if r.name == "inference_server.access"]
    line = json.loads(JsonFormatter().format(record))
    assert line["status"] == 422 and line["path"] == "/predict" and "_aws" not in line


def test_the_result_cache_never_answers_for_another_model_version():
    """During a canary both versions serve the same inputs; their cached results must not be interchangeable."""
    from inference_server.cache import ResultCache

    old, new = ResultCache(8, "2026-11-01"), ResultCache(8, "2026-12-01")
    old.put(old.key("same input"), "old result")
    assert old.key("same input") != new.key("same input")
    assert new.get(new.key("same input")) is None and old.get(old.key("same input")) == "old result"


def test_static_log_fields_name_the_version_on_every_line():
    record = logging.LogRecord("inference_server.service", logging.WARNING, "", 0, "model loaded slowly", (), None)
    line = json.loads(JsonFormatter({"model": "tiny", "model_version": "7"}).format(record))
    assert (line["model"], line["model_version"], line["message"]) == ("tiny", "7", "model loaded slowly")
