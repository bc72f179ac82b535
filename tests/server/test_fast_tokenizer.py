"""The HTTP workers tokenize with transformers' own fast tokenizer saved by the model process and loaded with the
`tokenizers` library alone, only where the probes encode alike; the rest load transformers' tokenizer as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bench.models import minilm_dir
from bench.texts import make_texts
from inference_server.handlers.base import LoadContext
from inference_server.handlers.fast_tokenizer import FastTokenizer, probe_texts, worker_tokenizer
from inference_server.handlers.hf import TextClassificationHandler, TextEmbeddingHandler

pytestmark = pytest.mark.slow  # loads real tokenizers and MiniLM's


@pytest.fixture(params=["tiny_classifier_dir", "tiny_embedder_dir", "minilm"])
def model_dir(request) -> Path:
    return minilm_dir() if request.param == "minilm" else request.getfixturevalue(request.param)


def auto_tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)


def context(model_dir: Path, shared: dict | None = None, remote_code: bool = False) -> LoadContext:
    return LoadContext(model_dir, "cpu", None, 64, False, remote_code, None, None, shared=shared)


@pytest.mark.parametrize("max_length", [16, 256])
def test_the_saved_tokenizer_encodes_the_probes_and_realistic_texts_as_transformers_does(model_dir, max_length, tmp_path):
    tokenizer = auto_tokenizer(model_dir)
    shared = worker_tokenizer(tokenizer, max_length, str(tmp_path))
    assert shared is not None and shared["truncation_side"] == "right"
    assert Path(shared["file"]).parent == tmp_path
    texts = probe_texts(max_length) + make_texts(200)
    expected = tokenizer(texts, truncation=True, max_length=max_length, padding=False)["input_ids"]
    assert FastTokenizer(Path(shared["file"]), max_length).encode(texts) == expected
    assert any(len(ids) == max_length for ids in expected)  # the probes reach the truncation


@pytest.mark.parametrize(("handler_class", "fixture"), [(TextClassificationHandler, "tiny_classifier_dir"),
                                                         (TextEmbeddingHandler, "tiny_embedder_dir")])
def test_a_worker_loaded_from_what_the_model_process_shares_answers_as_one_that_loads_transformers(
        request, handler_class, fixture):
    directory = request.getfixturevalue(fixture)
    model_side = handler_class()
    assert model_side.shares_preprocessing()
    model_side.load_preprocessing(context(directory))
    shared = json.loads(json.dumps(model_side.shared_preprocessing()))  # as it crosses the link
    worker = handler_class()
    worker.load_preprocessing(context(directory, shared))
    assert not hasattr(worker, "tokenizer") and not hasattr(worker, "config")  # nothing of transformers
    texts = [*probe_texts(64), *make_texts(50)]
    for ours, theirs in zip(worker.preprocess(texts), model_side.preprocess(texts), strict=True):
        assert ours.length == theirs.length and np.array_equal(ours.data["input_ids"], theirs.data["input_ids"])
        assert ours.data["input_ids"].dtype == theirs.data["input_ids"].dtype
    assert worker.preprocess([]) == model_side.preprocess([]) == []
    assert worker.max_length == model_side.max_length == 64
    assert worker.signature() == model_side.signature()
    outputs = np.random.default_rng(0).random((3, model_side.signature().outputs[-1].shape[-1]), dtype=np.float32)
    assert repr(worker.postprocess(outputs, 3)) == repr(model_side.postprocess(outputs, 3))


def test_the_workers_get_the_tokenizer_as_transformers_configured_it_not_as_its_file_says(tiny_classifier_dir, tmp_path):
    """tokenizer.json without lowercasing where tokenizer_config.json says do_lower_case: transformers lowercases,
    and so does the tokenizer the workers get (the file alone would not)."""
    directory = Path(shutil.copytree(tiny_classifier_dir, tmp_path / "model"))
    raw = json.loads((directory / "tokenizer.json").read_text())
    raw["normalizer"]["lowercase"] = False
    (directory / "tokenizer.json").write_text(json.dumps(raw))
    tokenizer = auto_tokenizer(directory)
    assert tokenizer(["HELLO"])["input_ids"] != FastTokenizer(directory / "tokenizer.json", 64).encode(["HELLO"])
    shared = worker_tokenizer(tokenizer, 64, str(tmp_path))
    assert shared is not None
    assert FastTokenizer(Path(shared["file"]), 64).encode(["HELLO"]) == tokenizer(["HELLO"])["input_ids"]


class OffByOne:
    """transformers' tokenizer, but the last probe's last id is off by one: a tokenizer whose Python code encodes
    what its backend does not."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.is_fast, self.backend_tokenizer = tokenizer, True, tokenizer.backend_tokenizer

    def __call__(self, texts, **kwargs):
        ids = self.tokenizer(texts, **kwargs)["input_ids"]
        return {"input_ids": [*ids[:-1], [*ids[-1][:-1], ids[-1][-1] + 1]]}


def test_a_single_differing_token_id_keeps_transformers_and_leaves_no_file(tiny_classifier_dir, tmp_path):
    tokenizer = auto_tokenizer(tiny_classifier_dir)
    assert worker_tokenizer(OffByOne(tokenizer), 64, str(tmp_path)) is None
    assert list(tmp_path.iterdir()) == []
    slow = type("Slow", (), {"is_fast": False, "backend_tokenizer": None})()
    assert worker_tokenizer(slow, 64, str(tmp_path)) is None


def test_artifact_code_and_subclasses_keep_transformers_in_the_workers(tiny_classifier_dir):
    remote = TextClassificationHandler()
    remote.load_preprocessing(context(tiny_classifier_dir, remote_code=True))
    assert remote.shared_preprocessing() is None  # its tokenizer may encode in Python what no probe shows

    class TeamHandler(TextClassificationHandler):  # may read self.tokenizer in its own preprocess
        pass

    team = TeamHandler()
    assert not team.shares_preprocessing()
    team.load_preprocessing(context(tiny_classifier_dir))
    assert team.shared_preprocessing() is None


def test_a_worker_whose_shared_tokenizer_will_not_load_loads_transformers(tiny_classifier_dir, tmp_path):
    shared = {"tokenizer": {"file": str(tmp_path / "gone.json"), "truncation_side": "right"}, "max_length": 64,
              "labels": ["x"]}
    worker = TextClassificationHandler()
    worker.load_preprocessing(context(tiny_classifier_dir, shared))
    assert hasattr(worker, "tokenizer") and worker.labels != ["x"]
