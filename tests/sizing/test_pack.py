"""`python -m gpu_inference_constructs.sizing pack`: shares, packing and price split against arithmetic done by hand
from the rules in sizing/pack.py's docstring; the refusals; the fragment through the app's own loader; docs/sizing.md's
table."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest

from gpu_inference_constructs.core.errors import ConfigError
from gpu_inference_constructs.sizing import Purchase
from gpu_inference_constructs.sizing.cli import main
from gpu_inference_constructs.sizing.pack import pack, parse_models, read_models, validate

ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20
# MiniLM-class, as the issue gives it: --params 22000000 --dtype fp16 --kind encoder --layers 6 --hidden-size 384
# --heads 12 --intermediate-size 1536 --requests-per-second 50 --p95-ms 100 (256 tokens, batch 32: the server's
# defaults).
ENCODER = {
    "params": 22000000,
    "dtype": "fp16",
    "kind": "encoder",
    "layers": 6,
    "hidden-size": 384,
    "heads": 12,
    "intermediate-size": 1536,
    "requests-per-second": 50,
    "p95-ms": 100,
}

# A share's MaxComputePercent caps its task even on an idle GPU, so its largest batch sizes it: at the server's default
# 32 a MiniLM-class share needs 24 % of a T4 (below); the packing tests give the models the largest batch their 50
# req/s needs, 4 (max_batch_size in MODELS.json and in the fragment), and 3 % holds it.
SMALL_BATCH = {"max-batch-size": 4}

# By hand, one MiniLM-class model on a T4 (g4dn.xlarge):
WEIGHTS = 22e6 * 2  # bytes
ACTIVATIONS = (
    32 * 256 * 2 * (4 * 384 + 1536 + 12 * 256)
)  # batch x tokens x bytes x (4h + intermediate + heads x tokens)
NEED_MIB = (WEIGHTS + ACTIVATIONS) / MIB  # 137.96 MiB
ALLOCATOR_MIB = max(40, 0.25 * NEED_MIB)  # 25 % is 34.5 MiB: the 40 MiB floor (two 20 MiB segments) binds
SHARE_MIB = math.ceil((NEED_MIB + ALLOCATOR_MIB + 512 + 9.125) / 256) * 256  # 699.1 MiB -> 768
PER_REQUEST = 2 * 22e6 * 256 + 4 * 6 * 256**2 * 384  # FLOPs: 11.87 GFLOP
T4 = 65e12 * 0.5  # dense FP16 tensor x efficiency
T4_RPS = 32 / max(32 * PER_REQUEST / T4, WEIGHTS / (320e9 * 0.5))  # batch 32: 11.68 ms -> 2,738.5 req/s
BATCH_MS = max(32 * PER_REQUEST / T4, WEIGHTS / (320e9 * 0.5)) * 1000  # the largest batch, 32: 11.69 ms
UTILISATION = 50 / T4_RPS  # 1.83 %
# At p % of the SMs a pass takes 100 / p times as long; two passes of the largest batch within p95 less the 2 ms wait:
COMPUTE_PERCENT = math.ceil(max(100 * UTILISATION / 0.7, 100 * 2 * BATCH_MS / (100 - 2)))  # max(2.61, 23.85) -> 24
SMALL_BATCH_PERCENT = math.ceil(max(100 * UTILISATION / 0.7, 100 * 2 * 4 * PER_REQUEST / T4 * 1000 / 98))  # 2.98 -> 3
TASK_MEMORY_MIB = math.ceil((463 + 81 + 512 + WEIGHTS / MIB) / 256) * 256  # 1,098 MiB -> 1,280
G4DN_XLARGE = 0.526  # USD per hour, us-east-1 On-Demand (the catalog)


def encoders(count: int, **changes) -> list[dict]:
    return [{**ENCODER, **SMALL_BATCH, "name": f"encoder-{i:02d}", **changes} for i in range(1, count + 1)]


def on(instance_type: str, models: list[dict]):
    result = pack(parse_models(models), Purchase(), only=[instance_type])
    (packed,) = result.types
    return result, packed


def placement(packed) -> list[list[list[str]]]:
    return [[[p.share.name for p in gpu] for gpu in instance.gpus] for instance in packed.instances]


def test_one_minilm_class_share_on_a_t4_by_hand():
    assert NEED_MIB == pytest.approx(137.96, abs=0.01) and SHARE_MIB == 768
    assert T4_RPS == pytest.approx(2738.5, abs=0.1) and UTILISATION == pytest.approx(
        0.01826, abs=1e-5
    )  # the 1.8 %
    assert COMPUTE_PERCENT == 24 and SMALL_BATCH_PERCENT == 3 and TASK_MEMORY_MIB == 1280
    _, packed = on("g4dn.xlarge", [{**ENCODER, "name": "encoder-01"}])
    (share,) = packed.shares
    assert share.need_mib == pytest.approx(NEED_MIB) and share.allocator_mib == ALLOCATOR_MIB == 40
    assert share.memory_mib == SHARE_MIB
    assert share.utilisation == pytest.approx(UTILISATION)
    assert share.throughput_percent == pytest.approx(100 * UTILISATION / 0.7) == pytest.approx(2.608, abs=1e-3)
    assert share.latency_percent == pytest.approx(100 * 2 * BATCH_MS / 98) == pytest.approx(23.85, abs=1e-2)
    assert share.compute_percent == COMPUTE_PERCENT
    assert share.cpu == 256  # 1024 x 50 / (5,252 x 0.7) = 14 units, at least 256
    assert share.task_memory_mib == TASK_MEMORY_MIB
    # One task on its 24 % sustains 2,738.5 x 0.24 = 657 req/s: scaling's target is 70 % of it a minute.
    assert share.requests_per_second_per_task == pytest.approx(T4_RPS * 0.24)
    assert "latency 23.85 % (= 100 x 2 x 11.69 ms, a batch of 32 on the whole GPU, / 98 ms" in share.compute_formula()
    (small,) = on("g4dn.xlarge", encoders(1))[1].shares
    assert small.compute_percent == SMALL_BATCH_PERCENT and small.largest_batch == 4
    assert share.memory_formula() == (
        "768 MiB = 138 MiB weights and activations (the advisor's estimate) + 40 allocator "
        "reserve (estimated) + 512 CUDA context (estimated) + 9.125 cuBLAS workspaces "
        "(documented), rounded up to 256"
    )


def test_twenty_encoders_pack_onto_two_g4dn_xlarge_at_under_30_cents_per_million():
    """The issue's acceptance, at the largest batch their rate needs (4). Per g4dn.xlarge, by hand: host memory 14,745
    MiB / 1,280 = 11 tasks binds (CPU 3,584 / 256 = 14, GPU 13,132 / 768 = 17, compute 100 / 3 = 33), so first fit
    takes 11 + 9 = 2 instances, spread 10 + 10."""
    assert (16 * 1024 * 0.9) // TASK_MEMORY_MIB == 11 and (4 * 1024 - 512) // 256 == 14
    assert int((15360 - 512 - 256) * 0.9) // SHARE_MIB == 17 and 100 // SMALL_BATCH_PERCENT == 33
    result, packed = on("g4dn.xlarge", encoders(20))
    assert len(packed.instances) == 2 and packed.placement == "spread"
    assert [len(i.tasks) for i in packed.instances] == [10, 10]
    assert packed.hourly_usd["on_demand"] == pytest.approx(2 * G4DN_XLARGE)
    each = G4DN_XLARGE / 10 / (50 * 3600) * 1e6  # identical tasks split an instance evenly: $0.2922
    for name, usd in packed.usd_per_million_requests.items():
        assert usd["on_demand"] == pytest.approx(each) == pytest.approx(0.2922, abs=1e-4), name
        assert usd["on_demand"] <= 0.30
        assert usd["spot"] == pytest.approx(each * 0.4)
    dedicated = G4DN_XLARGE / (50 * 3600) * 1e6  # one whole g4dn.xlarge per model: $2.92
    assert dedicated == pytest.approx(2.9222, abs=1e-4)
    assert all(
        a is not None and a.usd_per_million_requests["on_demand"] == pytest.approx(dedicated)
        for a in result.dedicated.values()
    )
    assert packed.dedicated_hourly_usd["on_demand"] == pytest.approx(20 * G4DN_XLARGE)


def test_across_the_regions_types_the_twenty_cost_at_most_30_cents_and_need_at_most_two_g4dn_xlarge():
    result = pack(parse_models(encoders(20)), Purchase(region="us-east-1"))
    best = result.best
    assert best is not None and all(u["on_demand"] <= 0.30 for u in best.usd_per_million_requests.values())
    g4dn = next(t for t in result.types if t.name == "g4dn.xlarge")
    assert len(g4dn.instances) == 2
    # The cheapest packing: one g6.2xlarge (8 vCPU, 32 GiB, one L4) at $0.9776 holds all twenty, below 2 x $0.526.
    assert best.name == "g6.2xlarge" and len(best.instances) == 1
    assert best.hourly_usd["on_demand"] == pytest.approx(0.9776) and 0.9776 < 2 * G4DN_XLARGE
    each = 0.9776 / 20 / (50 * 3600) * 1e6  # $0.2716, as docs/sizing.md says
    assert (
        best.usd_per_million_requests["encoder-01"]["on_demand"]
        == pytest.approx(each)
        == pytest.approx(0.2716, abs=1e-4)
    )
    assert result.types == sorted(
        result.types, key=lambda t: (not t.fits, t.hourly_usd.get("on_demand", math.inf), t.name)
    )


def test_an_instances_host_memory_and_cpu_units_each_bind():
    """Twelve encoders: 12 x 1,280 = 15,360 MiB > 14,745 a g4dn.xlarge's tasks may reserve, though 12 x 256 = 3,072 of
    3,584 CPU units and 12 x 768 of 13,824 MiB of GPU memory fit: two instances. Fifteen at 512 MiB: 7,680 MiB fits,
    15 x 256 = 3,840 > 3,584 units does not: two instances. Each task's collector (64 units, 128 MiB) counts: eleven
    at 512 MiB fit one (11 x 320 = 3,520 units), twelve do not (3,840)."""
    assert 12 * TASK_MEMORY_MIB > int(16 * 1024 * 0.9) and 12 * 256 <= 3584
    _, packed = on("g4dn.xlarge", encoders(12))
    assert [len(i.tasks) for i in packed.instances] == [6, 6]
    assert 15 * 256 > 3584 and 15 * 512 <= int(16 * 1024 * 0.9)
    _, packed = on("g4dn.xlarge", encoders(15, memory_mib=512))
    assert [len(i.tasks) for i in packed.instances] == [8, 7]
    _, packed = on("g4dn.xlarge", encoders(11, memory_mib=512))
    assert [len(i.tasks) for i in packed.instances] == [11]
    _, packed = on("g4dn.xlarge", encoders(12, memory_mib=512))
    assert [len(i.tasks) for i in packed.instances] == [6, 6]


def test_a_gpu_takes_at_most_48_mps_clients():
    """Fifty encoders at 512 MiB on a g6e.8xlarge (32 vCPUs, 256 GiB, one L40S): GPU memory 46,068 x 0.9 = 41,461 MiB
    holds 53 shares of 768, CPU 32 x 1,024 - 512 = 32,256 units holds 126, compute (1 % each on the L40S) 100: only
    NVIDIA MPS's 48 clients per GPU stops the fiftieth, so two instances, spread 25 and 25."""
    assert int(46068 * 0.9) // 768 == 53 and (32 * 1024 - 512) // 256 == 126
    _, packed = on("g6e.8xlarge", encoders(50, memory_mib=512))
    assert {s.compute_percent for s in packed.shares} == {1}
    assert [len(i.tasks) for i in packed.instances] == [25, 25]


