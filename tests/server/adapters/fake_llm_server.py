"""A stand-in for vLLM's (or SGLang's) OpenAI-compatible server, as far as LoRA adapters go: load and unload by name
and path (refusing a name it already serves unless loaded in place, and a path without adapter_config.json),
/v1/models listing the base and
each adapter with the base as its "parent", completions answered for the base and a loaded adapter and 404 for any
other model, all behind an API key. It records every call, and can be made to fail a load or to stop answering."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BASE = "tiny-llama"


class FakeLlmServer:
    def __init__(self, kind: str = "vllm", api_key: str = "test-key") -> None:
        self.kind, self.api_key = kind, api_key
        self.adapters: dict[str, str] = {}  # name -> path
        self.calls: list[tuple[str, str]] = []  # (route, adapter name)
        self.files_at_unload: dict[str, bool] = {}  # whether the adapter's files were still there when unloaded
        self.fail_loads: dict[str, str] = {}  # name -> the error its loads answer
        self.answering = True
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                fake.handle(self, "GET", {})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                fake.handle(self, "POST", json.loads(self.rfile.read(length) or b"{}"))

            def log_message(self, format: str, *args) -> None:  # noqa: A002
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"

    @property
    def prefix(self) -> str:
        return "/v1" if self.kind == "vllm" else ""

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()

    def restart(self) -> None:
        """As a restarted server: every runtime-loaded adapter gone."""
        with self.lock:
            self.adapters.clear()

    def handle(self, request: BaseHTTPRequestHandler, method: str, body: dict) -> None:
        def answer(code: int, doc: dict) -> None:
            raw = json.dumps(doc).encode()
            request.send_response(code)
            request.send_header("content-type", "application/json")
            request.send_header("content-length", str(len(raw)))
            request.end_headers()
            request.wfile.write(raw)

        def error(code: int, message: str) -> None:
            answer(
                code,
                {
                    "error": {
                        "message": message,
                        "type": "NotFoundError" if code == 404 else "BadRequestError",
                        "code": code,
                    }
                },
            )

        if not self.answering:
            answer(503, {"error": "starting"})
            return
        if request.headers.get("authorization") != f"Bearer {self.api_key}" and request.path != "/health":
            error(401, "Unauthorized")
            return
        path = request.path
        with self.lock:
            if method == "GET" and path == "/v1/models":
                cards = [{"id": BASE, "object": "model", "parent": None}]
                cards += [
                    {"id": n, "object": "model", "parent": BASE, "root": p} for n, p in sorted(self.adapters.items())
                ]
                answer(200, {"object": "list", "data": cards})
            elif method == "GET" and path == "/health":
                answer(200, {})
            elif method == "POST" and path == f"{self.prefix}/load_lora_adapter":
                name, where = body["lora_name"], body["lora_path"]
                self.calls.append(("load", name))
                if name in self.adapters and not body.get("load_inplace"):
                    error(400, f"The lora adapter '{name}' has already been loaded.")
                elif name in self.fail_loads:
                    error(400, self.fail_loads[name])
                elif not (Path(where) / "adapter_config.json").is_file():
                    error(400, f"No adapter found for {where}")
                else:
                    self.adapters[name] = where
                    answer(200, {"success": True, "loaded_adapters": dict(self.adapters)})
            elif method == "POST" and path == f"{self.prefix}/unload_lora_adapter":
                name = body["lora_name"]
                self.calls.append(("unload", name))
                if name not in self.adapters:
                    error(404, f"The lora adapter '{name}' cannot be found.")
                else:
                    self.files_at_unload[name] = Path(self.adapters.pop(name)).is_dir()
                    answer(200, {"success": True, "loaded_adapters": dict(self.adapters)})
            elif method == "POST" and path == "/v1/completions":
                model = body.get("model")
                if model != BASE and model not in self.adapters:
                    error(404, f"The model `{model}` does not exist.")
                else:
                    answer(200, {"model": model, "choices": [{"text": "ok"}]})
            else:
                error(404, f"no route {method} {path}")
