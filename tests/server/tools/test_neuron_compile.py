"""Issue 46: the publish-time Neuron compile (inference_server.tools.neuron_compile) and the TorchServe handler it
ships. torch-neuronx is not installable here (the Neuron package index only, and an Inferentia2 or Trainium device to
compile on), so the compile is stubbed at the one Neuron call, ``torch_neuronx.trace``, by ``torch.jit.trace`` on
CPU: everything around it (the checkpoint's load, the traced graph, the layout, the manifest and digests publish
writes, the handler's answers and probe) runs as it would in the DLC."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from inference_server.manifest import build_manifest
from inference_server.tools import neuron_compile, neuron_handler
from inference_server.tools.neuron_compile import COMPILE_COMMAND, compile_encoder, main
from inference_server.tools.neuron_layout import (
    HANDLER_FILE,
    LOG_CONFIG_FILE,
    MANIFEST_PATH,
    MODEL_CONFIG_FILE,
    MODEL_FILE,
    NEURON_FILE,
    PROPERTIES_FILE,
)


def cpu_trace(module, example_inputs, compiler_args):
    import torch

    return torch.jit.trace(module, example_inputs)


class Context:
    """TorchServe's handler context (ts/context.py): the model directory and per-request statuses."""

    def __init__(self, model_dir: Path, headers: dict[int, dict[str, str]] | None = None) -> None:
        self.system_properties = {"model_dir": str(model_dir)}
        self.statuses: dict[int, int] = {}
        self.headers = headers or {}

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:
        self.statuses[idx] = code

    def get_all_request_header(self, idx: int) -> dict[str, str]:
        return self.headers.get(idx, {})


@pytest.fixture
def neuron_stub(monkeypatch):
    """torch_neuronx as an empty module: importing it is the handler's only Neuron call at load."""
    monkeypatch.setitem(sys.modules, "torch_neuronx", types.ModuleType("torch_neuronx"))


@pytest.fixture(scope="module")
def compiled_embedder(tmp_path_factory, tiny_embedder_dir) -> Path:
    out = tmp_path_factory.mktemp("neuron-embedder")
    compile_encoder(
        tiny_embedder_dir,
        out,
        task="text-embedding",
        model_name="encoder",
        batch_size=4,
        sequence_length=16,
        trace=cpu_trace,
    )
    return out


@pytest.fixture(scope="module")
def compiled_classifier(tmp_path_factory, tiny_classifier_dir) -> Path:
    out = tmp_path_factory.mktemp("neuron-classifier")
    compile_encoder(
        tiny_classifier_dir,
        out,
        task="text-classification",
        model_name="sentiment",
        batch_size=2,
        sequence_length=16,
        trace=cpu_trace,
    )
    return out


def test_the_layout_is_torchserves_unarchived_model_and_publish_checksums_all_of_it(compiled_embedder):
    files = {str(p.relative_to(compiled_embedder)) for p in compiled_embedder.rglob("*") if p.is_file()}
    assert {
        MANIFEST_PATH,
        HANDLER_FILE,
        MODEL_FILE,
        NEURON_FILE,
        MODEL_CONFIG_FILE,
        PROPERTIES_FILE,
        LOG_CONFIG_FILE,
        "tokenizer.json",
        "config.json",
    } <= files
    manifest = json.loads((compiled_embedder / MANIFEST_PATH).read_text())
    assert manifest["runtime"] == "python"
    assert manifest["model"] == {
        "modelName": "encoder",
        "modelVersion": "1.0",
        "handler": "handler.py",
        "configFile": "model-config.yaml",
    }
    assert (compiled_embedder / MODEL_CONFIG_FILE).read_text().splitlines() == [
        "batchSize: 4",
        "maxBatchDelay: 5",
        "deviceType: cpu",
    ]
    assert "enable_envvars_config=true" in (compiled_embedder / PROPERTIES_FILE).read_text()
    facts = json.loads((compiled_embedder / NEURON_FILE).read_text())
    assert (facts["task"], facts["batch_size"], facts["sequence_length"], facts["compiler"]) == (
        "text-embedding",
        4,
        16,
        "torch-neuronx",
    )
    published = build_manifest(compiled_embedder, "encoder", "1")
    assert set(published.files) == files
    assert published.to_sha256sums().decode().count("\n") == len(files)


def test_the_handler_embeds_batches_of_any_size_and_answers_the_probe_for_a_bodiless_request(
    compiled_embedder, neuron_stub
):
    context = Context(compiled_embedder)
    assert neuron_handler.handle(None, context) is None
    texts = [{"body": {"inputs": f"text number {i}"}} for i in range(6)]  # more than one compiled batch of 4
    answers = neuron_handler.handle(texts, context)
    assert answers is not None and len(answers) == 6
    assert all(abs(sum(v * v for v in a["embedding"]) - 1) < 1e-4 for a in answers)
    alone = neuron_handler.handle([{"body": b'{"inputs": "text number 5"}'}], context)
    assert alone is not None and alone[0]["embedding"] == pytest.approx(answers[5]["embedding"], abs=1e-5)
    probe = neuron_handler.handle([{"body": b""}], context)
    facts = json.loads((compiled_embedder / NEURON_FILE).read_text())
    assert probe == neuron_handler.handle([{"body": {"inputs": facts["probe_text"]}}], context)


