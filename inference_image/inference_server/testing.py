"""Test helpers shipped with the package, for tests and benchmarks: a tiny BERT built locally (no hub download)."""

from __future__ import annotations

import os
import string
import time
from pathlib import Path
from typing import Any

from .handlers import Encoded
from .handlers.hf import TextClassificationHandler

_WORDS = ("the a an and or not is was are be to of in on it this that good bad great terrible service food was "
          "very quick slow friendly rude hello world model test probe readiness warm up text first second").split()
LABELS = ("negative", "positive")


def build_tiny_bert(dest_dir: str | Path, task: str = "text-classification", *, seed: int = 0) -> Path:
    """Save a randomly initialised 2-layer BERT (hidden size 32) and its WordPiece tokenizer to dest_dir, as a
    Hugging Face directory: config.json, model.safetensors, tokenizer files."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizerFast

    if task not in ("text-classification", "text-embedding"):
        raise ValueError(f"unknown task {task!r}")
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    pieces = string.ascii_lowercase + string.digits + string.punctuation
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(_WORDS), *pieces,
             *(f"##{c}" for c in string.ascii_lowercase + string.digits)]
    vocab_file = dest / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(vocab_file), do_lower_case=True, model_max_length=512)
    tokenizer.save_pretrained(dest)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, pad_token_id=0,
                        id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)})
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config) if task == "text-classification" else BertModel(config)
    model.save_pretrained(dest)
    return dest


class SlowClassificationHandler(TextClassificationHandler):
    """The tiny BERT's classifier with a pause in every batch (SLOW_HANDLER_DELAY_S, default 0.05 s), so tests can
    catch requests in flight."""

    def forward(self, batch: list[Encoded], batch_size: int, seq_len: int) -> Any:
        time.sleep(float(os.environ.get("SLOW_HANDLER_DELAY_S", "0.05")))
        return super().forward(batch, batch_size, seq_len)


class LocalModel:
    """The model side in threads of this process, linked to one in-process worker service the same way a
    model process is (a socket pair and two shared-memory rings): for tests and notebooks."""

    def __init__(self, settings) -> None:
        from .client import ModelClient
        from .ipc import LinkEnds, StatusPage
        from .model_runner import ModelRunner
        from .service import ModelService

        self.status = StatusPage.create()
        self.exits: list[int] = []
        self.runner = ModelRunner(settings, self.status, on_exit=self.exits.append)
        self.link = LinkEnds()
        self.runner.add_link(self.link.model_channel(), "local")
        self.service = ModelService(settings, ModelClient(self.link.worker_channel(), self.status))
        self.service.local_model = self

    def start(self):
        self.runner.start()
        self.service.start()
        return self.service

    def stop(self) -> None:
        self.service.stop()
        self.service.client.close()
        self.runner.stop()


def local_service(settings):
    """A worker's ModelService with its model side running in this process (see LocalModel); not started."""
    return LocalModel(settings).service
