"""The Neuron bench (bench/neuron_bench.py) cannot measure here (no Neuron device): it says so and exits 0, and the
server it would start is the one the preset deploys (its entry point, command and variables, read from the preset)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench import neuron_bench
from gpu_inference_constructs import ModelProps, NeuronServerProps
from gpu_inference_constructs.servers.neuron import NEURON_ENTRY_POINT, neuron_environment, torchserve_command

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_neuron_device_it_measures_nothing_and_says_where_to_run():
    done = subprocess.run(
        [sys.executable, "-m", "bench.neuron_bench"],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "no Neuron device" in done.stdout and "inf2.xlarge" in done.stdout


def test_the_server_it_starts_is_the_presets_and_the_compile_matches_neurons_figure(tmp_path):
    commands = neuron_bench.docker_commands(tmp_path, 6)
    server = commands["server"]
    image = f"{NeuronServerProps().image.repository}:{NeuronServerProps().image.tag}"
    after_image = server[server.index(image) + 1 :]
    assert after_image == [*NEURON_ENTRY_POINT[1:], *torchserve_command("encoder")]
    assert server[server.index("--entrypoint") + 1] == NEURON_ENTRY_POINT[0]
    environment = neuron_environment(NeuronServerProps(), ModelProps(name="encoder", version="1"), "us-east-1")
    assert {f"{name}={value}" for name, value in environment.items()} <= set(server)
    assert {"--read-only", "--user"} <= set(server)
    compile_command = commands["compile"]
    assert compile_command[compile_command.index("--batch-size") + 1] == "16"
    assert compile_command[compile_command.index("--sequence-length") + 1] == "128"
    assert "--compiler-arg=matmult" in compile_command and "--compiler-arg=bf16" in compile_command


def test_the_report_reads_each_level_against_neurons_figure():
    run = {"concurrency": 64, "throughput_rps": 2654.0, "p50_ms": 20.0, "p95_ms": 30.0, "p99_ms": 40.0, "errors": 0}
    text = neuron_bench.report({"layers": 6, "ready_s": 12.0, "stop_s": 3.0, "runs": [run]})
    assert "5,308 inferences/s" in text and "| 50%" in text and "SIGTERM to exit 3.0 s" in text
