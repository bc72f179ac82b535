"""Property-based API tests from the app's own OpenAPI document: no server errors, every response conforms.

Schemathesis needs its schema at collection time, before fixtures run (its lazy loader does not work with this
pytest), so the apps are created here around services that a module fixture loads and starts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import cast

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from inference_server.front.app import create_app
from inference_server.testing import (
    build_tiny_bert,
    build_tiny_export_model,
    build_tiny_image_classifier,
    local_service,
)

from ..conftest import make_settings, wait_ready

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=cast("list[HealthCheck]", list(HealthCheck)),
)  # HealthCheckMeta.__iter__ is untyped
API_KEY = "sesame"
MODEL_DIR = Path(tempfile.mkdtemp(prefix="schemathesis-model-"))
EMBEDDER_DIR, EXPORT_DIR, IMAGE_DIR = (MODEL_DIR / "embedder", MODEL_DIR / "export", MODEL_DIR / "image")
SERVICES = {
    "open": local_service(make_settings(MODEL_DIR)),
    "keyed": local_service(
        make_settings(MODEL_DIR, model_task=None, model_handler="tests.server.fakes:EchoHandler", api_keys=(API_KEY,))
    ),
    # The protocols' routes (/v1, /v2) on each kind of input: text, tensors, image bytes.
    "embedder": local_service(make_settings(EMBEDDER_DIR, model_task="text-embedding", embedding_dimensions=(16,))),
    "export": local_service(make_settings(EXPORT_DIR, model_task="torch-export", api_keys=(API_KEY,))),
    "image": local_service(make_settings(IMAGE_DIR, model_task="image-classification")),
}
PROTOCOL_SETTINGS = settings(SETTINGS, max_examples=15)


def asgi_schema(service):
    app = create_app(service)
    schema = schemathesis.openapi.from_dict(app.openapi())
    schema.app = app
    return schema


# The protocols' routes (/v1, /v2) have their own tests below, on models that serve them.
open_api = asgi_schema(SERVICES["open"]).exclude(path_regex="^/v[12]")
keyed_api = asgi_schema(SERVICES["keyed"]).exclude(path_regex="^/v[12]")
# Each kind of input once through infer; the OpenAI routes on the embedder; the other /v2 routes on one model.
embedder_api = asgi_schema(SERVICES["embedder"]).include(path_regex="^/v1/|^/v2/models/{model_name}/infer$")
export_api = asgi_schema(SERVICES["export"]).include(path_regex="^/v2")
image_api = asgi_schema(SERVICES["image"]).include(path_regex="^/v2/models/{model_name}/infer$")


@pytest.fixture(scope="module", autouse=True)
def ready_services():
    build_tiny_bert(MODEL_DIR)
    build_tiny_bert(EMBEDDER_DIR, "text-embedding")
    build_tiny_export_model(EXPORT_DIR)
    build_tiny_image_classifier(IMAGE_DIR)
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


def call_and_validate_protocol(case, headers=None) -> None:
    """A schema-valid inference request still names tensors of its own choosing, which the model rightly refuses
    (400): the check that every schema-valid request is accepted does not apply to infer. Every other check does
    (no 5xx, documented statuses and bodies, schema-violating requests refused)."""
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    excluded = [positive_data_acceptance] if case.path.endswith("/infer") else []
    case.call_and_validate(headers=headers, excluded_checks=excluded)


@embedder_api.parametrize()
@PROTOCOL_SETTINGS
def test_embedder_protocols_conform(case):
    call_and_validate_protocol(case)


@export_api.parametrize()
@PROTOCOL_SETTINGS
def test_export_protocol_conforms(case):
    call_and_validate_protocol(case, headers={"x-api-key": API_KEY} if case.path.endswith("/infer") else None)


@image_api.parametrize()
@PROTOCOL_SETTINGS
def test_image_protocol_conforms(case):
    call_and_validate_protocol(case)
