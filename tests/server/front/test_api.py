"""The HTTP API through an in-process ASGI client: responses, every kind of bad input, shedding and auth."""

from __future__ import annotations

import json
import logging
import time

import httpx
import pytest

from inference_server import facts as m
from inference_server.front.app import create_app
from inference_server.logs import JsonFormatter
from inference_server.testing import local_service

from ..conftest import make_settings, model_handler

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
    for prediction, single in zip(predictions, singles, strict=False):
        assert prediction["scores"] == pytest.approx(single.json()["prediction"]["scores"], abs=1e-5)


@pytest.mark.parametrize(
    "path",
    [
        "/tiny/predict",
        "/tiny/health",
        "/tiny/ready",
        "/tiny/metrics",
        "/tiny/openapi.json",
        "/tiny/docs",
        "/tiny/predict/batch",
    ],
)
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
    oip = ["/v2/models/{model_name}", "/v2/models/{model_name}/versions/{model_version}"]
    assert set(doc["paths"]) == {
        "/health",
        "/ready",
        "/metrics",
        "/predict",
        "/predict/batch",
        "/v1/embeddings",
        "/v1/models",
        "/v1/models/{model_id}",
        "/v2",
        "/v2/health/live",
        "/v2/health/ready",
        *oip,
        *(f"{p}/ready" for p in oip),
        *(f"{p}/infer" for p in oip),
    }
    for path in ("/predict", "/predict/batch"):
        assert set(doc["paths"][path]["post"]["responses"]) == {"200", "400", "413", "415", "422", "500", "503", "504"}
    predict_request = doc["components"]["schemas"]["PredictRequest"]
    assert predict_request["additionalProperties"] is False
    assert predict_request["properties"]["text"]["maxLength"] == 2000
    assert doc["components"]["schemas"]["PredictBatchRequest"]["properties"]["texts"]["maxItems"] == 16
    assert prefixed["servers"] == [{"url": "/tiny"}]
    assert "securitySchemes" not in doc.get("components", {})


async def test_health_ready_metrics(classifier_app):
    async with client(classifier_app) as c:
        assert (await c.get("/health")).json() == {"status": "ok"}
        assert (await c.get("/ready")).json() == {"status": "ready"}  # the status and nothing more
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


async def test_a_successful_request_writes_no_log_line_but_is_in_the_interval_metrics(echo_service, caplog):
    service = echo_service(access_log_sample=0.0)
    service.metrics.take_interval()
    caplog.set_level(logging.INFO, logger="inference_server.access")
    async with client(create_app(service)) as c:
        for _ in range(3):
            assert (await c.post("/predict", json={"text": "quiet please"})).status_code == 200
    assert [r for r in caplog.records if r.name == "inference_server.access"] == []
    values, statuses = service.metrics.take_interval()
    assert statuses == {"200": 3}
    assert values[m.REQUEST_LATENCY]["Count"] == 3 and sum(values[m.REQUEST_LATENCY]["Counts"]) == 3
    assert values[m.QUEUE_WAIT]["Count"] == 3 and values[m.INFERENCE_TIME]["Count"] == 3


async def test_sampled_and_slow_requests_get_an_access_line_without_metrics(echo_service, caplog):
    sampled = echo_service(access_log_sample=1.0)
    slow = echo_service(access_log_sample=0.0, slow_request_ms=0.0)
    caplog.set_level(logging.INFO, logger="inference_server.access")
    for service in (sampled, slow):
        async with client(create_app(service)) as c:
            await c.post("/predict", json={"text": "log me please"}, headers={"X-Amzn-Trace-Id": "Root=1-abc-def"})
    records = [r for r in caplog.records if r.name == "inference_server.access"]
    assert len(records) == 2
    for record in records:
        line = json.loads(JsonFormatter().format(record))
        assert line["request_id"] == "1-abc-def" and line["status"] == 200 and line["path"] == "/predict"
        assert line["model"] == "tiny" and line["model_version"] == "1" and line["input_tokens"] == 3
        assert line["total_ms"] >= line["queue_wait_ms"] + line["inference_ms"] - 1
        assert "_aws" not in line  # metrics come from the interval document only