def test_first_fit_decreasing_packs_the_largest_share_first_then_spreads():
    """Three 'wide' encoders (512 tokens, batch 128: activations 128 x 512 x 2 x (4 x 384 + 1536 + 12 x 512) bytes =
    1,152 MiB, need 1,194, + 25 % = 1,492, + 521.1 = 2,014 -> 2,048 MiB) and twelve of 768 MiB, tasks of 256 units and
    512 MiB so that GPU memory binds: 3 x 2,048 + 12 x 768 = 15,360 MiB > 13,824 on one T4, so at least 2 instances.
    First fit decreasing: the three wide ones and ten small on the first (6,144 + 7,680 = 13,824), two on the second.
    Spread on those two: wide to the instance with the fewest tasks (0, 1, then 0 on a tie), then the small ones."""
    wide = [
        {
            **ENCODER,
            "name": f"wide-{i}",
            "tokens_per_request": 512,
            "max_batch_size": 128,
            "p95-ms": 2000,
            "cpu": 256,
            "memory_mib": 512,
        }
        for i in range(3)
    ]
    small = [{**ENCODER, **SMALL_BATCH, "name": f"small-{i:02d}", "cpu": 256, "memory_mib": 512} for i in range(12)]
    wide_need = (WEIGHTS + 128 * 512 * 2 * (4 * 384 + 1536 + 12 * 512)) / MIB
    assert math.ceil((wide_need + 0.25 * wide_need + 521.125) / 256) * 256 == 2048
    _, packed = on("g4dn.xlarge", small + wide)  # listed smallest first: the packing sorts
    assert {s.name: s.memory_mib for s in packed.shares}["wide-0"] == 2048
    assert len(packed.instances) == 2
    assert placement(packed) == [
        [["wide-0", "wide-2", "small-01", "small-03", "small-05", "small-07", "small-09", "small-11"]],
        [["wide-1", "small-00", "small-02", "small-04", "small-06", "small-08", "small-10"]],
    ]
    # Price split on the first instance: weights max(2,048 / 13,824, 6 / 100) = 0.1481 for a wide task and
    # max(768 / 13,824, 3 / 100) = 0.0556 for a small one; 2 x 0.1481 + 6 x 0.0556 = 0.6296 share $0.526.
    wide_w, small_w = 2048 / 13824, 768 / 13824
    # Its batch of 128 takes 128 x 24.95 GFLOP / 32.5 TFLOPS = 98.3 ms on the whole T4: 100 x 2 x 98.3 / 1,998 = 9.8 %.
    assert {s.name: s.compute_percent for s in packed.shares}["wide-0"] == 10
    first, second = 2 * wide_w + 6 * small_w, wide_w + 6 * small_w
    hourly = packed.model_hourly_usd
    assert (
        hourly["wide-0"]["on_demand"] == pytest.approx(G4DN_XLARGE * wide_w / first) == pytest.approx(0.1238, abs=1e-4)
    )
    assert hourly["small-01"]["on_demand"] == pytest.approx(G4DN_XLARGE * small_w / first)
    assert (
        hourly["wide-1"]["on_demand"] == pytest.approx(G4DN_XLARGE * wide_w / second) == pytest.approx(0.1618, abs=1e-4)
    )
    assert sum(h["on_demand"] for h in hourly.values()) == pytest.approx(2 * G4DN_XLARGE)  # paid in full


