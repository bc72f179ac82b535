"""Property-based API tests from the app's own OpenAPI document: no server errors, every response conforms.

Schemathesis needs its schema at collection time, before fixtures run (its lazy loader does not work with this
pytest), so the apps are created here around services that a module fixture loads and starts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from inference_server.app import create_app
from inference_server.testing import build_tiny_bert, local_service

from .conftest import make_settings, wait_ready

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
API_KEY = "sesame"
MODEL_DIR = Path(tempfile.mkdtemp(prefix="schemathesis-model-"))
SERVICES = {
    "open": local_service(make_settings(MODEL_DIR)),
    "keyed": local_service(make_settings(MODEL_DIR, model_task=None, model_handler="tests.server.fakes:EchoHandler",
                                         api_keys=(API_KEY,))),
}


def asgi_schema(service):
    app = create_app(service)
    schema = schemathesis.openapi.from_dict(app.openapi())
    schema.app = app
    return schema


open_api = asgi_schema(SERVICES["open"])
keyed_api = asgi_schema(SERVICES["keyed"])


@pytest.fixture(scope="module", autouse=True)
def ready_services():
    build_tiny_bert(MODEL_DIR)
    for service in SERVICES.values():
        service.local_model.start()
    for service in SERVICES.values():
        wait_ready(service)
    yield
    for service in SERVICES.values():
        service.local_model.stop()
    shutil.rmtree(MODEL_DIR, ignore_errors=True)


@open_api.parametrize()
@SETTINGS
def test_open_api_conforms(case):
    case.call_and_validate()


@keyed_api.parametrize()
@SETTINGS
def test_keyed_api_conforms(case):
    case.call_and_validate(headers={"x-api-key": API_KEY} if case.path.startswith("/predict") else None)

