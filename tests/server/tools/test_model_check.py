"""A wrong model is refused before it answers (issue 43): a checkpoint without the head or the labels its task needs,
at publish and at start; and a model that does not answer the probe publish recorded, before ready."""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from pathlib import Path

import pytest

from inference_server.manifest import MANIFEST_FILE, build_manifest, read_manifest
from inference_server.publish import PublishError, publish
from inference_server.testing import LocalModel, build_tiny_bert
from tests.conftest import ROOT

from ..conftest import make_settings


def edit_config(model_dir: Path, **values) -> Path:
    """Set (or, with None, remove) keys of the model's config.json."""
    path = model_dir / "config.json"
    config = json.loads(path.read_text())
    config.update(values)
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return model_dir


@pytest.fixture(scope="module")
def headless_dir(tmp_path_factory) -> Path:
    """A saved base model (BertModel, as a sentence-embedding checkpoint is): no classifier weights, no label names."""
    model = build_tiny_bert(tmp_path_factory.mktemp("headless") / "model", "text-embedding")
    return edit_config(model, id2label=None, label2id=None)


@pytest.fixture
def classifier_copy(tiny_classifier_dir, tmp_path) -> Path:
    return shutil.copytree(tiny_classifier_dir, tmp_path / "classifier")


def start_until_settled(settings):
    """A service that is either ready or whose model side failed."""
    service = LocalModel(settings).start()
    batcher = service.local_model.runner.batcher
    deadline = time.monotonic() + 120
    while service.readiness() is not None and not batcher.failed:
        assert time.monotonic() < deadline, "neither ready nor failed"
        time.sleep(0.02)
    return service


def refusal(settings) -> str:
    """Start the model side; assert it refused to become ready (exit 1) and return why."""
    service = start_until_settled(settings)
    runner = service.local_model.runner
    try:
        assert not runner.batcher.ready.is_set() and service.readiness() is not None
        assert type(runner.batcher.error).__name__ == "ModelCheckError", repr(runner.batcher.error)
        deadline = time.monotonic() + 10  # the batcher fails (error set) a moment before it asks for the exit
        while not service.local_model.exits and time.monotonic() < deadline:
            time.sleep(0.01)
        assert service.local_model.exits == [1]
        return str(runner.batcher.error)
    finally:
        service.local_model.stop()


def write_local_version(model_dir: Path, task: str, *, probe: bool = True, runtimes: dict | None = None) -> None:
    """manifest.json beside the files, as publish writes it (with the probe publish records, unless probe=False)."""
    from inference_server.tools.conversion import record_probe

    recorded = record_probe(model_dir, task) if probe else None
    (model_dir / MANIFEST_FILE).write_bytes(
        build_manifest(model_dir, "tiny", "1", task, runtimes=runtimes, probe=recorded).to_json()
    )


def recorded_probe(model_dir: Path) -> dict:
    manifest = read_manifest(model_dir)
    assert manifest is not None and manifest.probe is not None
    return manifest.probe


