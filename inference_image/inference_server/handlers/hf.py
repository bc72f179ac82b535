"""Built-in handlers for Hugging Face directories (config.json, safetensors weights, tokenizer files)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from ..inputs import Encoded, InputError
from ..tensor_spec import Signature, TensorSpec
from .base import Handler, LoadContext
from .batch import Batch
from .checkpoint_check import check_checkpoint
from .compiled import CompiledForward, compile_per_shape
from .fast_tokenizer import FastTokenizer, worker_tokenizer
from .runtimes import ONNX_FILES, OnnxForward

if TYPE_CHECKING:  # the HTTP workers import this module without torch; the model process imports it in functions
    import torch

TEXT_INPUT = TensorSpec("text", "BYTES", (-1,))


class ClassificationPrediction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str
    score: float
    scores: dict[str, float]


class EmbeddingPrediction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    embedding: list[float]


# transformers' lazy module fails ("cannot import name ...") when two threads of one process first import from it
# at once: in-process (testing.LocalModel) a worker that loads transformers' tokenizer may do so while the model side
# imports its model class.
_TRANSFORMERS_LOCK = threading.Lock()
HF_TASKS = ("text-classification", "text-embedding")


class HuggingFaceHandler(Handler):
    task: ClassVar[str] = ""  # the built-in task this handler serves
    sequence_inputs = ("input_ids",)
    _onnx_file: Path | None = None  # set by load() for the onnx and int8 runtimes

    def _load_model(self, ctx: LoadContext) -> torch.nn.Module:
        raise NotImplementedError

    def _from_pretrained(self, auto_class: Any, ctx: LoadContext) -> torch.nn.Module:
        """The weights, refused (model_check.ModelCheckError) where the checkpoint lacks what the task needs."""
        model, info = auto_class.from_pretrained(ctx.model_dir, output_loading_info=True, **self._auto_kwargs(ctx))
        check_checkpoint(self.task, ctx.model_dir, model.config, info["missing_keys"], model.base_model_prefix)
        return model

    def _head(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        """Model outputs to the float32 tensor that leaves the device."""
        raise NotImplementedError

    def load_preprocessing(self, ctx: LoadContext) -> None:
        if ctx.shared is not None and self._load_shared(ctx):
            return
        with _TRANSFORMERS_LOCK:
            from transformers import AutoConfig, AutoTokenizer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            hf_logging.disable_default_handler()  # its records go to the root logger's JSON lines instead
            hf_logging.enable_propagation()
            self.tokenizer = AutoTokenizer.from_pretrained(
                ctx.model_dir, local_files_only=True, trust_remote_code=ctx.allow_artifact_code
            )
            self.config = AutoConfig.from_pretrained(
                ctx.model_dir, local_files_only=True, trust_remote_code=ctx.allow_artifact_code
            )
        positions = getattr(self.config, "max_position_embeddings", None) or ctx.max_sequence_length
        self.max_length = min(ctx.max_sequence_length, positions)
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.pad_values = {"input_ids": self.pad_id}
        self.use_token_types = "token_type_ids" in self.tokenizer.model_input_names
        self._encode = self._encode_with_transformers
        self._load_labels(self.config)

    def _load_shared(self, ctx: LoadContext) -> bool:
        """An HTTP worker: the tokenizer and config facts the model process serialised and checked
        (shared_preprocessing); False, to load transformers' tokenizer instead, where they cannot be read."""
        shared = ctx.shared or {}
        try:
            self.max_length = int(shared["max_length"])
            tokenizer = shared["tokenizer"]
            self._encode = FastTokenizer(tokenizer["json"], self.max_length, tokenizer["truncation_side"]).encode
            self._read_shared(shared)
        except Exception as exc:
            logging.getLogger(__name__).warning(
                "what the model process shared did not load; loading transformers'", extra={"error": repr(exc)}
            )
            return False
        return True

    def shares_preprocessing(self, ctx: LoadContext) -> bool:
        # The built-in handlers only (a subclass may read the tokenizer or the config, which a worker then lacks),
        # and not with the artifact's own code (its tokenizer may encode in Python what no probe shows).
        return type(self) in (TextClassificationHandler, TextEmbeddingHandler) and not ctx.allow_artifact_code

    def shared_preprocessing(self) -> dict[str, Any] | None:
        """transformers' tokenizer serialised for the workers (fast_tokenizer.py) and what they read of the model's
        config, so that no worker imports transformers or torch; None where the tokenizer cannot be shared."""
        max_length = self.max_length
        tokenizer = worker_tokenizer(self.tokenizer, max_length, self._encode_with_transformers) if max_length else None
        if tokenizer is None:
            return None
        return {"tokenizer": tokenizer, "max_length": max_length, **self._shared_config()}

    def _load_labels(self, config: Any) -> None:
        pass

    def _shared_config(self) -> dict[str, Any]:
        """What a worker reads of the model's config (the labels, the embedding size), as JSON."""
        return {}

    def _read_shared(self, shared: dict[str, Any]) -> None:
        """What _shared_config wrote, in a worker."""

    def _encode_with_transformers(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(
            texts,
            truncation=True,
            max_length=self.max_length,
            padding=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]

    def load(self, ctx: LoadContext) -> None:
        import torch  # model process only: HTTP workers never import it

        if not hasattr(self, "tokenizer"):
            self.load_preprocessing(ctx)
        self.device = ctx.device
        self._onnx_file = ctx.model_dir / ONNX_FILES[ctx.runtime] if ctx.runtime in ONNX_FILES else None
        if self._onnx_file is not None:  # ONNX Runtime on the file publish converted and gated; no torch weights
            check_checkpoint(self.task, ctx.model_dir, self.config)
            self._run = OnnxForward(self._onnx_file, ctx.device.type, torch.get_num_threads())
            return
        self.model = self._load_model(ctx).to(ctx.device).eval()
        self._run = self._forward_tensors
        if ctx.compile:
            cuda = ctx.device.type == "cuda"
            self._run = self.compiled_forward = CompiledForward(
                self._forward_tensors,
                lambda: compile_per_shape(self._forward_tensors, "reduce-overhead" if cuda else "default"),
                cuda_graphs=cuda,
            )

    def weights_bytes(self) -> int:
        return self._onnx_file.stat().st_size if self._onnx_file is not None else super().weights_bytes()

    def move_to(self, device: Any) -> bool:
        """ONNX Runtime's session and a compiled forward are bound to their device: those are loaded again instead."""
        if self._onnx_file is not None or self.compiled_forward is not None:
            return False
        return super().move_to(device)

    def activation_bytes(self, batch_size: int, seq_len: int) -> int | None:
        """An encoder's peak in inference: its layers run one after another and each frees the one before, so the
        peak is one layer's: the layer's input, Q, K, V, the attention's context and output (hidden size each) or its
        feed-forward's intermediate and activation, the attention's scores and probabilities and the mask (heads x
        length x length), at the model's dtype; plus the int64 inputs and the float32 head's copy of the output."""
        config = self.config
        hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
        if not hidden or not heads:
            return None
        intermediate = getattr(config, "intermediate_size", None) or 4 * hidden
        width = 4 if self._onnx_file is not None else next(self.model.parameters()).element_size()
        per_token = (6 * hidden + 2 * intermediate) * width + 3 * 8 + 4 * hidden
        return batch_size * (seq_len * per_token + (2 * heads + 1) * seq_len * seq_len * width)

    def _auto_kwargs(self, ctx: LoadContext) -> dict[str, Any]:
        # use_safetensors: never unpickle weights (torch.load) from an artifact.
        return {
            "dtype": ctx.dtype,
            "local_files_only": True,
            "use_safetensors": True,
            "trust_remote_code": ctx.allow_artifact_code,
        }

    def preprocess(self, texts: list[str]) -> list[Encoded]:
        if not texts:  # transformers' tokenizer raises on none, `tokenizers` returns none: the same for both
            return []
        try:
            ids = self._encode(texts)
        except Exception as exc:
            raise InputError(f"cannot tokenize: {exc}") from exc
        return [Encoded(len(row), {"input_ids": np.asarray(row, dtype=np.int32)}) for row in ids]

    def warmup_input(self, seq_len: int) -> Encoded:
        ids = self.preprocess(["warm up"])[0].data["input_ids"].tolist()
        filler = self.tokenizer.unk_token_id if self.tokenizer.unk_token_id is not None else self.pad_id
        ids = (ids[:-1] + [filler] * seq_len)[: seq_len - 1] + ids[-1:]
        return Encoded(len(ids), {"input_ids": np.asarray(ids, dtype=np.int32)})

    def forward(self, batch: Batch) -> np.ndarray:
        import torch

        input_ids = batch.arrays["input_ids"].astype(np.int64)
        attention_mask = (np.arange(batch.seq_len) < batch.lengths[:, None]).astype(np.int64)
        attention_mask[batch.count :, 0] = 1  # padding rows attend to one token, so they stay NaN-free
        tensors = [torch.from_numpy(input_ids), torch.from_numpy(attention_mask)]
        if self.use_token_types:
            tensors.append(torch.zeros_like(tensors[0]))
        tensors = [t.to(self.device, non_blocking=True) for t in tensors]
        with torch.inference_mode():
            # .cpu() copies the result out of the CUDA graph's memory before the next replay.
            return self._run(*tensors).cpu().numpy()

    def _forward_tensors(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        return self._head(self.model(**kwargs), attention_mask)


class TextClassificationHandler(HuggingFaceHandler):
    prediction_model = ClassificationPrediction
    task = "text-classification"

    def _load_model(self, ctx: LoadContext) -> torch.nn.Module:
        with _TRANSFORMERS_LOCK:
            from transformers import AutoModelForSequenceClassification

        if not self.config.id2label:  # a head of no labels cannot take a trained head's weights: refuse before them
            check_checkpoint(self.task, ctx.model_dir, self.config)
        model = self._from_pretrained(AutoModelForSequenceClassification, ctx)
        self._load_labels(model.config)
        return model

    def _load_labels(self, config: Any) -> None:
        labels = config.id2label
        self.labels = [str(labels.get(i, f"LABEL_{i}")) for i in range(config.num_labels)]
        self.multi_label = config.problem_type == "multi_label_classification"

    def _shared_config(self) -> dict[str, Any]:
        return {"labels": self.labels}

    def _read_shared(self, shared: dict[str, Any]) -> None:
        self.labels = [str(label) for label in shared["labels"]]

    def _head(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        import torch

        logits = outputs.logits.float()
        return torch.sigmoid(logits) if self.multi_label else torch.softmax(logits, dim=-1)

    def signature(self) -> Signature:
        return Signature(
            (TEXT_INPUT,),
            (
                TensorSpec("label", "BYTES", (-1,)),
                TensorSpec("score", "FP32", (-1,)),
                TensorSpec("scores", "FP32", (-1, len(self.labels))),
            ),
        )

    def to_tensors(self, predictions: list[Any]) -> dict[str, np.ndarray]:
        return {
            "label": np.array([p["label"].encode() for p in predictions], dtype=object),
            "score": np.array([p["score"] for p in predictions], dtype=np.float32),
            "scores": np.array([[p["scores"][label] for label in self.labels] for p in predictions], dtype=np.float32),
        }

    def postprocess(self, outputs: np.ndarray, count: int) -> list[dict[str, Any]]:
        probs = outputs[:count]
        best = probs.argmax(axis=1)
        return [
            {"label": self.labels[b], "score": row[b], "scores": dict(zip(self.labels, row, strict=False))}
            for row, b in zip(probs, best, strict=False)
        ]


class TextEmbeddingHandler(HuggingFaceHandler):
    """Mean-pooled, L2-normalised token embeddings (the sentence-transformers recipe)."""

    prediction_model = EmbeddingPrediction
    provides_embeddings = True
    task = "text-embedding"

    def _load_model(self, ctx: LoadContext) -> torch.nn.Module:
        with _TRANSFORMERS_LOCK:
            from transformers import AutoModel

        return self._from_pretrained(AutoModel, ctx)

    def _shared_config(self) -> dict[str, Any]:
        return {"hidden_size": int(self.config.hidden_size)}

    def _read_shared(self, shared: dict[str, Any]) -> None:
        self.shared_hidden_size = int(shared["hidden_size"])

    def signature(self) -> Signature:
        size = int(self.config.hidden_size) if hasattr(self, "config") else self.shared_hidden_size
        return Signature((TEXT_INPUT,), (TensorSpec("embedding", "FP32", (-1, size)),))

    def to_tensors(self, predictions: list[Any]) -> dict[str, np.ndarray]:
        return {"embedding": np.stack([np.asarray(p["embedding"], dtype=np.float32) for p in predictions])}

    def _head(self, outputs: Any, attention_mask: torch.Tensor) -> torch.Tensor:
        import torch

        hidden = outputs.last_hidden_state.float()
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)

    def postprocess(self, outputs: np.ndarray, count: int) -> list[dict[str, Any]]:
        return [{"embedding": row} for row in outputs[:count]]