def test_compute_percents_sum_to_at_most_100_per_gpu():
    """760 req/s each: 100 x 760 / (2,738.5 x 0.7) = 39.6 -> 40 %. Memory would take all three on one T4 (3 x 768);
    compute takes two (80 %), the third (120 %) goes to a second instance."""
    assert math.ceil(100 * 760 / (T4_RPS * 0.7)) == 40
    _, packed = on("g4dn.xlarge", encoders(3, **{"requests-per-second": 760, "memory_mib": 512}))
    assert [s.compute_percent for s in packed.shares] == [40, 40, 40]
    assert placement(packed) == [[["encoder-01", "encoder-03"]], [["encoder-02"]]]
    for instance in packed.instances:
        assert sum(p.share.compute_percent for gpu in instance.gpus for p in gpu) <= 100


def test_the_price_split_takes_the_larger_of_the_memory_and_compute_fractions():
    """Two busy models (40 %, 768 MiB: compute fraction 0.40 > memory 0.0585) and two quiet ones (3 %: memory 0.0585 >
    compute 0.03) on one g4dn.xlarge, whose T4 offers shares 13,132 MiB (15,360 less 512 reserved by the driver, 256
    for the MPS server, then 10 % headroom): weights 0.40, 0.40, 0.0585, 0.0585, sum 0.9170."""
    busy = encoders(2, **{"requests-per-second": 760, "memory_mib": 512})
    quiet = [{**ENCODER, **SMALL_BATCH, "name": f"quiet-{i}", "memory_mib": 512} for i in range(2)]
    _, packed = on("g4dn.xlarge", busy + quiet)
    assert len(packed.instances) == 1
    total = 0.40 + 0.40 + 2 * 768 / 13132
    busy_hourly, quiet_hourly = G4DN_XLARGE * 0.40 / total, G4DN_XLARGE * (768 / 13132) / total  # $0.2295, $0.0335
    assert (
        packed.model_hourly_usd["encoder-01"]["on_demand"]
        == pytest.approx(busy_hourly)
        == pytest.approx(0.2295, abs=1e-4)
    )
    assert (
        packed.model_hourly_usd["quiet-0"]["on_demand"]
        == pytest.approx(quiet_hourly)
        == pytest.approx(0.0335, abs=1e-4)
    )
    assert packed.usd_per_million_requests["encoder-01"]["on_demand"] == pytest.approx(busy_hourly / (760 * 3600) * 1e6)
    assert packed.usd_per_million_requests["quiet-0"]["on_demand"] == pytest.approx(quiet_hourly / (50 * 3600) * 1e6)


