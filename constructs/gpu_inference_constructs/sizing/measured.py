"""Throughput from a benchmark JSON: what `make bench` (bench/results/bench.json) or
`python -m bench.gpu_bench` (bench/results/gpu/bench.json) writes.

Used: ``runs`` (``system``, ``model``, ``concurrency``, ``throughput_rps``, ``p95_ms``, ``errors``),
``setup.device`` and ``setup.our_server.MAX_BATCH_SIZE``, and ``gpu`` (the CUDA device name, written
by the GPU benchmark). The best load level of our server with a real model whose p95 met the goal
without errors is what one task sustains.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import ConfigError
from ..core.instance_catalog import ACCELERATORS, CATALOG, NON_CUDA_CATALOG
from .workload import Measurement

SERVER = "ours"
NULL_MODEL = "null"
ACCEPTED_FORMAT = (
    'the JSON that make bench or python -m bench.gpu_bench writes: {"setup": {"device": ..., "started_at": ..., '
    '"our_server": {"MAX_BATCH_SIZE": N}}, "runs": [{"system": "ours", "model": NAME (not "null"), "concurrency": N, '
    '"throughput_rps": X, "p95_ms": X, "errors": N}, ...], "gpu": CUDA DEVICE NAME (or --measured-on TYPE)}'
)


def refuse_llm(path: str) -> ConfigError:
    """The bench formats hold requests/s of our encoder server per load level: nothing an LLM's decoding can be sized
    from."""
    return ConfigError(
        "--measured",
        f"{path!r}: an LLM's throughput cannot be measured with the files this reads. --measured accepts "
        f"{ACCEPTED_FORMAT}, and both benchmarks measure encoder servers (requests/s of our server); "
        "neither runs an LLM or records tokens per second. For an LLM drop --measured: the "
        "estimate is bound by memory bandwidth and names its formula; measure vLLM on the type "
        "yourself and set vllm.max_num_seqs and scaling.requests_per_target_per_minute from it",
    )


def read_measurement(path: str | Path, p95_ms: float, measured_on: str | None = None) -> Measurement:
    path = Path(path)
    key = "--measured"
    try:
        results = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(key, f"{str(path)!r} does not exist (make bench writes bench/results/bench.json)") from None
    except json.JSONDecodeError as error:
        raise ConfigError(key, f"{str(path)!r} is not JSON ({error})") from None
    if not isinstance(results, dict) or not isinstance(results.get("runs"), list) or "setup" not in results:
        raise ConfigError(key, f"{str(path)!r} is not a benchmark result: expected {ACCEPTED_FORMAT}")
    gpu_model = _gpu_model(results, path, measured_on)
    runs = [r for r in results["runs"] if r.get("system") == SERVER and r.get("model") != NULL_MODEL]
    if not runs:
        raise ConfigError(key, f"{str(path)!r} has no run of our server with a real model (system 'ours')")
    within = [r for r in runs if not r.get("errors") and r["p95_ms"] <= p95_ms]
    if not within:
        best = min(r["p95_ms"] for r in runs)
        raise ConfigError(
            key,
            f"no load level in {str(path)!r} met p95 <= {p95_ms:g} ms without errors (the lowest p95 "
            f"was {best:.1f} ms): raise --p95-ms or measure at fewer clients",
        )
    run = max(within, key=lambda r: r["throughput_rps"])
    batch = (results["setup"].get("our_server") or {}).get("MAX_BATCH_SIZE")
    started = results["setup"].get("started_at", "")
    return Measurement(
        gpu_model,
        float(run["throughput_rps"]),
        float(run["p95_ms"]),
        int(run["concurrency"]),
        batch,
        f"measured ({path.name}, {started}, model {run['model']})",
    )


def _gpu_model(results: dict, path: Path, measured_on: str | None) -> str:
    if measured_on is not None:
        instance = CATALOG.get(measured_on) or NON_CUDA_CATALOG.get(measured_on)
        if instance is None:
            raise ConfigError(
                "--measured-on", f"{measured_on!r} is not in the catalog; known: {', '.join(sorted(CATALOG))}"
            )
        return instance.gpu_model
    gpu = results.get("gpu")
    if gpu:
        return catalog_gpu_model(gpu)
    device = results["setup"].get("device", "unknown")
    raise ConfigError(
        "--measured",
        f"{str(path)!r} was measured on {device!r}, not on a GPU the catalog knows: name the "
        "instance type it stands for with --measured-on TYPE (e.g. g5.xlarge), or run "
        "python -m bench.gpu_bench on that type",
    )


def catalog_gpu_model(device_name: str) -> str:
    """The catalog's name for a CUDA device name ("Tesla T4" -> "NVIDIA T4"); unknown names pass through."""

    def bare(name: str) -> str:
        return name.lower().replace("tesla ", "").replace("nvidia ", "").replace("aws ", "").strip()

    return next((model for model in ACCELERATORS if bare(model) == bare(device_name)), device_name)
