"""The flags the SGLang preset sets from its own keys or refuses, each with what to do instead, and why an argument
of ``extra_args`` is refused (:func:`flag_fix`)."""

from __future__ import annotations

# Flags the preset sets from its own keys (argparse also takes an unambiguous prefix: ``--tp 2`` is ``--tp-size 2``,
# so a prefix of one of these is refused too), each with what to do instead.
_WEIGHTS = (
    "leave it out: SGLang serves the weights copied to /scratch/model from the model bucket (publish another version)"
)
_TENSOR_PARALLEL = "set the model's gpus (ModelProps.gpus): SGLang's tensor-parallel size is the task's GPUs"
SGLANG_OWNED_FLAGS: dict[str, str] = {
    "--model-path": _WEIGHTS,
    "--model": _WEIGHTS,
    "--port": "set sglang.port",
    "--host": "leave it out: the preset listens on 0.0.0.0 so the load balancer reaches it",
    "--tp-size": _TENSOR_PARALLEL,
    "--tensor-parallel-size": _TENSOR_PARALLEL,
    "--served-model-name": "set sglang.served_model_name",
    "--context-length": "set sglang.context_length",
    "--mem-fraction-static": "set sglang.mem_fraction_static (scaled to the model's gpu_share on a share)",
    "--max-running-requests": "set sglang.max_running_requests",
    "--dtype": "set sglang.dtype",
    "--api-key": "set sglang.api_key_name (the key of that name in the API-key secret reaches SGLang)",
    "--enable-metrics": "leave it out: metrics are always on (scaling reads them)",
    "--enable-trace": "set sglang.opentelemetry (the preset traces at the environment's trace_sampling_ratio)",
    "--otlp-traces-endpoint": "leave it out: the preset sends SGLang's spans to the task's collector",
    "--download-dir": "leave it out: the weights are on the scratch volume and the task never reaches a model hub",
    "--enable-lora": "set sglang.lora (the task's adapter-sync sidecar loads the registry's adapters)",
    "--lora-paths": "set sglang.lora and register the adapters (publish --adapter): the sidecar loads them",
    "--max-loras-per-batch": "set sglang.lora.max_gpu_adapters",
    "--max-loaded-loras": "set sglang.lora.max_cpu_adapters",
    "--max-lora-rank": "set sglang.lora.max_rank",
    "--lora-target-modules": "set sglang.lora.target_modules",
}
# Flags that would undo what the contract promises: why, and what to do instead.
SGLANG_REFUSED_FLAGS: dict[str, str] = {
    "--config": "the construct cannot check a config file; pass its flags in extra_args",
    "--tokenizer-worker-num": "SGLang drains on SIGTERM and applies --api-key only with its one tokenizer manager "
    "(managers/tokenizer_manager.py, entrypoints/http_server.py); leave it out",
}


def flag_fix(arg: str) -> str | None:
    """Why ``arg`` is refused and what to do instead, for a flag the preset sets or refuses, or an unambiguous prefix of
    one (argparse reads an exact name first, then a prefix); None for any other argument."""
    name = arg.split("=")[0]
    if not name.startswith("--") or len(name) <= 3:
        return None
    known = {**SGLANG_OWNED_FLAGS, **SGLANG_REFUSED_FLAGS}
    flag = name if name in known else next((f for f in known if f.startswith(name)), None)
    if flag is None:
        return None
    said = f"{arg!r} is {flag}" + (
        "" if flag == name else " (a prefix of it, which argparse reads as it when unambiguous)"
    )
    if flag in SGLANG_REFUSED_FLAGS:
        return f"{said}, which the preset refuses: {SGLANG_REFUSED_FLAGS[flag]}"
    return f"{said}, which the preset sets: {SGLANG_OWNED_FLAGS[flag]}"