def test_a_task_size_from_models_json_is_taken_as_given():
    _, packed = on("g4dn.xlarge", encoders(1, cpu=512, memory_mib=2048))
    (share,) = packed.shares
    assert (share.cpu, share.task_memory_mib, share.cpu_basis, share.memory_basis) == (
        512,
        2048,
        "MODELS.json",
        "MODELS.json",
    )


@pytest.mark.parametrize(
    ("models", "key", "fix"),
    [
        ([], "models", "at least one model"),
        ({"name": "minilm"}, "models", "list of models"),
        ([{**ENCODER, "name": "ab"}, dict(ENCODER)], r"models\[1\]\.name", "name the model"),
        ([{**ENCODER, "name": "ab"}, {**ENCODER, "name": "ab"}], r"models\[1\]\.name", "rename one"),
        ([{**ENCODER, "name": "ab", "hidden_sizes": 384}], r"models\[0\]\.hidden_sizes", "allowed keys"),
        ([{**ENCODER, "name": "ab", "hidden_size": 384}], r"models\[0\]\.hidden_size", "keep one"),
        ([{**ENCODER, "name": "Bad_Name"}], r"models\[0\]\.name", "2-40 lowercase letters"),
        ([{**ENCODER, "name": "ab", "kind": "llm"}], r"models\[0\]\.kind", "size it alone"),
        ([{**ENCODER, "name": "ab", "params": -1}], r"models\[0\]\.params", "positive number"),
        ([{**ENCODER, "name": "ab", "cpu": 100}], r"models\[0\]\.cpu", "at least 256"),
    ],
)
def test_a_bad_models_list_is_refused_naming_the_key_and_the_fix(models, key, fix):
    with pytest.raises(ConfigError, match=f"^{key}: .*{fix}"):
        pack(parse_models(models), Purchase())


