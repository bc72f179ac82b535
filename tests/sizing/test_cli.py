"""`python -m gpu_inference_constructs.sizing`: JSON field names, the cdk.json snippet round trip,
--measured from a bench JSON, the PNG, and clear errors for bad arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench.config import BenchConfig
from bench.loadgen import LoadResult
from bench.run import setup_info
from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.sizing.cli import main
from gpu_inference_constructs.sizing.safetensors_header import read_header
from stacks.config import load_environment
from tests.conftest import scenario_context
from tests.scenarios import scenario_environment, write_scenario_cdk_json

ROOT = Path(__file__).resolve().parents[2]


def run_json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def minilm_args(minilm, *extra):
    return ["--model-dir", str(minilm), "--dtype", "fp16", "--requests-per-second", "500", "--p95-ms", "100", *extra]


def test_json_has_the_field_names_scripts_read(capsys, minilm):
    data = run_json(capsys, *minilm_args(minilm))
    entry = next(e for e in data["instance_types"] if e["instance_type"] == "g4dn.xlarge")
    for key in (
        "instance_type",
        "fits",
        "reason",
        "gpus_per_task",
        "decode_tokens_per_second_ceiling",
        "usd_per_million_requests",
    ):
        assert key in entry
    assert set(entry["usd_per_million_requests"]) == {"on_demand", "spot", "mix"}
    assert entry["fits"] is True and entry["decode_tokens_per_second_ceiling"] is None  # an encoder decodes nothing
    assert entry["throughput"]["source"] == "estimate" and "estimate:" in entry["throughput"]["formula"]
    assert set(data["recommendation"]) >= {"capacity", "model"}


def test_the_recommended_snippet_round_trips_through_the_apps_config_loader(capsys, minilm):
    recommendation = run_json(capsys, *minilm_args(minilm, "--name", "minilm"))["recommendation"]
    capacity, model = recommendation["capacity"], recommendation["model"]
    assert capacity["instance_types"][0] == "g4dn.xlarge"  # the cheapest with a throughput
    assert capacity["instance_types"] == [
        "g4dn.xlarge",
        "g6.xlarge",
        "g5.xlarge",
    ]  # one shape (4 vCPU, 16 GiB, 1 GPU), by cost
    # From the slowest listed type: the g5's A10G at its 62.5 TFLOPS estimate, 32 texts per 32 x 6.13 GFLOP / 31.25
    # TFLOPS = 5,096.5 req/s, below the server's 5,252 (the g4dn and g6 are capped there).
    per_request = 2 * (22_713_216 - (30522 + 512) * 384) * 256 + 4 * 6 * 256**2 * 384
    assert model["scaling"]["requests_per_target_per_minute"] == int(62.5e12 * 0.5 / per_request * 0.7 * 60) == 214_054
    dev = scenario_environment("dev")
    dev["capacity"], dev["models"] = capacity, [model]
    config = load_environment("dev", dev)
    assert config.capacity.instance_types == tuple(capacity["instance_types"])
    bundled = config.server_config(config.models[0]).bundled
    assert bundled is not None  # the advisor recommends the bundled server for an encoder
    assert config.models[0].name == "minilm" and bundled.max_batch_size == model["max_batch_size"]
    assert config.models[0].scaling.requests_per_target_per_minute == model["scaling"]["requests_per_target_per_minute"]


def synthesized_task_definitions(environment: str, config) -> list[dict]:
    import aws_cdk as cdk

    from stacks.stage import InferenceStage

    app = cdk.App(context=scenario_context())
    stage = InferenceStage(app, config)
    app.synth()
    return [
        resource["Properties"]
        for stack in stage.synth().stacks
        for resource in stack.template["Resources"].values()
        if resource["Type"] == "AWS::ECS::TaskDefinition"
    ]


def test_an_llm_snippet_is_a_vllm_block_on_its_own_capacity_group_that_loads_and_synthesizes(capsys, llama_7b):
    data = run_json(
        capsys,
        "--model-dir",
        str(llama_7b),
        "--tokens-per-request",
        "512,256",
        "--concurrency",
        "8",
        "--requests-per-second",
        "2",
        "--p95-ms",
        "30000",
        "--name",
        "llama-2-7b",
    )
    recommendation = data["recommendation"]
    model, capacity = recommendation["model"], recommendation["capacity"]
    best = next(e for e in data["instance_types"] if e["instance_type"] == capacity["instance_types"][0])
    assert model["gpus"] == best["gpus_per_task"] == 1
    assert model["vllm"] | {"image": None, "fetcher_image": None, "collector_image": None} == {
        "image": None,
        "fetcher_image": None,
        "collector_image": None,
        "max_model_len": 512 + 256,
        "max_num_seqs": 8,
        "dtype": "float16",
        "gpu_memory_utilization": 0.9,
        "shared_memory_mib": 3072,
    }
    assert "task" not in model and "max_batch_size" not in model  # the bundled server's keys
    assert recommendation["capacity_groups"] == {"llm": {"capacity": capacity, "models": ["llama-2-7b"]}}
    assert not any("bundled server" in note or "your own image" in note for note in recommendation["notes"])
    g5 = next(e for e in data["instance_types"] if e["instance_type"] == "g5.xlarge")
    assert g5["decode_tokens_per_second_ceiling"] == pytest.approx(600e9 / (6_738_415_616 * 2), rel=1e-4)
    assert g5["usd_per_million_tokens"]["mix"] is not None
    dev = scenario_environment("dev")
    dev["capacity_groups"], dev["models"] = recommendation["capacity_groups"], [model]
    config = load_environment("dev", dev)
    vllm = config.server_config(config.models[0]).vllm
    assert vllm is not None  # the advisor recommends vLLM for an LLM
    assert vllm.max_num_seqs == 8 and config.model_placement() == {"llama-2-7b": "llm"}
    (task,) = synthesized_task_definitions("dev", config)
    server = next(c for c in task["ContainerDefinitions"] if c["Name"] == "server")
    assert server["EntryPoint"] == ["vllm", "serve"]
    assert server["Command"][server["Command"].index("--tensor-parallel-size") + 1] == "1"
    assert server["Command"][server["Command"].index("--max-model-len") + 1] == "768"
    assert server["ResourceRequirements"] == [{"Type": "GPU", "Value": "1"}]
    assert {c["Name"] for c in task["ContainerDefinitions"]} == {
        "server",
        "scratch-owner",
        "model-fetch",
        "metrics-collector",
    }


def test_a_snippet_with_several_gpus_per_task_sets_gpus_and_loads(capsys, llama_13b):
    """13B in FP16 fits no single 24 GB A10G: two of a g5.12xlarge's four per task, and the block must say so
    (a block without gpus would load as 1-GPU tasks and still validate)."""
    data = run_json(
        capsys,
        "--model-dir",
        str(llama_13b),
        "--tokens-per-request",
        "512,256",
        "--concurrency",
        "8",
        "--requests-per-second",
        "1",
        "--p95-ms",
        "60000",
        "--instance-types",
        "g5.12xlarge",
        "--name",
        "llama-2-13b",
    )
    (g5,) = data["instance_types"]
    recommendation = data["recommendation"]
    model = recommendation["model"]
    assert g5["gpus_per_task"] == 2 and g5["tasks_per_instance"] == 2
    assert model["gpus"] == 2 and recommendation["capacity"]["instance_types"] == ["g5.12xlarge"]
    staging = scenario_environment("staging")
    staging["capacity_groups"] = recommendation["capacity_groups"]
    staging["models"] = [m for m in staging["models"] if m["name"] != "llama-13b"] + [model]
    config = load_environment("staging", staging)
    loaded = next(m for m in config.models if m.name == "llama-2-13b")
    assert loaded.gpus == 2 and config.server_config(loaded).vllm is not None
    # Two tasks per instance, sidecars included, beside what the agent keeps.
    instance = config.group_capacity("llm").smallest_instance_type()
    cpu, memory = config.server_of(loaded).sidecar_reservation
    assert 2 * (loaded.cpu + cpu) + 512 <= instance.task_cpu_limit_units
    assert 2 * (loaded.memory_mib + memory) <= instance.task_memory_limit_mib


def bench_json(path: Path, gpu: str | None, runs: list[tuple[int, float, float, int]]) -> Path:
    """The JSON bench/run.py writes: setup_info, runs of LoadResult.as_dict() per system, and gpu_bench's device
    name."""
    cfg = replace(BenchConfig(), device="cuda" if gpu else "cpu", max_batch_size=64)
    results = {"setup": setup_info(cfg, "/tmp/model"), "raw_model": None, "runs": []}
    for clients, rps, p95, errors in runs:
        result = LoadResult(
            concurrency=clients,
            duration_s=10.0,
            requests=int(rps * 10),
            errors=errors,
            connections=clients,
            throughput_rps=rps,
            p50_ms=p95 / 2,
            p95_ms=p95,
            p99_ms=p95 * 1.5,
            client_cpu_s=1.0,
            server_cpu_s=2.0,
        )
        results["runs"].append({"system": "ours", "model": "distilbert", **result.as_dict()})
        results["runs"].append(
            {"system": "ours", "model": "null", **replace(result, throughput_rps=rps * 10).as_dict()}
        )
    if gpu:
        results["gpu"] = gpu
    path.write_text(json.dumps(results))
    return path


def test_measured_throughput_replaces_the_estimate_for_that_gpu(capsys, minilm, tmp_path):
    measured = bench_json(
        tmp_path / "bench.json",
        "NVIDIA A10G",
        [(1, 100.0, 12.0, 0), (32, 900.0, 60.0, 0), (128, 1400.0, 150.0, 0), (64, 1300.0, 90.0, 5)],
    )
    data = run_json(
        capsys,
        *minilm_args(
            minilm,
            "--requests-per-second",
            "2000",
            "--measured",
            str(measured),
            "--on-demand-base",
            "1",
            "--on-demand-percent",
            "50",
        ),
    )
    g5 = next(e for e in data["instance_types"] if e["instance_type"] == "g5.xlarge")
    # the best level with p95 <= 100 ms and no errors: 900 req/s at 32 clients (64 clients had errors)
    assert g5["throughput"]["source"] == "measured" and g5["throughput"]["requests_per_second_per_task"] == 900.0
    assert g5["tasks"] == 4 and g5["instances"] == 4  # 2000 / (900 x 0.7) = 3.17
    on_demand = 1 + 2  # base 1, then 50% of the 3 above it, rounded up
    hourly = on_demand * 1.006 + 1 * 1.006 * 0.4
    assert g5["usd_per_million_requests"]["mix"] == pytest.approx(hourly / (2000 * 3600) * 1e6, rel=1e-4)
    assert g5["usd_per_million_requests"]["on_demand"] == pytest.approx(4 * 1.006 / 7.2, rel=1e-4)
    t4 = next(e for e in data["instance_types"] if e["instance_type"] == "g4dn.xlarge")
    assert t4["throughput"]["source"] == "estimate"
    assert data["measured"]["max_batch_size"] == 64 and data["measured"]["gpu_model"] == "NVIDIA A10G"


def test_measured_is_refused_for_an_llm_saying_which_format_it_reads(capsys, llama_7b, tmp_path):
    """Neither benchmark measures an LLM; the refusal says what a --measured file must hold and what to do instead."""
    measured = bench_json(tmp_path / "bench.json", "NVIDIA A10G", [(8, 900.0, 60.0, 0)])
    assert (
        main(
            [
                "--model-dir",
                str(llama_7b),
                "--tokens-per-request",
                "512,256",
                "--requests-per-second",
                "2",
                "--p95-ms",
                "30000",
                "--measured",
                str(measured),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--measured: " in err and "an LLM's throughput cannot be measured with the files this reads" in err
    for field in ('"runs"', '"system": "ours"', '"throughput_rps"', '"p95_ms"', '"gpu"', "--measured-on"):
        assert field in err, field
    assert "For an LLM drop --measured" in err


def test_a_file_that_is_not_a_bench_result_is_refused_with_the_format(capsys, minilm, tmp_path):
    (tmp_path / "other.json").write_text('{"results": []}')
    assert main(minilm_args(minilm, "--measured", str(tmp_path / "other.json"))) == 2
    err = capsys.readouterr().err
    assert "is not a benchmark result: expected the JSON that make bench or python -m bench.gpu_bench writes" in err
    assert '"throughput_rps"' in err


def test_a_cpu_bench_needs_measured_on_and_a_tesla_t4_name_maps_to_the_catalog(capsys, minilm, tmp_path):
    cpu = bench_json(tmp_path / "cpu.json", None, [(8, 60.0, 40.0, 0)])
    assert main(minilm_args(minilm, "--measured", str(cpu))) == 2
    assert "was measured on 'cpu'" in capsys.readouterr().err
    data = run_json(capsys, *minilm_args(minilm, "--measured", str(cpu), "--measured-on", "g6.xlarge"))
    assert (
        next(e for e in data["instance_types"] if e["instance_type"] == "g6.xlarge")["throughput"]["source"]
        == "measured"
    )
    t4 = bench_json(tmp_path / "t4.json", "Tesla T4", [(8, 300.0, 40.0, 0)])
    data = run_json(capsys, *minilm_args(minilm, "--measured", str(t4)))
    assert (
        next(e for e in data["instance_types"] if e["instance_type"] == "g4dn.xlarge")["throughput"][
            "requests_per_second_per_task"
        ]
        == 300.0
    )


def test_the_plot_is_a_valid_png(capsys, minilm, tmp_path):
    png = tmp_path / "sizing.png"
    assert main(minilm_args(minilm, "--plot", str(png))) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) > 10_000
    assert "wrote" in capsys.readouterr().out


def test_plot_without_matplotlib_says_how_to_get_it(capsys, minilm, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(minilm_args(minilm, "--plot", str(tmp_path / "x.png"))) == 2
    assert "--plot: needs matplotlib" in capsys.readouterr().err


def test_environment_settings_come_from_cdk_json(capsys, minilm, tmp_path):
    data = run_json(
        capsys, *minilm_args(minilm, "--environment", "dev", "--cdk-json", str(write_scenario_cdk_json(tmp_path)))
    )
    dev = scenario_environment("dev")
    assert data["purchase"]["region"] == dev["region"]
    assert data["purchase"]["on_demand_base"] == dev["capacity"]["on_demand_base_capacity"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--requests-per-second", "10"], "--model-dir: describe the model"),
        (["--params", "7e9", "--requests-per-second", "10"], "--params: with --params also give --dtype"),
        (
            [
                "--params",
                "7e9",
                "--dtype",
                "fp16",
                "--kind",
                "llm",
                "--requests-per-second",
                "1",
                "--tokens-per-request",
                "1,1",
            ],
            "--layers: an LLM's KV cache needs its geometry",
        ),
        (
            ["--params", "1e8", "--dtype", "fp16", "--kind", "encoder", "--requests-per-second", "0"],
            "--requests-per-second: 0.0 must be greater than 0",
        ),
        (
            [
                "--params",
                "1e8",
                "--dtype",
                "fp16",
                "--kind",
                "encoder",
                "--requests-per-second",
                "5",
                "--tokens-per-request",
                "x",
            ],
            "--tokens-per-request: 'x'",
        ),
        (
            [
                "--params",
                "1e8",
                "--dtype",
                "fp16",
                "--kind",
                "encoder",
                "--requests-per-second",
                "5",
                "--region",
                "mars-1",
            ],
            "--region:",
        ),
        (
            [
                "--params",
                "1e8",
                "--dtype",
                "fp16",
                "--kind",
                "encoder",
                "--requests-per-second",
                "5",
                "--price",
                "g5.xlarge=cheap",
            ],
            "--price:",
        ),
        (
            [
                "--params",
                "1e8",
                "--dtype",
                "fp16",
                "--kind",
                "encoder",
                "--requests-per-second",
                "5",
                "--measured",
                "/nonexistent.json",
            ],
            "--measured: '/nonexistent.json' does not exist",
        ),
        (
            [
                "--params",
                "1e8",
                "--dtype",
                "fp16",
                "--kind",
                "encoder",
                "--requests-per-second",
                "5",
                "--environment",
                "nope",
            ],
            "--environment: unknown environment 'nope'",
        ),
        (
            ["--model-dir", "/nonexistent", "--requests-per-second", "5"],
            "--model-dir: '/nonexistent' is not a directory",
        ),
        (
            [
                "--params",
                "1e8",
                "--dtype",
                "fp16",
                "--kind",
                "encoder",
                "--requests-per-second",
                "5",
                "--plot",
                "out.jpg",
            ],
            "--plot: 'out.jpg': give a .png",
        ),
    ],
)
def test_bad_arguments_get_a_clear_error(capsys, argv, message, tmp_path):
    if "--environment" in argv:  # the scenarios' cdk.json, not the one in the working directory
        argv = [*argv, "--cdk-json", str(write_scenario_cdk_json(tmp_path))]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_argparse_refuses_a_missing_rate_and_an_unknown_dtype(capsys):
    for argv in (["--params", "1e8"], ["--params", "1e8", "--dtype", "fp8", "--requests-per-second", "1"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2


def test_a_truncated_safetensors_file_is_refused(tmp_path, minilm):
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes((minilm / "model.safetensors").read_bytes()[:4096])
    with pytest.raises(ConfigError, match=r"broken\.safetensors: .*does not fit"):
        read_header(broken)
    broken.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(ConfigError, match=r"broken\.safetensors: .*not JSON"):
        read_header(broken)


def test_the_module_runs_as_a_command_without_torch(minilm):
    code = (
        "import sys, runpy; sys.modules['torch'] = None; sys.argv = ['sizing', '--model-dir', sys.argv[1], '--dtype', "
        "'fp16', '--requests-per-second', '100', '--json']; runpy.run_module('gpu_inference_constructs.sizing', "
        "run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(minilm)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["recommendation"]["capacity"]["instance_types"]


def test_prod_environment_mix_is_read_with_the_librarys_loader(capsys, minilm, tmp_path):
    """A cdk.json with an On-Demand base and share: the advisor's mix uses them, and the snippet keeps the base."""
    env = scenario_environment("dev")
    env["capacity"].update(on_demand_base_capacity=1, on_demand_percentage_above_base=50)
    env.setdefault("monitoring", {})["spot_price_fraction"] = 0.3
    path = write_scenario_cdk_json(tmp_path, {"mixed": env})
    data = run_json(
        capsys,
        *minilm_args(minilm, "--requests-per-second", "13000", "--environment", "mixed", "--cdk-json", str(path)),
    )
    assert data["purchase"] == {
        "region": "us-east-1",
        "on_demand_base": 1,
        "on_demand_percent": 50,
        "spot_fraction": 0.3,
        "prices": {},
    }
    t4 = next(e for e in data["instance_types"] if e["instance_type"] == "g4dn.xlarge")
    n = t4["instances"]  # 13000 / (5252 x 0.7) = 3.54 -> 4
    assert n == 4
    on_demand = 1 + 2  # the base, then half of the 3 above it rounded up
    assert t4["hourly_usd"]["mix"] == pytest.approx(on_demand * 0.526 + (n - on_demand) * 0.526 * 0.3)
    assert data["recommendation"]["capacity"]["on_demand_base_capacity"] == 1
    assert data["recommendation"]["capacity"]["on_demand_percentage_above_base"] == 50


def test_the_sizing_pages_llm_snippet_is_what_the_advisor_prints(capsys):
    """docs/sizing.md: the 7B command's recommended blocks, as printed there."""
    import re

    section = (ROOT / "docs" / "sizing.md").read_text()
    command_match = re.search(r"sizing (--params 6.74e9 .*?) --plot", section, re.S)
    snippet_match = re.search(r"For the 7B example above:\n\n```json\n(.*?)```", section, re.S)
    assert command_match is not None and snippet_match is not None, "docs/sizing.md lost its 7B example"
    command = command_match.group(1)
    snippet = json.loads("{" + snippet_match.group(1) + "}")
    recommendation = run_json(capsys, *command.replace("\\\n", " ").split())["recommendation"]
    assert snippet == {"capacity_groups": recommendation["capacity_groups"], "models": [recommendation["model"]]}