def test_errors_are_logged_up_to_a_rate_limit_and_the_rest_counted():
    from inference_server.front.access_log import AccessLog

    access = AccessLog(sample=0.0, slow_ms=1e9, errors_per_s=3)
    assert [access.wants(503, 0.1) for _ in range(5)] == [True, True, True, False, False]
    assert access.wants(200, 0.1) is False
    assert access.take_suppressed() == 2 and access.take_suppressed() == 0


def test_slow_requests_are_logged_up_to_their_own_rate():
    from inference_server.front.access_log import SLOW_LINES_PER_S, AccessLog

    access = AccessLog(sample=0.0, slow_ms=100.0, errors_per_s=3)
    assert sum(access.wants(200, 150.0) for _ in range(50)) == SLOW_LINES_PER_S  # everyone slow: a few examples
    assert access.wants(200, 50.0) is False
    assert access.wants(500, 150.0) is True  # errors keep their own budget
    assert access.take_suppressed() == 50 - SLOW_LINES_PER_S


def test_the_default_sample_is_well_under_one_percent():
    from inference_server.front.access_log import AccessLog
    from inference_server.settings import Settings

    default = Settings.__dataclass_fields__["access_log_sample"].default
    assert 0 < default < 0.01
    access = AccessLog(sample=default, slow_ms=1e9)
    lines = sum(access.wants(200, 1.0) for _ in range(100_000))
    assert 30 < lines < 300


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
    (
        "form",
        "/predict",
        b"text=a",
        {"content-type": "application/x-www-form-urlencoded"},
        415,
        "unsupported_media_type",
    ),
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

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "path": "/predict",
        "raw_path": b"/predict",
        "query_string": b"",
        "root_path": "",
        "scheme": "http",
        "server": ("test", 80),
        "client": ("c", 1),
        "headers": [(b"content-type", b"application/json"), (b"content-length", b"12abc")],
    }
    await app(scope, receive, send)
    assert messages[0]["status"] == 400
    scope["headers"][1] = (b"content-length", b"99999999")
    await app(scope, receive, send)
    assert messages[2]["status"] == 413


@pytest.mark.parametrize(
    "method,path,status",
    [
        ("GET", "/predict", 405),
        ("PUT", "/predict/batch", 405),
        ("POST", "/health", 405),
        ("DELETE", "/ready", 405),
        ("GET", "/nope", 404),
        ("GET", "/predict/", 404),
        ("GET", "/other-model/predict", 404),
    ],
)
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
    handler, batcher = model_handler(service), service.local_model.runner.batcher

    def submit(text: str):
        return batcher.submit(service.handler.preprocess([text]), time.monotonic() + 60)

    handler.gate.clear()
    handler.entered.clear()
    submit("running")
    assert handler.entered.wait(10)
    submit("queued")
    async with client(create_app(service)) as c:
        too_many = await c.post("/predict/batch", json={"texts": ["a", "b"]})  # room for one only: the model says
        submit("queued too")
        full = await c.post("/predict", json={"text": "a"})  # shed by the worker before the body is read
    handler.gate.set()
    for r in (too_many, full):
        assert r.status_code == 503 and r.json()["error"]["code"] == "overloaded"
        assert r.headers["retry-after"] == "1"
    assert service.metrics.take_interval()[0][m.REJECTED_REQUESTS] == 2


async def test_a_request_past_its_deadline_gets_504(echo_service):
    service = echo_service(request_timeout_s=0.2)
    model_handler(service).gate.clear()
    async with client(create_app(service)) as c:
        r = await c.post("/predict", json={"text": "slow"})
    model_handler(service).gate.set()
    assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
    assert service.metrics.take_interval()[0][m.TIMED_OUT_REQUESTS] == 1


