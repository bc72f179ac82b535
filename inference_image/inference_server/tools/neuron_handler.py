"""TorchServe's handler for an encoder compiled by neuron_compile: copied into the published version as ``handler.py``
and run by TorchServe inside the AWS Neuron DLC, so it imports nothing of inference_server.

TorchServe calls the module's ``handle(data, context)`` once with ``data=None`` to load (ts/model_loader.py, its
function entry point), then with each batch: a list of requests, each a dict whose ``body`` is the decoded JSON
(``{"inputs": "a text"}``) or raw bytes. A request without a body is the readiness probe: it answers the fixed probe
text the compile step recorded, through the compiled model. The compiled graph has a fixed batch and sequence
length, so a batch is padded to both and the padding rows dropped.
"""

from __future__ import annotations

import hmac
import importlib
import json
import os
from pathlib import Path
from typing import Any

NEURON_FILE = "neuron.json"
API_KEYS_VARIABLE = "API_KEYS"  # the environment's API-key secret, a JSON object of key names to keys
UNAUTHORIZED = "a valid x-api-key (or Authorization: Bearer) header is required"
_encoders: dict[str, Encoder] = {}
_api_keys: list[bytes] = []


class RequestError(ValueError):
    pass


class Encoder:
    """The compiled model, its tokenizer and what neuron.json says of them."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        from transformers import AutoTokenizer

        self.facts = json.loads((model_dir / NEURON_FILE).read_text())
        if self.facts["compiler"] == "torch-neuronx":
            importlib.import_module("torch_neuronx")  # registers the Neuron ops the traced graph calls
        self.task: str = self.facts["task"]
        served = os.environ.get("MODEL_TASK", self.task)
        if served != self.task:
            raise RuntimeError(
                f"the model was compiled for {self.task}, but the server was told to serve {served}: "
                "publish a version compiled for the served task, or set the preset's task"
            )
        self.batch_size: int = self.facts["batch_size"]
        self.sequence_length: int = self.facts["sequence_length"]
        self.labels: list[str] = self.facts.get("labels", [])
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.model = torch.jit.load(str(model_dir / self.facts["model_file"]))
        self.model.eval()

    def encode(self, texts: list[str]) -> list[dict[str, Any]]:
        import torch

        answers: list[dict[str, Any]] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            padded = chunk + [""] * (self.batch_size - len(chunk))
            tokens = self.tokenizer(
                padded, padding="max_length", truncation=True, max_length=self.sequence_length, return_tensors="pt"
            )
            with torch.no_grad():
                output = self.model(tokens["input_ids"], tokens["attention_mask"])
            answers += [self._answer(row) for row in output[: len(chunk)]]
        return answers

    def _answer(self, row: Any) -> dict[str, Any]:
        import torch

        if self.task == "text-embedding":
            return {"embedding": [round(float(v), 7) for v in row]}
        scores = torch.softmax(row.float(), dim=-1)
        best = int(scores.argmax())
        return {"label": self.labels[best] if best < len(self.labels) else str(best), "score": float(scores[best])}


def request_text(request: dict[str, Any], probe_text: str) -> str:
    """The text of one request; the probe text for a request without a body (the load balancer's health check)."""
    body = request.get("body", request.get("data"))
    if body in (None, b"", ""):
        return probe_text
    if isinstance(body, (bytes, bytearray)):
        try:
            body = json.loads(body)
        except ValueError:
            raise RequestError('the body must be JSON: {"inputs": "a text"}') from None
    if not (isinstance(body, dict) and isinstance(body.get("inputs"), str) and set(body) == {"inputs"}):
        raise RequestError('the body must be {"inputs": "a text"}')
    return body["inputs"]


def load_api_keys(environment: dict[str, str]) -> list[bytes]:
    """The keys a request may carry: the values of ``API_KEYS``'s JSON object; none when it is not set (the service
    was deployed with ``allow_unauthenticated``)."""
    raw = environment.get(API_KEYS_VARIABLE)
    if raw is None:
        return []
    keys = json.loads(raw)
    if not (isinstance(keys, dict) and keys and all(isinstance(k, str) and k for k in keys.values())):
        raise RuntimeError(f"{API_KEYS_VARIABLE} must be a JSON object of key names to non-empty keys")
    return [key.encode() for key in keys.values()]


def carries_a_key(headers: dict[str, Any], keys: list[bytes]) -> bool:
    """The request's x-api-key (else its Authorization: Bearer value) is one of ``keys``, compared in constant time
    with every key, as the bundled server does. Header names in any case (HTTP/2 clients send them lower-case)."""
    named = {str(name).lower(): value for name, value in headers.items()}
    value = named.get("x-api-key")
    if value is None and str(named.get("authorization", ""))[:7].lower() == "bearer ":
        value = str(named["authorization"])[7:].strip()
    if value is None:
        return False
    given = value.encode() if isinstance(value, str) else bytes(value)
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(given, key)
    return matched


def has_body(request: dict[str, Any]) -> bool:
    return request.get("body", request.get("data")) not in (None, b"", "")


def handle(data: list[dict[str, Any]] | None, context: Any) -> list[Any] | None:
    """TorchServe's entry point: load on the first call (``data`` None), then answer each request of the batch."""
    model_dir = Path(context.system_properties["model_dir"])
    if data is None:
        _api_keys[:] = load_api_keys(dict(os.environ))
        _encoders["model"] = Encoder(model_dir)
        _encoders["model"].encode([_encoders["model"].facts["probe_text"]])  # warm the NeuronCore before traffic
        return None
    encoder = _encoders["model"]
    texts: list[str | None] = []
    errors: dict[int, str] = {}
    for index, request in enumerate(data):
        # A request without a body is the load balancer's health check (it carries no key): the fixed probe text.
        if (
            _api_keys
            and has_body(request)
            and not carries_a_key(context.get_all_request_header(index) or {}, _api_keys)
        ):
            texts.append(None)
            errors[index] = UNAUTHORIZED
            context.set_response_status(401, "Unauthorized", idx=index)
            continue
        try:
            texts.append(request_text(request, encoder.facts["probe_text"]))
        except RequestError as error:
            texts.append(None)
            errors[index] = str(error)
            context.set_response_status(400, "Bad Request", idx=index)  # ts/context.py: this request's status
    answers = iter(encoder.encode([text for text in texts if text is not None]))
    return [{"error": errors[index]} if text is None else next(answers) for index, text in enumerate(texts)]
