"""Test helpers shipped with the package, for tests and benchmarks: a tiny BERT, a tiny torch.export model and a
tiny torch.export image classifier, all built locally (no hub download)."""

from __future__ import annotations

import os
import string
import time
from pathlib import Path
from typing import Any

from .handlers import LoadContext
from .handlers.batch import Batch
from .handlers.hf import TextClassificationHandler

_WORDS = (
    "the a an and or not is was are be to of in on it this that good bad great terrible service food was "
    "very quick slow friendly rude hello world model test probe readiness warm up text first second"
).split()
LABELS = ("negative", "positive")


def build_tiny_bert(dest_dir: str | Path, task: str = "text-classification", *, seed: int = 0) -> Path:
    """Save a randomly initialised 2-layer BERT (hidden size 32) and its WordPiece tokenizer to dest_dir, as a
    Hugging Face directory: config.json, model.safetensors, tokenizer files."""
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertModel,
        BertTokenizerFast,
    )

    if task not in ("text-classification", "text-embedding"):
        raise ValueError(f"unknown task {task!r}")
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    pieces = string.ascii_lowercase + string.digits + string.punctuation
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *dict.fromkeys(_WORDS),
        *pieces,
        *(f"##{c}" for c in string.ascii_lowercase + string.digits),
    ]
    vocab_file = dest / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(vocab_file), do_lower_case=True, model_max_length=512)
    tokenizer.save_pretrained(dest)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        pad_token_id=0,
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
    )
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config) if task == "text-classification" else BertModel(config)
    model.save_pretrained(dest)
    return dest


EXPORT_MODEL_JSON = {
    "format": 1,
    "inputs": [
        {"name": "features", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "counts", "datatype": "INT64", "shape": [-1, 2]},
    ],
    "outputs": [
        {"name": "probabilities", "datatype": "FP32", "shape": [-1, 3]},
        {"name": "total", "datatype": "FP32", "shape": [-1]},
    ],
    "fp16_safe": True,
}
IMAGE_LABELS = ("cat", "dog", "bird", "fish")


def _tiny_export_module():
    import torch

    class TinyTabular(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, features, counts):
            logits = self.linear(features) + counts.sum(dim=1, keepdim=True).float() * 0.1
            return torch.softmax(logits, dim=-1), features.sum(dim=1)

    return TinyTabular()


def _tiny_image_module(classes: int):
    import torch

    class TinyConvNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, kernel_size=3, padding=1)
            self.head = torch.nn.Linear(8, classes)

        def forward(self, pixel_values):
            return self.head(torch.relu(self.conv(pixel_values)).mean(dim=(2, 3)))

    return TinyConvNet()


def _export(module, example: tuple, names: list[str], dest: Path, declaration: dict[str, Any]) -> Path:
    import orjson
    import torch

    batch = torch.export.Dim("batch", min=1, max=4096)
    program = torch.export.export(module.eval(), example, dynamic_shapes={name: {0: batch} for name in names})
    dest.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, dest / "model.pt2")
    (dest / "model.json").write_bytes(orjson.dumps(declaration, option=orjson.OPT_INDENT_2))
    torch.save(module.state_dict(), dest.parent / f"{dest.name}.reference-weights.pt")  # for tests: the eager model
    return dest


def build_tiny_export_model(dest_dir: str | Path, *, seed: int = 0) -> Path:
    """A torch-export artifact: model.pt2 (two inputs, two outputs, dynamic batch) and its model.json."""
    import torch

    torch.manual_seed(seed)
    example = (torch.randn(2, 4), torch.ones(2, 2, dtype=torch.int64))
    return _export(_tiny_export_module(), example, ["features", "counts"], Path(dest_dir), EXPORT_MODEL_JSON)


def image_model_json(crop: int = 16, resize: int = 20, labels: tuple[str, ...] = IMAGE_LABELS, **image: Any) -> dict:
    return {
        "format": 1,
        "inputs": [{"name": "pixel_values", "datatype": "FP32", "shape": [-1, 3, crop, crop]}],
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, len(labels)]}],
        "fp16_safe": True,
        "image": {
            "resize": resize,
            "crop": crop,
            "mean": [0.485, 0.456, 0.406],
            "std": [0.229, 0.224, 0.225],
            "labels": list(labels),
            "top_k": 2,
            **image,
        },
    }


def build_tiny_image_classifier(
    dest_dir: str | Path, *, seed: int = 0, crop: int = 16, resize: int = 20, **image: Any
) -> Path:
    """An image-classification artifact: a small convolutional classifier over four labels, exported."""
    import torch

    torch.manual_seed(seed)
    declaration = image_model_json(crop, resize, **image)
    return _export(
        _tiny_image_module(len(IMAGE_LABELS)),
        (torch.randn(2, 3, crop, crop),),
        ["pixel_values"],
        Path(dest_dir),
        declaration,
    )


def reference_module(model_dir: str | Path):
    """The eager PyTorch module a build_tiny_* artifact was exported from, for comparing results in tests."""
    import torch

    model_dir = Path(model_dir)
    declaration = (model_dir / "model.json").read_text()
    module = _tiny_image_module(len(IMAGE_LABELS)) if '"image"' in declaration else _tiny_export_module()
    weights = torch.load(model_dir.parent / f"{model_dir.name}.reference-weights.pt", weights_only=True)
    module.load_state_dict(weights)
    return module.eval()


class SlowClassificationHandler(TextClassificationHandler):
    """The tiny BERT's classifier with a pause in every batch (SLOW_HANDLER_DELAY_S, default 0.05 s), so tests can
    catch requests in flight; and in a pool, the load of the model named SLOW_HANDLER_LOAD_MODEL takes
    SLOW_HANDLER_LOAD_S longer (a load in progress when the server stops)."""

    def load(self, ctx: LoadContext) -> None:
        slow = os.environ.get("SLOW_HANDLER_LOAD_MODEL")
        if slow and ctx.manifest is not None and ctx.manifest.model_name == slow:
            time.sleep(float(os.environ.get("SLOW_HANDLER_LOAD_S", "0")))
        super().load(ctx)

    def forward(self, batch: Batch) -> Any:
        time.sleep(float(os.environ.get("SLOW_HANDLER_DELAY_S", "0.05")))
        return super().forward(batch)


class LocalModel:
    """The model side in threads of this process, linked to one in-process worker service the same way a
    model process is (a socket pair and two shared-memory rings): for tests and notebooks."""

    def __init__(self, settings) -> None:
        from .engine.model_runner import ModelRunner
        from .front.client import ModelClient
        from .front.service import WorkerService
        from .ipc import LinkEnds, StatusPage

        self.status = StatusPage.create()
        self.exits: list[int] = []
        self.runner = ModelRunner(settings, self.status, on_exit=self.exits.append)
        link = LinkEnds()
        self.runner.add_link(link.model_channel(), "local")
        self.service = WorkerService(settings, ModelClient(link.worker_channel(), self.status))
        link.close_ring_fds()
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
    """A worker's WorkerService with its model side running in this process (see LocalModel); not started."""
    return LocalModel(settings).service
