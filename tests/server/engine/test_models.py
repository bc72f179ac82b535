"""Real models through the whole service: the tiny BERT built by a fixture, and all-MiniLM-L6-v2 from PyPI."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ..conftest import infer, make_settings, model_handler, started

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A man is riding a horse.",
    "The new movie is awesome and everyone should see it twice, or maybe three times. " * 3,
]


def embed(service, texts: list[str]) -> np.ndarray:
    predictions, _ = infer(service, texts)
    return np.stack([np.asarray(p["embedding"]) for p in predictions])


@pytest.fixture(scope="module")
def embedder_service(tiny_embedder_dir):
    service = started(make_settings(tiny_embedder_dir, model_task="text-embedding"))
    yield service
    service.local_model.stop()


def test_embeddings_are_unit_vectors_and_do_not_depend_on_batch_or_padding(embedder_service):
    alone = embed(embedder_service, [SENTENCES[0]])
    together = embed(embedder_service, SENTENCES)
    assert together.shape == (4, 32)
    assert np.linalg.norm(together, axis=1) == pytest.approx(np.ones(4), abs=1e-5)
    # In a batch the short sentence is padded to the long one's bucket: the attention mask must hide that.
    np.testing.assert_allclose(alone[0], together[0], atol=1e-5)
    assert not np.allclose(together[0], together[2])


def test_warmup_inputs_have_exactly_the_bucket_length(embedder_service):
    handler = model_handler(embedder_service)
    for length in embedder_service.local_model.runner.batcher.lengths:
        assert handler.warmup_input(length).length == length


def test_a_ready_server_answers_at_shapes_it_has_not_warmed_with_the_same_embeddings(
    tiny_embedder_dir, embedder_service, monkeypatch
):
    from inference_server.engine import batcher as batcher_module

    monkeypatch.setattr(batcher_module, "SHORT_FORWARD_S", 0.0)  # no batch past 1 counts as short: only batch 1 warms
    cold = started(make_settings(tiny_embedder_dir, model_task="text-embedding"))
    try:
        batcher = cold.local_model.runner.batcher
        assert batcher.ready.is_set() and not batcher._cold
        assert batcher.unwarmed == [shape for shape in batcher.warmup_shapes() if shape[0] > 1]
        np.testing.assert_allclose(embed(cold, SENTENCES), embed(embedder_service, SENTENCES), atol=1e-5)
        np.testing.assert_allclose(embed(cold, SENTENCES[:1])[0], embed(cold, SENTENCES)[0], atol=1e-5)
    finally:
        cold.local_model.stop()


def test_long_inputs_are_truncated_to_max_sequence_length(embedder_service):
    _, result = infer(embedder_service, ["word " * 1000])
    assert result.input_tokens == 64


def test_minilm_matches_sentence_transformers(minilm_service, minilm_dir):
    from sentence_transformers import SentenceTransformer

    ours = embed(minilm_service, SENTENCES)
    reference = SentenceTransformer(str(minilm_dir), device="cpu").encode(SENTENCES, normalize_embeddings=True)
    assert ours.shape == (4, 384)
    np.testing.assert_allclose(ours, reference, atol=2e-4)
    similarity = ours @ ours.T
    assert similarity[0, 1] > similarity[0, 2] + 0.2


ARTIFACT_HANDLER = """
from tests.server.fakes import EchoHandler


class ModelHandler(EchoHandler):
    pass
"""


@pytest.mark.parametrize("allowed", [False, True])
def test_a_handler_py_in_the_model_runs_only_when_artifact_code_is_allowed(tiny_classifier_dir, tmp_path, allowed):
    model = tmp_path / "model"
    shutil.copytree(tiny_classifier_dir, model)
    (model / "handler.py").write_text(ARTIFACT_HANDLER)
    service = started(make_settings(model, allow_artifact_code=allowed))
    try:
        # Both processes use the artifact's class: the model side for forward, the worker for pre/postprocess.
        for handler in (type(model_handler(service)), type(service.handler)):
            assert (handler.__name__ == "ModelHandler") is allowed
        assert (service.prediction_model is None) is allowed  # the schema cannot know an artifact's predictions
    finally:
        service.local_model.stop()


def test_an_in_process_model_loads_when_nothing_imported_transformers_before(tiny_classifier_dir):
    """The model side and the worker load from transformers in two threads of one process (testing.LocalModel):
    the first import from transformers must not race (it failed "cannot import name 'AutoConfig'"). A subclass of the
    built-in handler keeps the worker on transformers' tokenizer (handlers/fast_tokenizer.py), so the worker's
    import meets the model side's."""
    import subprocess
    import sys

    script = f"""
import sys, time
from inference_server.settings import Settings
from inference_server.testing import LocalModel
assert "transformers" not in sys.modules
service = LocalModel(Settings(model_name="tiny", model_version="1", model_uri={str(tiny_classifier_dir)!r},
                              model_task="text-classification", max_sequence_length=32,
                              model_handler="inference_server.testing:SlowClassificationHandler",
                              metrics_interval_s=3600.0, ready_probe_interval_s=60.0)).start()
deadline = time.monotonic() + 120
while service.readiness() is not None and service.load_error is None and time.monotonic() < deadline:
    time.sleep(0.05)
print(service.readiness(), repr(service.load_error), hasattr(service.handler, "tokenizer"))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stdout.strip() == "None None True", done.stdout + done.stderr[-3000:]