async def test_input_the_model_refuses_gets_422_and_a_model_bug_gets_500(echo_service):
    service = echo_service()
    async with client(create_app(service)) as c:
        refused = await c.post("/predict", json={"text": "nul \u0000 byte"})
        model_handler(service).error = ValueError("a bug")
        failed = await c.post("/predict", json={"text": "fine"})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_input"
    assert failed.status_code == 500 and failed.json()["error"]["code"] == "internal_error"


async def test_a_cuda_error_answers_503_and_asks_the_model_process_to_exit(echo_service):
    service = echo_service()
    exits = service.local_model.exits
    model_handler(service).error = RuntimeError("CUDA error: an illegal memory access was encountered")
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
    assert exits == [1] and service.local_model.runner.exit_code == 1


async def test_while_loading_predict_and_ready_are_503_and_health_is_200(tmp_path):
    settings = make_settings(tmp_path, model_task=None, model_handler="tests.server.fakes:EchoHandler")
    service = local_service(settings)  # never started: still "loading"
    async with client(create_app(service)) as c:
        predict = await c.post("/predict", json={"text": "early"})
        ready = await c.get("/ready")
        health = await c.get("/health")
    assert predict.status_code == 503 and predict.json()["error"]["code"] == "not_ready"
    assert ready.status_code == 503 and "loading" in ready.json()["error"]["message"]
    assert health.status_code == 200


async def test_api_keys_guard_every_route_but_the_probes(echo_service, caplog):
    service = echo_service(api_keys=(("first", "first-key"), ("second", "second-key")), docs=True)
    app = create_app(service)
    async with client(app) as c:
        missing = await c.post("/predict", json={"text": "a"})
        wrong = await c.post("/predict", json={"text": "a"}, headers={"x-api-key": "first-ke"})
        wrong_before_bad_body = await c.post(
            "/predict", content=b"{", headers={"x-api-key": "nope", "content-type": "text/plain"}
        )
        first = await c.post("/predict", json={"text": "a"}, headers={"x-api-key": "first-key"})
        with caplog.at_level(logging.INFO, logger="inference_server.access"):
            second = await c.post(
                "/tiny/predict/batch", json={"texts": ["a"]}, headers={"authorization": "Bearer second-key"}
            )
        probes = [await c.get(p) for p in ("/health", "/ready", "/metrics", "/tiny/health", "/tiny/ready")]
        keyless = {
            p: await c.get(p)
            for p in (
                "/openapi.json",
                "/docs",
                "/tiny/openapi.json",
                "/v1/models",
                "/tiny/v1/models",
                "/tiny/v2",
                "/tiny/v2/models/tiny/ready",
                "/tiny/v2/health/live",
                "/no-such-route",
                "/tiny/later-route",
            )
        }
        keyed = {p: await c.get(p, headers={"x-api-key": "second-key"}) for p in keyless}
        metrics = (await c.get("/metrics")).text
    for r in (missing, wrong, wrong_before_bad_body, *keyless.values()):
        assert r.status_code == 401, (r.request.url, r.status_code)
    assert first.status_code == 200 and second.status_code == 200
    assert [r.status_code for r in probes] == [200] * 5
    assert {p: r.status_code for p, r in keyed.items()} == {
        **dict.fromkeys(keyless, 200),
        "/no-such-route": 404,
        "/tiny/later-route": 404,
    }
    doc = keyed["/openapi.json"].json()
    assert doc["components"]["securitySchemes"]["APIKeyHeader"]["name"] == "x-api-key"
    assert "401" in doc["paths"]["/predict"]["post"]["responses"]
    # Which key, by name, never the key: in the Prometheus counter and the interval document.
    assert 'key_requests_total{key="first",status="200"} 1.0' in metrics
    assert 'key_requests_total{key="-",status="401"}' in metrics
    assert "first-key" not in metrics and "second-key" not in metrics
    counts = service.metrics.take_key_counts()
    assert counts["first"] == 1 and counts["second"] == 1 + len(keyless) and counts["-"] == 3 + len(keyless)


