"""Optimised runtimes: converted at publish, verified by the manifest, gated against eager, refused when broken."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from inference_server.engine.artifacts import read_manifest_at
from inference_server.handlers import runtimes
from inference_server.handlers.hf import HuggingFaceHandler
from inference_server.handlers.runtimes import RuntimeConversionError, check_published
from inference_server.manifest import read_manifest
from inference_server.publish import PublishError, publish
from inference_server.tools import conversion
from inference_server.tools.conversion import convert_and_gate

from ..conftest import infer, make_settings, model_handler, started


@pytest.fixture
def embedder_copy(tiny_embedder_dir, tmp_path):
    return shutil.copytree(tiny_embedder_dir, tmp_path / "embedder")


@pytest.fixture
def classifier_copy(tiny_classifier_dir, tmp_path):
    return shutil.copytree(tiny_classifier_dir, tmp_path / "classifier")


@pytest.mark.parametrize("runtime", ["onnx", "int8"])
def test_onnx_conversions_pass_their_gates_on_both_tasks(runtime, embedder_copy, classifier_copy):
    embedding = convert_and_gate(embedder_copy, "text-embedding", runtime)
    assert embedding.passed and embedding.metric == "min cosine"
    assert embedding.value >= runtimes.MIN_COSINE[runtime] and embedding.inputs == len(conversion.GATE_TEXTS)
    classification = convert_and_gate(classifier_copy, "text-classification", runtime)
    assert classification.passed and classification.value >= runtimes.MIN_SAME_LABEL
    assert (embedder_copy / runtimes.ONNX_FILES[runtime]).is_file()


def _broken_export(original):
    """Exports a model whose weight rows were reversed: the file is valid ONNX, its answers wrong."""

    def export(model_dir, task, target):
        import torch

        real = conversion._handler

        def scaled(*args, **kwargs):
            handler = real(*args, **kwargs)
            assert isinstance(handler, HuggingFaceHandler)  # the built-in text-embedding handler
            with torch.no_grad():
                for param in handler.model.parameters():
                    param.copy_(param.flip(0))
            return handler

        conversion._handler = scaled
        try:
            original(model_dir, task, target)
        finally:
            conversion._handler = real

    return export


def test_publish_refuses_a_conversion_that_fails_its_gate(s3, bucket, embedder_copy, monkeypatch):
    monkeypatch.setattr(conversion, "export_onnx", _broken_export(conversion.export_onnx))
    with pytest.raises(PublishError, match="accuracy gate.*min cosine"):
        publish(embedder_copy, f"s3://{bucket}/models/tiny/1/", task="text-embedding", runtimes=["onnx"])
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)  # nothing uploaded
    assert not (embedder_copy / "model.onnx").exists()  # the refused artifact is gone


def test_publish_checksums_the_converted_file_and_records_the_gate(s3, bucket, embedder_copy):
    uri = f"s3://{bucket}/models/tiny/2/"
    publish(embedder_copy, uri, task="text-embedding", runtimes=["onnx"])
    manifest = read_manifest_at(uri)
    assert manifest is not None
    assert "model.onnx" in manifest.files
    assert manifest.runtimes["onnx"]["passed"] and manifest.runtimes["onnx"]["metric"] == "min cosine"
    with pytest.raises(PublishError, match="--runtime.*--task"):
        publish(embedder_copy, f"s3://{bucket}/models/tiny/3/", runtimes=["onnx"])


def test_the_server_refuses_a_runtime_the_version_was_not_published_with(s3, bucket, embedder_copy):
    publish(embedder_copy, f"s3://{bucket}/models/tiny/4/", task="text-embedding")
    manifest = read_manifest_at(f"s3://{bucket}/models/tiny/4/")
    with pytest.raises(RuntimeConversionError, match="onnx.*--runtime onnx"):
        check_published("onnx", embedder_copy, manifest)
    check_published("eager", embedder_copy, manifest)
    with pytest.raises(RuntimeConversionError, match=r"model\.onnx"):
        check_published("onnx", embedder_copy, None)


def test_runtimes_are_not_built_for_other_tasks(tiny_export_dir):
    with pytest.raises(RuntimeConversionError, match="serves eager only"):
        convert_and_gate(tiny_export_dir, "torch-export", "onnx")


def test_a_model_served_on_onnx_runtime_answers_like_eager(embedder_copy, monkeypatch):
    convert_and_gate(embedder_copy, "text-embedding", "onnx")
    texts = ["a short text", "another, somewhat longer text for the second row"]
    eager = started(make_settings(embedder_copy, model_task="text-embedding"))
    onnx = started(make_settings(embedder_copy, model_task="text-embedding", model_runtime="onnx"))
    try:
        assert isinstance(model_handler(onnx)._run, runtimes.OnnxForward)
        assert not hasattr(model_handler(onnx), "model")  # no torch weights loaded beside the ONNX session
        a = np.array([p["embedding"] for p in infer(eager, texts)[0]])
        b = np.array([p["embedding"] for p in infer(onnx, texts)[0]])
        assert np.allclose(a, b, atol=1e-4)
    finally:
        eager.stop()
        onnx.stop()
    assert read_manifest(embedder_copy) is None