def test_a_model_larger_than_any_gpu_is_refused_naming_the_key_and_the_fix():
    """30B parameters in FP16 = 55.9 GiB: no single GPU of the region (the L40S's 48 GB is the largest) holds it, and a
    share is of one GPU (the 4-GPU types would hold it only over 4 GPUs)."""
    huge = {
        "name": "huge",
        "params": 30e9,
        "dtype": "fp16",
        "kind": "encoder",
        "requests_per_second": 1,
        "p95_ms": 60000,
    }
    with pytest.raises(ConfigError, match=r"^models\[1\]\.params: .*smaller dtype"):
        pack(parse_models([{**ENCODER, "name": "small"}, huge]), Purchase())


def test_a_model_too_busy_for_one_gpu_per_task_and_a_non_cuda_type_are_refused():
    with pytest.raises(ConfigError, match=r"^models\[0\]\.dtype: .*--dtype fp16"):
        pack(parse_models([{**ENCODER, "name": "ab", "dtype": "fp32"}]), Purchase(), only=["g4dn.xlarge"])
    with pytest.raises(ConfigError, match=r"^--instance-types: .*pick CUDA types"):
        pack(parse_models(encoders(1)), Purchase(), only=["inf2.xlarge"])


def test_the_fragment_validates_and_loads_through_the_apps_config_loader():
    from stacks.config import load_environment
    from tests.scenarios import scenario_environment

    result, _ = on("g4dn.xlarge", encoders(20))
    capacity, models = validate(result)
    assert result.capacity is not None and capacity.max_capacity == result.capacity["max_capacity"] == 4
    # Deployment at peak, by hand: 20 models at max_tasks 2 and one deploying 4 = 42 tasks, 11 an instance -> 4.
    assert math.ceil((19 * 2 + 4) / 11) == 4
    assert [m.gpu_share.memory_mib for m in models if m.gpu_share] == [768] * 20
    snippet = result.snippet()
    assert snippet["capacity_groups"]["shared"]["models"] == [f"encoder-{i:02d}" for i in range(1, 21)]
    block = snippet["models"][0]
    assert block["gpu_share"] == {"memory_mib": 768, "max_compute_percent": 3}
    assert (block["cpu"], block["memory_mib"], block["min_tasks"], block["max_tasks"]) == (256, 1280, 1, 2)
    assert block["scaling"]["requests_per_target_per_minute"] == math.floor(T4_RPS * 0.03 * 0.7 * 60) == 3450
    dev = copy.deepcopy(scenario_environment("dev"))
    dev.setdefault("capacity_groups", {}).update(snippet["capacity_groups"])
    dev["models"] = [*dev.get("models", []), *snippet["models"]]
    config = load_environment("dev", dev)
    loaded = {m.name: m for m in config.models}
    assert loaded["encoder-07"].gpu_share is not None and loaded["encoder-07"].gpu_share.max_compute_percent == 3