async def test_the_access_log_names_the_key_never_shows_it(echo_service, caplog):
    service = echo_service(api_keys=(("team-a", "team-a-secret"),), access_log_sample=1.0)
    async with client(create_app(service)) as c:
        with caplog.at_level(logging.INFO, logger="inference_server.access"):
            assert (
                await c.post("/predict", json={"text": "a"}, headers={"x-api-key": "team-a-secret"})
            ).status_code == 200
            assert (await c.post("/predict", json={"text": "a"}, headers={"x-api-key": "guess"})).status_code == 401
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.getMessage() == "request"]
    assert [(line.get("api_key"), line["status"]) for line in lines] == [("team-a", 200), (None, 401)]
    assert not any(
        "team-a-secret" in JsonFormatter().format(r) or "guess" in JsonFormatter().format(r) for r in caplog.records
    )


async def test_rotation_two_keys_live_at_once_then_one_revoked_alone(echo_service):
    """The secret's JSON object during a rotation ({"team-a": old, "team-a-next": new, "team-b": ...}): both of
    team-a's keys work; the tasks started after "team-a" is removed refuse only the old key."""
    keys = '{"team-a": "a-old-key", "team-a-next": "a-new-key", "team-b": "b-key"}'
    from inference_server.settings import _api_keys

    rotating = create_app(echo_service(api_keys=_api_keys(keys)))
    revoked = create_app(echo_service(api_keys=_api_keys('{"team-a-next": "a-new-key", "team-b": "b-key"}')))

    async def statuses(app):
        async with client(app) as c:
            return [
                (await c.post("/predict", json={"text": "a"}, headers={"x-api-key": key})).status_code
                for key in ("a-old-key", "a-new-key", "b-key")
            ]

    assert await statuses(rotating) == [200, 200, 200]
    assert await statuses(revoked) == [401, 200, 200]


async def test_paths_that_only_look_like_a_probe_need_the_key(echo_service):
    """A forwarded prefix plus dot segments or encodings never reaches a probe without the key: only the exact
    probe paths are open."""
    app = create_app(echo_service(api_keys=(("a", "a-key"),)))

    async def status(path: str) -> int:
        # As uvicorn hands a raw request line over (percent-decoded, dot segments kept); an HTTP client would
        # normalise "..", which an attacker's need not.
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [],
            "server": ("127.0.0.1", 8080),
            "client": ("127.0.0.1", 1),
        }
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)
        return next(m["status"] for m in sent if m["type"] == "http.response.start")

    for path in (
        "/tiny/v1/../metrics",
        "/tiny/predict/../ready",
        "/tiny/v2/../health",
        "/tiny/metrics/",
        "/tiny//metrics",
        "/TINY/metrics",
        "/tiny/health/x",
    ):
        assert await status(path) == 401, path
    assert await status("/tiny/metrics") == 200  # the exact probe path, for a local scrape


async def test_docs_are_off_unless_turned_on(echo_service):
    async with client(create_app(echo_service(deployment_env="prod"))) as c:
        assert [(await c.get(p)).status_code for p in ("/docs", "/openapi.json", "/tiny/docs")] == [404] * 3