def set_classifier_bias(model_dir: Path, bias: list[float]) -> None:
    """Other weights than the published ones: the head's bias replaced, the manifest's hashes made to match again."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(model_dir / "model.safetensors")
    weights["classifier.bias"] = torch.tensor(bias)
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    (model_dir / MANIFEST_FILE).write_bytes(
        build_manifest(model_dir, "tiny", "1", "text-classification", probe=recorded_probe(model_dir)).to_json()
    )


# -- a checkpoint without what its task needs --------------------------------------------------------------------------


def test_publish_refuses_a_classifier_without_its_head(s3, bucket, headless_dir):
    with pytest.raises(PublishError) as refused:
        publish(headless_dir, f"s3://{bucket}/models/tiny/1/", task="text-classification")
    message = str(refused.value)
    assert re.search(r"text-classification: .*lack classifier\.bias, classifier\.weight", message)
    assert re.search(r"id2label .*placeholder .*\(LABEL_0, LABEL_1\)", message)
    assert "MODEL_TASK=text-embedding" in message and "--task text-embedding" in message
    assert "fine-tune a classification head" in message and "--task text-classification" in message
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)  # nothing uploaded


@pytest.mark.parametrize(
    ("id2label", "named"),
    [
        ({"0": "LABEL_0", "1": "LABEL_1"}, r"placeholder .*\(LABEL_0, LABEL_1\)"),
        ({}, "id2label is empty"),
    ],
)
def test_publish_refuses_a_classifier_without_label_names(s3, bucket, classifier_copy, id2label, named):
    edit_config(classifier_copy, id2label=id2label, label2id={v: int(k) for k, v in id2label.items()})
    with pytest.raises(PublishError) as refused:
        publish(classifier_copy, f"s3://{bucket}/models/tiny/1/", task="text-classification")
    message = str(refused.value)
    assert re.search(named, message) and re.search(r"name its labels .*id2label and label2id", message)
    assert "weights lack" not in message  # the head's weights are there
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)


def test_the_server_refuses_to_start_a_classifier_without_its_head(headless_dir):
    message = refusal(make_settings(headless_dir, model_task="text-classification"))
    assert re.search(r"text-classification: .*lack classifier\.bias, classifier\.weight", message)
    readme = (ROOT / "inference_image" / "README.md").read_text()
    documented = re.findall(r"```text\n(.*?)```", readme[readme.index("### A wrong model is refused") :], re.S)[0]
    assert message == documented.replace("\n", " ").strip().replace("<dir>", str(headless_dir))


def test_the_server_refuses_to_start_a_classifier_with_an_empty_label_map(classifier_copy):
    edit_config(classifier_copy, id2label={}, label2id={})
    message = refusal(make_settings(classifier_copy, model_task="text-classification"))
    assert "config.json's id2label is empty" in message


def test_a_body_without_its_pooler_serves_embeddings_but_not_classification(tmp_path):
    from transformers import BertModel

    model = build_tiny_bert(tmp_path / "model", "text-embedding")
    BertModel.from_pretrained(model, add_pooling_layer=False).save_pretrained(model)  # as many embedders are saved
    message = refusal(make_settings(model, model_task="text-classification"))
    assert "bert.pooler.dense.weight" in message and "classifier.weight" in message
    service = start_until_settled(make_settings(model, model_task="text-embedding"))
    try:
        assert service.readiness() is None  # the mean-pooled embedding never reads the pooler
    finally:
        service.local_model.stop()


# -- the probe --------------------------------------------------------------------------------------------------------


def test_publish_records_the_probe_answer_and_the_server_answers_it_alike(
    s3, bucket, tiny_classifier_dir, tmp_path, caplog
):
    from inference_server.engine.artifacts import read_manifest_at
    from inference_server.engine.probe_check import PROBE_TEXT

    uri = f"s3://{bucket}/models/tiny/1/"
    publish(tiny_classifier_dir, uri, task="text-classification")
    manifest = read_manifest_at(uri)
    assert manifest is not None and manifest.probe is not None
    probe = manifest.probe
    assert (probe["text"], probe["task"], probe["runtime"], probe["device"]) == (
        PROBE_TEXT,
        "text-classification",
        "eager",
        "cpu",
    )
    assert list(probe["answer"]["scores"]) == ["negative", "positive"]
    with caplog.at_level(logging.INFO, "inference_server.engine.probe_check"):
        service = start_until_settled(make_settings(uri, model_cache_dir=tmp_path))
    try:
        assert service.readiness() is None
        [answered] = [r for r in caplog.records if r.getMessage() == "the model answered the probe as published"]
        assert answered.gate == "onnx"  # eager FP32 on the CPU: the tightest gate's tolerance
    finally:
        service.local_model.stop()


def test_a_model_that_answers_otherwise_than_published_refuses_to_become_ready(classifier_copy):
    write_local_version(classifier_copy, "text-classification")
    recorded = recorded_probe(classifier_copy)["answer"]["scores"]
    set_classifier_bias(classifier_copy, [2.0, -2.0])
    message = refusal(make_settings(classifier_copy, model_task="text-classification"))
    assert re.match(r"model tiny version 1 .*as published: .*'The parcel", message)
    assert f"label positive (negative {recorded['negative']:.4f}, positive " in message
    assert "answers label negative (negative 0.98" in message
    assert "more than the 0.001 allowed" in message
    assert "Likely cause: different weights" in message


@pytest.mark.parametrize(("shift", "starts"), [(0.0004, True), (0.01, False)])
def test_a_recorded_probe_answer_is_held_to_the_runtimes_tolerance(classifier_copy, shift, starts):
    """Published with another torch: within the tolerance it starts; beyond it, the runtime is the likely cause."""
    write_local_version(classifier_copy, "text-classification")
    manifest = json.loads((classifier_copy / MANIFEST_FILE).read_text())
    scores = manifest["probe"]["answer"]["scores"]
    scores["negative"], scores["positive"] = scores["negative"] + shift, scores["positive"] - shift
    manifest["probe"]["versions"]["torch"] = "2.0.0+cu118"
    (classifier_copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    settings = make_settings(classifier_copy, model_task="text-classification")
    if not starts:
        message = refusal(settings)
        assert "a probability differs by 0.01" in message and "more than the 0.001 allowed" in message
        assert re.search(r"Likely cause: a different runtime.*publish it again.*different weights", message)
        return
    service = start_until_settled(settings)
    try:
        assert service.readiness() is None
    finally:
        service.local_model.stop()


def test_a_model_served_under_another_task_than_published_refuses_to_become_ready(classifier_copy):
    write_local_version(classifier_copy, "text-classification")
    message = refusal(make_settings(classifier_copy, model_task="text-embedding"))
    assert "an embedding of 32 values" in message and "different tasks" in message
    assert re.search(
        r"published for text-classification .*runs text-embedding; set MODEL_TASK=text-classification", message
    )


def test_a_manifest_without_a_probe_starts_with_a_warning(classifier_copy, caplog):
    write_local_version(classifier_copy, "text-classification", probe=False)
    with caplog.at_level(logging.WARNING, "inference_server.engine.probe_check"):
        service = start_until_settled(make_settings(classifier_copy, model_task="text-classification"))
    try:
        assert service.readiness() is None
        [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert warning.getMessage() == (
            "the manifest records no probe answer, so readiness cannot prove this is the published model"
        )
        assert warning.fix == (
            "publish the version again with this image's python -m inference_server.publish --task text-classification"
        )
    finally:
        service.local_model.stop()


def test_an_onnx_runtime_answers_the_eager_probe_within_its_gate(tiny_embedder_dir, tmp_path, caplog):
    from inference_server.tools.conversion import convert_and_gate

    model = shutil.copytree(tiny_embedder_dir, tmp_path / "embedder")
    gate = convert_and_gate(model, "text-embedding", "onnx").to_json()
    write_local_version(model, "text-embedding", runtimes={"onnx": gate})
    assert len(recorded_probe(model)["answer"]["embedding"]) == 32
    with caplog.at_level(logging.INFO, "inference_server.engine.probe_check"):
        service = start_until_settled(make_settings(model, model_task="text-embedding", model_runtime="onnx"))
    try:
        assert service.readiness() is None
        [answered] = [r for r in caplog.records if r.getMessage() == "the model answered the probe as published"]
        assert answered.gate == "onnx"
    finally:
        service.local_model.stop()