def test_the_cli_prints_the_table_and_json_and_refuses_with_the_key(tmp_path, capsys):
    path = tmp_path / "models.json"
    path.write_text(json.dumps(encoders(2)))
    assert main(["pack", str(path), "--instance-types", "g4dn.xlarge"]) == 0
    out = capsys.readouterr().out
    assert "g4dn.xlarge  1     1     2" in out and "encoder-01  0/0       768      3          1.8%  256  1,280" in out
    assert main(["pack", str(path), "--json", "--instance-types", "g4dn.xlarge,g6.xlarge"]) == 0
    data = json.loads(capsys.readouterr().out)
    t4 = next(t for t in data["instance_types"] if t["instance_type"] == "g4dn.xlarge")
    assert t4["models"][0]["gpu_share"] == {"memory_mib": 768, "max_compute_percent": 3}
    assert set(t4["models"][0]["usd_per_million_requests"]) == {"shared", "dedicated"}
    assert data["figures"]["cuda_context_mib"]["label"] == "estimated"
    assert data["figures"]["server_processes_mib"]["label"] == "measured"
    assert data["recommendation"]["capacity_groups"]["shared"]["capacity"]["instance_types"][0] == "g4dn.xlarge"
    assert main(["pack", str(tmp_path / "missing.json")]) == 2
    assert "sizing: error: MODELS.json: " in capsys.readouterr().err
    path.write_text("[]")
    assert main(["pack", str(path)]) == 2
    assert re.search(r"sizing: error: models: .*empty", capsys.readouterr().err)
    path.write_text(json.dumps([{**ENCODER, "name": "ab", "model_dir": "nowhere"}]))
    with pytest.raises(ConfigError, match=r"^models\[0\]\.model_dir: .*not both"):
        read_models(path)


