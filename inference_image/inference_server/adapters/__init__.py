"""LoRA adapters over one LLM (vLLM or SGLang): published to the model store, named by a registry, kept in step on every
task by a sidecar (python -m inference_server.adapters; docs/lora-adapters.md).

Published (python -m inference_server.publish --adapter):
- registry.py: the adapter registry of one base model (the versioned registry document of kind "base") and its layout.
- peft_config.py: a PEFT adapter's adapter_config.json, read and checked for what serving needs.
- base_model.py: what a base model has (its id, its modules), from its config.json and weight names.
- check.py: an adapter against its base and a rank limit: the facts its manifest records, or why it is refused.

The sidecar, one job a module:
- sidecar_settings.py: its environment variables.
- server_api.py: loading and unloading an adapter through the server's HTTP API (vLLM's and SGLang's endpoints).
- files.py: an adapter version onto ADAPTER_DIR: downloaded to a temporary directory, verified, renamed into place.
- sync.py: the registry against what the server has loaded: add, move, remove; failed loads and their backoff.
- ready.py: GET /ready, 200 once the server answers and every registered adapter is loaded (or failed: named).
- metrics.py: its EMF documents (load count and time, adapters registered and loaded).
- __main__.py: the loop.

In the server's own process (vLLM's --middleware; standard library only, written to the task's scratch volume):
- request_log.py: one JSON line per inference request: the adapter, the status, the latency to the response's end.
"""
