"""The HTTP workers tokenize with transformers' own fast tokenizer serialised by the model process and rebuilt with
the `tokenizers` library alone, only where the probes encode alike; the rest load transformers' tokenizer as before."""

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


def encoder(tokenizer, max_length: int):
    """The built-in handlers' encoding with transformers (HuggingFaceHandler._encode_with_transformers)."""
    return lambda texts: tokenizer(texts, truncation=True, max_length=max_length, padding=False)["input_ids"]


def context(model_dir: Path, shared: dict | None = None, remote_code: bool = False) -> LoadContext:
    return LoadContext(model_dir, "cpu", None, 64, False, remote_code, None, None, shared=shared)


@pytest.mark.parametrize("max_length", [16, 256])
def test_the_shared_tokenizer_encodes_the_probes_and_realistic_texts_as_transformers_does(model_dir, max_length):
    tokenizer = auto_tokenizer(model_dir)
    shared = worker_tokenizer(tokenizer, max_length, encoder(tokenizer, max_length))
    assert shared is not None and shared["truncation_side"] == "right"
    texts = probe_texts(max_length, ["[CLS]", "[MASK]"]) + make_texts(200)
    expected = tokenizer(texts, truncation=True, max_length=max_length, padding=False)["input_ids"]
    assert FastTokenizer(shared["json"], max_length).encode(texts) == expected
    assert any(len(ids) == max_length for ids in expected)  # the probes reach the truncation


def test_a_tokenizer_that_truncates_on_the_left_is_shared_truncating_on_the_left(tiny_classifier_dir, tmp_path):
    directory = Path(shutil.copytree(tiny_classifier_dir, tmp_path / "model"))
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, "truncation_side": "left"}))
    tokenizer = auto_tokenizer(directory)
    shared = worker_tokenizer(tokenizer, 16, encoder(tokenizer, 16))
    assert shared is not None and shared["truncation_side"] == "left"
    long_text = " ".join(f"word{i}" for i in range(40))
    ids = FastTokenizer(shared["json"], 16, "left").encode([long_text])
    assert ids == tokenizer([long_text], truncation=True, max_length=16)["input_ids"]
    assert ids != FastTokenizer(shared["json"], 16, "right").encode([long_text])


@pytest.mark.parametrize(
    ("handler_class", "fixture"),
    [(TextClassificationHandler, "tiny_classifier_dir"), (TextEmbeddingHandler, "tiny_embedder_dir")],
)
def test_a_worker_loaded_from_what_the_model_process_shares_answers_as_one_that_loads_transformers(
    request, handler_class, fixture
):
    directory = request.getfixturevalue(fixture)
    model_side = handler_class()
    assert model_side.shares_preprocessing(context(directory))
    model_side.load_preprocessing(context(directory))
    shared = json.loads(json.dumps(model_side.shared_preprocessing()))  # as it crosses the link
    worker = handler_class()
    worker.load_preprocessing(context(directory, shared))
    assert not hasattr(worker, "tokenizer") and not hasattr(worker, "config")  # nothing of transformers
    assert worker._encode.__self__.__class__ is FastTokenizer
    texts = [*probe_texts(64), *make_texts(50)]
    for ours, theirs in zip(worker.preprocess(texts), model_side.preprocess(texts), strict=True):
        assert ours.length == theirs.length and np.array_equal(ours.data["input_ids"], theirs.data["input_ids"])
        assert ours.data["input_ids"].dtype == theirs.data["input_ids"].dtype
    assert worker.preprocess([]) == model_side.preprocess([]) == []
    assert worker.max_length == model_side.max_length == 64
    assert worker.signature() == model_side.signature()
    outputs = np.random.default_rng(0).random((3, model_side.signature().outputs[-1].shape[-1]), dtype=np.float32)
    assert repr(worker.postprocess(outputs, 3)) == repr(model_side.postprocess(outputs, 3))


def test_the_workers_get_the_tokenizer_as_transformers_configured_it_not_as_its_file_says(
    tiny_classifier_dir, tmp_path
):
    """tokenizer.json without lowercasing where tokenizer_config.json says do_lower_case: transformers lowercases,
    and so does the tokenizer the workers get (the file alone would not)."""
    directory = Path(shutil.copytree(tiny_classifier_dir, tmp_path / "model"))
    raw = json.loads((directory / "tokenizer.json").read_text())
    raw["normalizer"]["lowercase"] = False
    (directory / "tokenizer.json").write_text(json.dumps(raw))
    tokenizer = auto_tokenizer(directory)
    assert tokenizer(["HELLO"])["input_ids"] != FastTokenizer(json.dumps(raw), 64).encode(["HELLO"])
    shared = worker_tokenizer(tokenizer, 64, encoder(tokenizer, 64))
    assert shared is not None
    assert FastTokenizer(shared["json"], 64).encode(["HELLO"]) == tokenizer(["HELLO"])["input_ids"]


def off_by_one(encode):
    """``encode``, but the last probe's last id is off by one: a tokenizer whose Python code encodes what its backend
    does not."""

    def encoded(texts):
        ids = encode(texts)
        return [*ids[:-1], [*ids[-1][:-1], ids[-1][-1] + 1]]

    return encoded


def reasons(caplog) -> list[str]:
    return [
        record.reason for record in caplog.records if record.getMessage() == "the workers load transformers' tokenizer"
    ]


def test_each_tokenizer_that_cannot_stand_in_keeps_transformers_and_says_why(tiny_classifier_dir, caplog):
    caplog.set_level("INFO", logger="inference_server.handlers.fast_tokenizer")
    tokenizer = auto_tokenizer(tiny_classifier_dir)
    encode = encoder(tokenizer, 64)
    assert worker_tokenizer(tokenizer, 64, off_by_one(encode)) is None
    assert worker_tokenizer(type("Slow", (), {"is_fast": False, "backend_tokenizer": None})(), 64, encode) is None
    tokenizer.split_special_tokens = True
    assert worker_tokenizer(tokenizer, 64, encode) is None
    assert reasons(caplog) == [
        "a probe text encodes to other ids",
        "not a fast tokenizer",
        "it splits special tokens (transformers sets that on the backend for every call)",
    ]


def test_artifact_code_and_subclasses_keep_transformers_in_the_workers(tiny_classifier_dir):
    remote = TextClassificationHandler()  # its tokenizer may encode in Python what no probe shows
    assert remote.shares_preprocessing(context(tiny_classifier_dir))
    assert not remote.shares_preprocessing(context(tiny_classifier_dir, remote_code=True))

    class TeamHandler(TextClassificationHandler):  # may read self.tokenizer in its own preprocess
        pass

    assert not TeamHandler().shares_preprocessing(context(tiny_classifier_dir))


def test_a_worker_whose_shared_preprocessing_will_not_load_loads_transformers(tiny_classifier_dir):
    model_side = TextClassificationHandler()
    model_side.load_preprocessing(context(tiny_classifier_dir))
    good = model_side.shared_preprocessing()
    assert good is not None
    broken_tokenizer = {**good, "tokenizer": {"json": "{not a tokenizer", "truncation_side": "right"}, "labels": ["x"]}
    without_labels = {key: value for key, value in good.items() if key != "labels"}
    for shared in (broken_tokenizer, without_labels):
        worker = TextClassificationHandler()
        worker.load_preprocessing(context(tiny_classifier_dir, shared))
        assert hasattr(worker, "tokenizer") and worker.labels == model_side.labels != ["x"]
