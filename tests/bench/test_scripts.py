"""The Locust file compiles (Locust itself is not installed here) and the GPU script behaves without a GPU."""

from __future__ import annotations

import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_locustfile_compiles(tmp_path):
    py_compile.compile(str(ROOT / "bench" / "locustfile.py"), cfile=str(tmp_path / "locustfile.pyc"), doraise=True)


@pytest.mark.parametrize("options", [[], ["--compile-startup"]])
def test_gpu_bench_without_cuda_exits_cleanly(options):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu_bench", *options],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "no CUDA device" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize("status", [200, 503])
def test_the_gpu_compile_start_up_measures_what_the_cpu_one_does_on_the_gpu(tmp_path, monkeypatch, status):
    """Without a GPU here: the model, settings and output the run would use, with bench.startup's measurement
    replaced by a recorder."""
    from bench import gpu_bench, startup

    seen = {}

    def measure(cfg, model_dir):
        seen.update(
            device=cfg.device,
            precision=cfg.precision,
            workers=cfg.workers,
            timeout=cfg.ready_timeout_s,
            files=sorted(p.name for p in Path(model_dir).iterdir()),
        )
        first = {"seconds": 9.0, "waited_s": 80.0, "phases": {}, "predict_status": 200}
        return {
            "max_batch_size": 4,
            "eager": {"seconds": 8.0, "phases": {}, "predict_status": 200},
            "first": first,
            "cached": {"seconds": 8.5, "phases": {}, "restore_s": 0.5, "predict_status": status},
            "archive_bytes": 10**7,
            "first_over_eager": 1.125,
            "cached_over_eager": 1.062,
            "first_compiled_s": 79.0,
            "cached_compiled_s": 20.0,
        }

    monkeypatch.setattr(startup, "measure_compile_startup", measure)
    args = gpu_bench.parse_args(["--compile-startup", "--output-dir", str(tmp_path)])
    assert gpu_bench.run_compile_startup(args, "NVIDIA A10G") == (0 if status == 200 else 1)
    assert seen["device"] == "cuda" and seen["precision"] == "fp16" and "config.json" in seen["files"]
    assert seen["workers"] == 1 and seen["timeout"] < 600  # one command on the device runs at most 600 s
    written = json.loads((tmp_path / "compile_startup.json").read_text())
    assert written["gpu"] == "NVIDIA A10G" and written["cached_compiled_s"] == 20.0


def test_gpu_model_builds_and_loads_from_its_config(tmp_path):
    from transformers import AutoModel, AutoTokenizer

    from bench.gpu_bench import build_distilbert

    model_dir = build_distilbert(tmp_path, dim=32, layers=1, heads=2, hidden_dim=64, vocab_size=2000)
    assert (model_dir / "model.safetensors").is_file() and (model_dir / "vocab.txt").is_file()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True, use_safetensors=True)
    assert model.config.model_type == "distilbert" and model.config.vocab_size == 2000
    ids = tokenizer("The delivery arrived two days late.")["input_ids"]
    assert tokenizer.unk_token_id not in ids


def test_gpu_server_mode_runs_our_server_alone_on_cuda_with_fp16_and_compile(tmp_path):
    from bench.gpu_bench import LABEL, best_within_slo, gpu_config

    cfg = gpu_config(short=False, output_dir=tmp_path, model_dir=tmp_path, server_only=True)
    assert cfg.systems == (("ours", LABEL),) and cfg.mode == "gpu-server"
    assert (cfg.device, cfg.precision, cfg.compile, cfg.pin_cpus) == ("cuda", "fp16", True, False)
    assert max(cfg.concurrency) >= 256
    runs = [
        {"system": "ours", "model": LABEL, "concurrency": c, "throughput_rps": rps, "p95_ms": p95, "errors": 0}
        for c, rps, p95 in ((32, 900.0, 20.0), (128, 2500.0, 45.0), (256, 2600.0, 90.0))
    ]
    best = best_within_slo({"runs": runs})
    assert best == {f"ours:{LABEL}": runs[1]}  # the fastest level that kept p95 under 50 ms


