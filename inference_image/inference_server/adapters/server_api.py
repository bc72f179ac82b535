"""Loading and unloading a LoRA adapter through the LLM server's HTTP API, one small class per server.

vLLM (with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True): POST /v1/load_lora_adapter {"lora_name", "lora_path",
"load_inplace"}, POST /v1/unload_lora_adapter {"lora_name"}; GET /v1/models lists the base model and each adapter it
serves (an adapter's card names the base as its "parent"). A new version replaces the old in place (load_inplace): the
name never stops serving, and a version that fails to load leaves the previous one serving. SGLang: POST
/load_lora_adapter and /unload_lora_adapter with the same bodies and no in-place load: a new version is an unload, then
a load. Both are behind the server's API key when it has one (Authorization: Bearer). docs/lora-adapters.md cites the
sources.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Protocol


class ServerError(Exception):
    """The server refused or failed a load or unload (status, and what it said)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(f"{status or 'no answer'}: {message}")
        self.status = status


class ServerApi(Protocol):
    def loaded(self) -> set[str] | None:
        """The adapters the server serves now; ServerError when it does not answer. None: the server cannot list
        them (the caller keeps its own record)."""
        ...

    def load(self, name: str, path: str, *, replacing: bool = False) -> None:
        """Serve the adapter at ``path`` as ``name``; ``replacing``: the server serves ``name`` already."""
        ...

    @property
    def keeps_previous_on_failure(self) -> bool:
        """Whether a replacing load that fails leaves the previous version serving."""
        ...

    def unload(self, name: str) -> None:
        """Unload ``name``; an adapter the server does not have is already unloaded."""
        ...


class _Http:
    def __init__(self, base_url: str, api_key: str | None, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"content-type": "application/json"}
        if api_key:
            self.headers["authorization"] = f"Bearer {api_key}"
        self.timeout_s = timeout_s
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the server is on localhost

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, timeout_s: float | None = None) -> Any:
        """The JSON (or text) answer of a 2xx; ServerError otherwise, with the server's own message."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=self.headers)
        try:
            with self._opener.open(request, timeout=timeout_s or self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise ServerError(exc.code, _message(exc.read())) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ServerError(None, str(getattr(exc, "reason", exc))) from None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")


def _message(raw: bytes) -> str:
    """The error's message from an OpenAI-style error body ({"error": {"message"}} or {"message"}), else its text."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")[:500]
    if isinstance(doc, dict):
        error = doc.get("error")
        inner: dict[str, Any] = error if isinstance(error, dict) else doc
        for key in ("message", "error_message", "detail"):
            value = inner.get(key)
            if isinstance(value, str):
                return value[:500]
    return str(doc)[:500]


class VllmApi(_Http):
    def loaded(self) -> set[str] | None:
        cards = self.call("GET", "/v1/models", timeout_s=5).get("data", [])
        return {card["id"] for card in cards if isinstance(card, dict) and card.get("parent")}

    keeps_previous_on_failure = True

    def load(self, name: str, path: str, *, replacing: bool = False) -> None:
        self.call("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path, "load_inplace": replacing})

    def unload(self, name: str) -> None:
        try:
            self.call("POST", "/v1/unload_lora_adapter", {"lora_name": name})
        except ServerError as exc:
            if exc.status != 404:  # vLLM: "The lora adapter '<name>' cannot be found."
                raise


class SglangApi(_Http):
    def loaded(self) -> set[str] | None:
        self.call("GET", "/health", timeout_s=5)
        return None  # its adapters are not listed by /v1/models; a load's answer names them (loaded_adapters)

    keeps_previous_on_failure = False

    def load(self, name: str, path: str, *, replacing: bool = False) -> None:
        if replacing:
            self.unload(name)
        answer = self.call("POST", "/load_lora_adapter", {"lora_name": name, "lora_path": path})
        if isinstance(answer, dict) and answer.get("success") is False:
            raise ServerError(200, str(answer.get("error_message") or answer))

    def unload(self, name: str) -> None:
        answer = self.call("POST", "/unload_lora_adapter", {"lora_name": name})
        if isinstance(answer, dict) and answer.get("success") is False:
            raise ServerError(200, str(answer.get("error_message") or answer))


SERVER_APIS: dict[str, type[VllmApi] | type[SglangApi]] = {"vllm": VllmApi, "sglang": SglangApi}


def server_api(kind: str, base_url: str, api_key: str | None, timeout_s: float) -> ServerApi:
    return SERVER_APIS[kind](base_url, api_key, timeout_s)
