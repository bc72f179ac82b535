"""The Neuron preset on an inf2.xlarge, against AWS's own figures: `python -m bench.neuron_bench` from the repository
root on an inf2.xlarge with Docker and the Neuron driver (the Neuron DLAMI), not run here (no Neuron device).

It does what a deployment does, on one instance: builds a DistilBERT-size encoder with random weights
(gpu_bench.build_distilbert: nothing is downloaded; `--layers 12` for BERT-base's shape), compiles it inside the Neuron
DLC the preset serves with (`inference_server.tools.neuron_compile`, batch 16 x 128 tokens, matmul auto-cast to BF16:
the settings of AWS's figure), starts TorchServe in the same DLC with the preset's own entry point, command, variables,
user, read-only root and /tmp (read from NeuronServer's functions, so it runs what ModelService deploys), waits for the
readiness path, drives `POST /predictions/encoder` with the bench's closed-loop generator at rising concurrency, and
stops the container, timing SIGTERM to exit against the preset's stop budget. Results:
bench/results/neuron/inf2.json and a table beside the Neuron figures it answers to (aws-neuron-sdk
about-neuron/benchmarks/inf2/throughput_data_encoder.csv, SDK 2.27, PyTorch 2.9, inf2.xlarge, data parallel on both
NeuronCores, FP32 with matmul auto-cast BF16, sequence length 128): distilbert-base-uncased 5,308 inferences/s at
p50 6.0 ms (batch 16); bert-base-uncased 2,674/s at p50 6.0 ms (batch 8). Those are the compiled model's own;
this run adds HTTP, TorchServe's batching (max 5 ms) and tokenisation, so it reads the gap the server costs.

Without /dev/neuron0 it says so and exits 0 having measured nothing; `--dry-run` prints the docker commands.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.config import RESULTS_DIR, SAME_TEXT

NEURON_DEVICE = Path("/dev/neuron0")
MODEL_NAME = "encoder"
PORT = 8080
# aws-neuron-sdk about-neuron/benchmarks/inf2/throughput_data_encoder.csv (inf2.xlarge, sequence length 128).
NEURON_FIGURES = {6: ("distilbert-base-uncased", 16, 5307.88, 6.01), 12: ("bert-base-uncased", 8, 2674.19, 5.97)}
AUTO_CAST = (
    "--compiler-arg=--auto-cast",
    "--compiler-arg=matmult",
    "--compiler-arg=--auto-cast-type",
    "--compiler-arg=bf16",
)


def docker_commands(work: Path, layers: int) -> dict[str, list[str]]:
    """The compile and the server, each a docker command; the server's from the preset's own functions."""
    from gpu_inference_constructs import ModelProps, NeuronServerProps
    from gpu_inference_constructs.servers.neuron import NEURON_ENTRY_POINT, neuron_environment, torchserve_command

    props = NeuronServerProps()
    image = f"{props.image.repository}:{props.image.tag}"
    batch = NEURON_FIGURES[layers][1]
    compile_command = [
        "docker",
        "run",
        "--rm",
        "--device",
        str(NEURON_DEVICE),
        "-v",
        f"{Path.cwd()}:/work",
        "-w",
        "/work",
        "-v",
        f"{work}:/bench",
        image,
        "env",
        "PYTHONPATH=inference_image",
        "python",
        "-m",
        "inference_server.tools.neuron_compile",
        "/bench/checkpoint",
        "/bench/model",
        "--task",
        props.task,
        "--model-name",
        MODEL_NAME,
        "--batch-size",
        str(batch),
        "--sequence-length",
        "128",
        *AUTO_CAST,
    ]
    environment = neuron_environment(props, ModelProps(name=MODEL_NAME, version="1"), "us-east-1")
    server = [
        "docker",
        "run",
        "-d",
        "--name",
        "neuron-bench",
        "--device",
        str(NEURON_DEVICE),
        "--read-only",
        "--tmpfs",
        "/tmp",
        "-v",
        f"{work}/model:/scratch/model:ro",
        "--tmpfs",
        "/scratch/logs",
        "--tmpfs",
        "/scratch/home",
        "--user",
        "1000:1000",
        "-p",
        f"{PORT}:{PORT}",
        *[arg for name, value in sorted(environment.items()) for arg in ("-e", f"{name}={value}")],
        "--entrypoint",
        NEURON_ENTRY_POINT[0],
        image,
        *NEURON_ENTRY_POINT[1:],
        *torchserve_command(MODEL_NAME),
    ]
    return {"compile": compile_command, "server": server}


def wait_ready(timeout_s: float) -> float:
    """Seconds until the readiness path (the probe through the compiled model) answers 200."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/predictions/{MODEL_NAME}", timeout=5) as answer:
                if answer.status == 200:
                    return time.monotonic() - start
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"TorchServe did not answer its readiness path within {timeout_s} s (docker logs neuron-bench)")