def test_a_malformed_request_gets_400_and_the_rest_of_its_batch_its_answers(compiled_embedder, neuron_stub):
    context = Context(compiled_embedder)
    neuron_handler.handle(None, context)
    answers = neuron_handler.handle(
        [{"body": b"not json"}, {"body": {"inputs": "fine"}}, {"body": {"text": "x"}}], context
    )
    assert answers is not None
    assert context.statuses == {0: 400, 2: 400}
    assert "embedding" in answers[1] and answers[0]["error"].startswith("the body must be JSON")


def test_the_classifier_answers_its_labels(compiled_classifier, tiny_classifier_dir, neuron_stub):
    context = Context(compiled_classifier)
    neuron_handler.handle(None, context)
    answers = neuron_handler.handle(
        [{"body": {"inputs": "great"}}, {"body": {"inputs": "awful"}}, {"body": {"inputs": "fine"}}], context
    )
    labels = json.loads((tiny_classifier_dir / "config.json").read_text())["id2label"].values()
    assert answers is not None and all(a["label"] in labels and 0 < a["score"] <= 1 for a in answers)


def test_the_handler_refuses_to_serve_another_task_than_the_one_compiled(compiled_embedder, neuron_stub, monkeypatch):
    monkeypatch.setenv("MODEL_TASK", "text-classification")
    with pytest.raises(RuntimeError, match="compiled for text-embedding"):
        neuron_handler.handle(None, Context(compiled_embedder))


def test_without_torch_neuronx_the_compile_stops_at_once_naming_where_it_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_neuronx", None)  # an import of it raises ImportError
    assert main([str(tmp_path), str(tmp_path / "out"), "--task", "text-embedding", "--model-name", "encoder"]) == 2
    error = capsys.readouterr().err
    assert "torch-neuronx is not installed here" in error and COMPILE_COMMAND in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--task", "torch-export", "--model-name", "m"], "invalid choice"),
        (["--task", "text-embedding"], "--model-name"),
        (["--task", "text-embedding", "--model-name", "m", "--batch-size", "0"], "--batch-size"),
        (["--task", "text-embedding", "--model-name", "m", "--sequence-length", "4"], "--sequence-length"),
    ],
)
def test_arguments_are_parsed_strictly(argv, message, capsys):
    with pytest.raises(SystemExit):
        neuron_compile.parser().parse_args(["ckpt", "out", *argv])
    assert message in capsys.readouterr().err


def test_a_model_name_the_service_cannot_route_is_refused(tmp_path, tiny_embedder_dir):
    with pytest.raises(neuron_compile.NeuronCompileError, match="URL-safe"):
        compile_encoder(tiny_embedder_dir, tmp_path, task="text-embedding", model_name="My_Model", trace=cpu_trace)


def test_with_api_keys_a_request_needs_one_and_the_health_check_does_not(compiled_embedder, neuron_stub, monkeypatch):
    """The environment's API-key secret (the contract's api_keys_variable): x-api-key or Authorization: Bearer, in any
    header case; a wrong or missing key gets 401 and the rest of the batch its answers; a bodiless health check
    passes."""
    monkeypatch.setenv(neuron_handler.API_KEYS_VARIABLE, json.dumps({"default": "k-one", "team-b": "k-two"}))
    headers = {0: {"X-Api-Key": "k-one"}, 1: {"authorization": "Bearer k-two"}, 2: {"x-api-key": "wrong"}, 3: {}}
    context = Context(compiled_embedder, headers)
    neuron_handler.handle(None, context)
    answers = neuron_handler.handle(
        [
            {"body": {"inputs": "a"}},
            {"body": {"inputs": "b"}},
            {"body": {"inputs": "c"}},
            {"body": {"inputs": "d"}},
            {"body": b""},
        ],
        context,
    )
    assert answers is not None
    assert context.statuses == {2: 401, 3: 401}
    assert "embedding" in answers[0] and "embedding" in answers[1] and "embedding" in answers[4]
    assert answers[2] == answers[3] == {"error": neuron_handler.UNAUTHORIZED}


def test_without_api_keys_every_request_is_answered_and_a_malformed_secret_stops_the_load(
    compiled_embedder, neuron_stub, monkeypatch
):
    monkeypatch.delenv(neuron_handler.API_KEYS_VARIABLE, raising=False)
    context = Context(compiled_embedder)
    neuron_handler.handle(None, context)
    answers = neuron_handler.handle([{"body": {"inputs": "a"}}], context)
    assert answers is not None and "embedding" in answers[0]
    monkeypatch.setenv(neuron_handler.API_KEYS_VARIABLE, "[]")
    with pytest.raises(RuntimeError, match="JSON object of key names"):
        neuron_handler.handle(None, Context(compiled_embedder))


def test_the_contract_injects_the_variable_the_handler_reads():
    from gpu_inference_constructs.servers import neuron as neuron_server

    assert neuron_server.API_KEYS_VARIABLE == neuron_handler.API_KEYS_VARIABLE