def test_the_sizing_pages_pack_output_is_what_the_tool_prints(tmp_path, capsys):
    """docs/sizing.md: the twenty-encoder command's output as printed there (the fragment's middle models elided)."""
    import contextlib
    import io
    import shlex

    page = (ROOT / "docs" / "sizing.md").read_text()
    generator = re.search(r"^\.venv/bin/python -c '(.*?)' > twenty-encoders\.json$", page, re.M)
    command = re.search(
        r"^\.venv/bin/python -m gpu_inference_constructs\.sizing (pack twenty-encoders\.json .*)$", page, re.M
    )
    shown = re.search(r"```\n(pack: 20 models on shared GPUs.*?)\n```", page, re.S)
    assert generator and command and shown, "docs/sizing.md lost its twenty-encoder example"
    written = io.StringIO()
    with contextlib.redirect_stdout(written):
        exec(generator.group(1), {})  # the page's own one-liner
    assert json.loads(written.getvalue()) == encoders(20)
    path = tmp_path / "twenty-encoders.json"
    path.write_text(written.getvalue())
    argv = [str(path) if arg == "twenty-encoders.json" else arg for arg in shlex.split(command.group(1))]
    assert main(argv) == 0
    printed = capsys.readouterr().out.rstrip("\n")
    head, elided, tail = shown.group(1).partition("\n    ...\n")
    assert elided, "the page elides the fragment's middle models with a line '    ...'"
    assert printed.startswith(head + "\n") and printed.endswith("\n" + tail), (
        "docs/sizing.md's pack output differs from what the tool prints: run the command and paste it"
    )
    assert "encoder-01  0/0       768      3          1.8%  256  1,280       0.2922          2.92" in head


def test_a_models_task_reaches_the_fragment_and_the_library_code_alike():
    """Issue 53: every model of the fragment said "task": "text-embedding", and MODELS.json refused a task, so eight
    classifiers deployed as embedders. The task is taken, and the printed library code builds the same props the
    fragment loads into through the app's loader."""
    import gpu_inference_constructs as library
    from gpu_inference_constructs.sizing.pack_code import library_code
    from stacks.config import load_environment
    from tests.scenarios import scenario_environment

    models = [*encoders(2, task="text-classification"), {**ENCODER, "name": "embedder"}]
    result, _ = on("g4dn.xlarge", models)
    snippet = result.snippet()
    assert [block["task"] for block in snippet["models"]] == ["text-classification"] * 2 + ["text-embedding"]
    assert any("embedder name no task in MODELS.json" in note for note in result.notes)
    dev = copy.deepcopy(scenario_environment("dev"))
    dev.setdefault("capacity_groups", {}).update(snippet["capacity_groups"])
    dev["models"] = [*dev.get("models", []), *snippet["models"]]
    config = load_environment("dev", dev)
    loaded = {m.name: (m, config.server_of(m).props) for m in config.models}
    code = library_code(result)
    listing = code.split("for model, server in ", 1)[1].split(":\n", 1)[0]
    names = {name: getattr(library, name) for name in library.__all__}
    printed = eval(listing, names)  # noqa: S307 (the advisor's own output)
    assert [(model, props) for model, props in printed] == [
        loaded[name] for name in ("encoder-01", "encoder-02", "embedder")
    ]
    assert printed[0][1].task == "text-classification"
    capacity = eval(code.split("props=", 1)[1].split("\n", 1)[0][:-1], names)  # noqa: S307
    assert capacity == config.capacity_groups["shared"].capacity  # type: ignore[index]


def test_a_task_the_bundled_server_does_not_know_is_refused_in_models_json():
    with pytest.raises(
        ConfigError,
        match=r"^models\[0\]\.task: 'classify': give the bundled server's task, one of .*text-classification",
    ):
        parse_models([{**ENCODER, "name": "ab", "task": "classify"}])