def measure(concurrency: list[int], duration_s: float) -> list[dict]:
    from bench.loadgen import encode_requests, run_load

    body = json.dumps({"inputs": SAME_TEXT}).encode()
    requests = encode_requests("127.0.0.1", PORT, f"/predictions/{MODEL_NAME}", [body])
    return [
        run_load("127.0.0.1", PORT, requests, clients, warmup_s=5, duration_s=duration_s).as_dict()
        for clients in concurrency
    ]


def stop_seconds() -> float:
    """SIGTERM (docker stop) to exit: the preset budgets TORCHSERVE_EXIT_SECONDS."""
    start = time.monotonic()
    subprocess.run(["docker", "stop", "-t", "120", "neuron-bench"], check=True, capture_output=True)
    return time.monotonic() - start


def report(result: dict) -> str:
    name, batch, throughput, p50 = NEURON_FIGURES[result["layers"]]
    lines = [
        f"Neuron's figure, {name} batch {batch}: {throughput:,.0f} inferences/s at p50 {p50} ms (model only)",
        "clients | requests/s | p50 ms | p95 ms | p99 ms | errors | share of Neuron's throughput",
    ]
    for run in result["runs"]:
        lines.append(
            f"{run['concurrency']} | {run['throughput_rps']:,.0f} | {run['p50_ms']:.1f} | {run['p95_ms']:.1f} | "
            f"{run['p99_ms']:.1f} | {run['errors']} | {run['throughput_rps'] / throughput:.0%}"
        )
    lines.append(f"ready after {result['ready_s']:.1f} s; SIGTERM to exit {result['stop_s']:.1f} s")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--layers",
        type=int,
        choices=sorted(NEURON_FIGURES),
        default=6,
        help="6: DistilBERT (batch 16); 12: BERT-base's shape (batch 8)",
    )
    parser.add_argument("--concurrency", default="1,8,32,64,128", help="closed-loop clients per level")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds measured per level")
    parser.add_argument("--dry-run", action="store_true", help="print the docker commands and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = RESULTS_DIR / "neuron"
    commands = docker_commands(work, args.layers)
    if args.dry_run:
        print("\n".join(" ".join(command) for command in commands.values()))
        return 0
    if not NEURON_DEVICE.exists() or shutil.which("docker") is None:
        print(
            f"no Neuron device ({NEURON_DEVICE}) or no docker: nothing measured. Run `python -m bench.neuron_bench` "
            "on an inf2.xlarge (Neuron DLAMI) from the repository root."
        )
        return 0
    from bench.gpu_bench import build_distilbert

    build_distilbert(work / "checkpoint", layers=args.layers)
    subprocess.run(commands["compile"], check=True)
    subprocess.run(commands["server"], check=True, capture_output=True)
    try:
        ready_s = wait_ready(600)
        runs = measure([int(c) for c in args.concurrency.split(",")], args.duration)
    finally:
        stopped_s = stop_seconds()
        subprocess.run(["docker", "rm", "neuron-bench"], check=False, capture_output=True)
    result = {"layers": args.layers, "ready_s": ready_s, "stop_s": stopped_s, "runs": runs}
    (work / "inf2.json").write_text(json.dumps(result, indent=1))
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