async def test_each_worker_and_the_model_write_one_emf_document_per_interval(echo_service, caplog):
    service = echo_service(max_queue_size=1)
    runner = service.local_model.runner
    service.metrics.take_interval()  # drop the start-up readiness probe
    runner.batch_sizes.take()
    async with client(create_app(service)) as c:
        for text in ("a", "b c", "d"):
            assert (await c.post("/predict", json={"text": text})).status_code == 200
        assert (await c.post("/predict", json={"text": ""})).status_code == 422
    service.metrics.record_rejected()
    service.metrics.record_cache(hits=2, misses=1)
    with caplog.at_level(logging.INFO):
        service.emit_interval_metrics()
        runner.emit_interval_metrics()
        runner._on_queue_change(7)  # a burst between two signal documents
        runner._on_queue_change(0)
        runner.emit_signals()
        runner.emit_signals()
    worker, model, signal, quiet = [
        json.loads(JsonFormatter().format(r)) for r in caplog.records if r.getMessage() == "metrics"
    ]
    names = {d["Name"]: d["Unit"] for d in worker["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert names == {
        m.REJECTED_REQUESTS: "Count",
        m.TIMED_OUT_REQUESTS: "Count",
        m.CACHE_HITS: "Count",
        m.CACHE_MISSES: "Count",
        m.REQUEST_LATENCY: "Milliseconds",
        m.QUEUE_WAIT: "Milliseconds",
        m.INFERENCE_TIME: "Milliseconds",
    }
    assert worker[m.REJECTED_REQUESTS] == 1 and worker[m.TIMED_OUT_REQUESTS] == 0
    assert (worker[m.CACHE_HITS], worker[m.CACHE_MISSES]) == (2, 1)
    assert worker["requests_by_status"] == {"200": 3, "422": 1}
    latency = worker[m.REQUEST_LATENCY]
    assert latency["Count"] == sum(latency["Counts"]) == 3 and len(latency["Values"]) == len(latency["Counts"])
    assert latency["Min"] <= min(latency["Values"]) * 1.05 and max(latency["Values"]) <= latency["Max"] * 1.05
    assert worker[m.DIMENSION_ENVIRONMENT] == "local" and worker[m.DIMENSION_MODEL] == "tiny"
    assert model["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [
        {"Name": m.BATCH_SIZE, "Unit": "Count"},
        {"Name": m.GPU_MEMORY_USED_MIB, "Unit": "Megabytes"},
        {"Name": m.MODEL_BUSY_PERCENT, "Unit": "Percent"},
    ]
    assert model[m.BATCH_SIZE] == {"Values": [1], "Counts": [3], "Min": 1, "Max": 1, "Sum": 3, "Count": 3}
    # The scale-out signal: its own document, stored at 1-second resolution, the peak since the last one.
    assert signal["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [
        {"Name": m.QUEUE_DEPTH, "Unit": "Count", "StorageResolution": 1}
    ]
    assert (signal[m.QUEUE_DEPTH], quiet[m.QUEUE_DEPTH]) == (7, 0)
    assert service.metrics.take_interval()[0][m.REJECTED_REQUESTS] == 0  # counts are per interval


def test_gpu_metrics_are_omitted_without_a_gpu():
    from inference_server.engine.gpu import GpuSampler

    assert GpuSampler(None).sample() == {}
    assert GpuSampler(0).sample() == {}  # no NVIDIA driver here


async def test_failed_requests_log_a_line_without_latency_metrics(classifier_service, caplog):
    caplog.set_level(logging.INFO, logger="inference_server.access")
    async with client(create_app(classifier_service)) as c:  # a fresh app: its own error-line budget
        await c.post("/predict", json={"text": ""})
    [record] = [r for r in caplog.records if r.name == "inference_server.access"]
    line = json.loads(JsonFormatter().format(record))
    assert line["status"] == 422 and line["path"] == "/predict" and "_aws" not in line


def test_the_result_cache_never_answers_for_another_model_version():
    """During a canary both versions serve the same inputs; their cached results must not be interchangeable."""
    from inference_server.front.cache import ResultCache

    old, new = ResultCache(8, "2026-11-01"), ResultCache(8, "2026-12-01")
    old.put(old.key("same input"), "old result")
    assert old.key("same input") != new.key("same input")
    assert new.get(new.key("same input")) is None and old.get(old.key("same input")) == "old result"


def test_static_log_fields_name_the_version_on_every_line():
    record = logging.LogRecord(
        "inference_server.front.service", logging.WARNING, "", 0, "model loaded slowly", (), None
    )
    line = json.loads(JsonFormatter({"model": "tiny", "model_version": "7"}).format(record))
    assert (line["model"], line["model_version"], line["message"]) == ("tiny", "7", "model loaded slowly")