def test_gpu_server_mode_launches_our_server_with_its_default_worker_count_unless_told(tmp_path):
    from bench.config import OURS, OURS_2W, BenchConfig
    from bench.gpu_bench import gpu_config, parse_args
    from bench.systems import launch
    from inference_server.settings import load_settings
    from inference_server.supervisor.processes import task_cpus, worker_count

    args = parse_args(["--server"])
    cfg = gpu_config(short=True, output_dir=tmp_path, model_dir=tmp_path, server_only=args.server, workers=args.workers)
    env = launch(OURS, str(tmp_path), 1234, cfg, tmp_path).env
    assert env["WORKERS"] == "0"
    # What the server makes of the launched environment: its own default for this machine's CPUs.
    assert worker_count(load_settings([], env)) == max(1, task_cpus() - 1)

    args = parse_args(["--server", "--workers", "3"])
    cfg = gpu_config(short=True, output_dir=tmp_path, model_dir=tmp_path, server_only=True, workers=args.workers)
    assert worker_count(load_settings([], launch(OURS, str(tmp_path), 1234, cfg, tmp_path).env)) == 3
    # The CPU bench keeps its pinned layout: one worker beside the generator, two for ours-2w.
    assert launch(OURS, str(tmp_path), 1234, BenchConfig(), tmp_path).env["WORKERS"] == "1"
    assert launch(OURS_2W, "null", 1234, BenchConfig(), tmp_path).env["WORKERS"] == "2"


def test_the_gpu_runtime_comparison_serves_what_the_gpu_runs_and_says_why_it_skips_the_rest():
    """`--runtimes`: eager and compile always run on the GPU; onnx only where onnxruntime has a GPU provider (the CPU
    build would measure the CPU and call it the GPU); int8 is a CPU runtime, gated and reported, never served."""
    from bench.gpu_bench import GPU_RUNTIMES, parse_args, runtime_plan

    assert parse_args(["--runtimes"]).runtimes == ",".join(GPU_RUNTIMES)
    assert parse_args(["--runtimes", "eager,onnx"]).runtimes == "eager,onnx"
    assert parse_args([]).runtimes is None
    cpu_build = runtime_plan(list(GPU_RUNTIMES), ["AzureExecutionProvider", "CPUExecutionProvider"])
    assert cpu_build["eager"] is None and cpu_build["compile"] is None
    onnx_reason, int8_reason = cpu_build["onnx"], cpu_build["int8"]
    assert onnx_reason is not None and int8_reason is not None
    assert "onnxruntime-gpu" in onnx_reason and "CPU" in int8_reason
    gpu_build = runtime_plan(["onnx"], ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    assert gpu_build == {"onnx": None}


def test_the_gpu_runtime_comparison_refuses_an_unknown_runtime(capsys):
    import pytest

    from bench.gpu_bench import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--runtimes", "eager,tensorrt-llm"])
    assert "unknown runtimes ['tensorrt-llm']" in capsys.readouterr().err


def test_each_gpu_runtime_runs_in_fp16_and_only_compile_compiles(tmp_path):
    from bench.config import OURS
    from bench.gpu_bench import GPU_RUNTIMES, gpu_config, runtime_config
    from bench.systems import launch

    cfg = gpu_config(short=True, output_dir=tmp_path, model_dir=tmp_path, server_only=True)
    envs = {
        runtime: launch(OURS, str(tmp_path), 1234, runtime_config(cfg, runtime), tmp_path).env
        for runtime in GPU_RUNTIMES
    }
    assert {runtime: (env["DEVICE"], env["PRECISION"], env["MODEL_RUNTIME"]) for runtime, env in envs.items()} == {
        "eager": ("cuda", "fp16", "eager"),
        "compile": ("cuda", "fp16", "compile"),
        "onnx": ("cuda", "fp16", "eager"),
        "int8": ("cuda", "fp16", "eager"),
    }


def test_weights_fetch_bench_compares_the_three_clients_on_one_object():
    done = subprocess.run(
        [sys.executable, "-m", "bench.weights_fetch", "--mib", "40", "--repeats", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result["gb_per_s"]) == {"download_only", "download_then_hash", "ours_streamed"}
    assert len(result["read_back_hash_seconds"]) == 1 and result["ours_vs_download_then_hash"] > 0
