"""The advisor's timeline from a load step to serving: every phase sourced, the weights sized from cited rates."""

from __future__ import annotations

import pytest

from gpu_inference_constructs.capacity.gpu_capacity import GpuCapacityProps
from gpu_inference_constructs.servers.bundled_signals import BundledScalingProps
from gpu_inference_constructs.sizing.timeline import (
    DOCUMENTED,
    ESTIMATED,
    LATEST_COMPILE_STARTUP,
    LATEST_STARTUP,
    MEASURED,
    VLLM_COMPILE_S,
    VLLM_LOAD_GB_S,
    main,
    render,
    timeline,
)
from tests.scenarios import scenario_environments, write_scenario_cdk_json

GB_13B = 26_000_000_000


def phases(**options):
    defaults = dict(weights_bytes=100_000_000, storage="s3-parallel", new_instance=True, startup=LATEST_STARTUP)
    return timeline(BundledScalingProps(), GpuCapacityProps(), **{**defaults, **options})


def test_every_phase_has_a_basis_and_a_source_and_the_total_is_their_sum():
    steps = phases()
    assert [p.name for p in steps] == [
        "detection and alarm",
        "ECS service reaction",
        "capacity-provider reaction",
        "instance launch",
        "agent registration",
        "image pull",
        "container start and imports",
        "weights",
        "model load",
        "warm-up before ready",
        "health checks",
    ]
    assert all(p.basis in (MEASURED, DOCUMENTED, ESTIMATED) and p.source for p in steps)
    assert f"{sum(p.seconds for p in steps):.0f} s from the load step" in render("x", steps)


def test_the_detection_phase_is_the_scale_out_simulations_worst_case():
    assert (
        phases()[0].seconds == 45
    )  # 3 x 10 s periods, sample 5 s, ingestion 10 s: tests/infra/test_scale_out_simulation
    slower = timeline(
        BundledScalingProps(queue_signal_period_seconds=30),
        GpuCapacityProps(),
        weights_bytes=1,
        storage="s3-parallel",
        new_instance=False,
        startup=LATEST_STARTUP,
    )
    assert slower[0].seconds > 90


def test_a_warm_instance_skips_launch_registration_and_pull():
    names = [p.name for p in phases(new_instance=False)]
    assert "instance launch" not in names and "capacity-provider reaction" not in names
    (pull,) = [p for p in phases(new_instance=False) if p.name == "image pull"]
    assert pull.seconds == 0


def weights_seconds(steps) -> float:
    return sum(p.seconds for p in steps if p.name.startswith("weights"))


# The copy at the volume's rate, then the check: 26 GB in 16 MiB pieces hashed at sha256sum's 0.225 GB/s a core
# (measured here), however the model's files are cut: 8 at once, or as many as the instance has vCPUs (a g5.xlarge,
# the default capacity's preferred type, has 4).
CHECK_13B = 26e9 / (4 * 0.225e9)


@pytest.mark.parametrize(
    "storage, seconds",
    [
        ("gp3", GB_13B / (125 * 2**20) + CHECK_13B),
        ("s3-parallel", GB_13B / (125 * 2**20)),
        ("gp3-provisioned", GB_13B / (1000 * 2**20)),
        ("stream", GB_13B / (3.5 * 2**30)),
    ],
)
def test_13b_weights_by_storage(storage, seconds):
    assert weights_seconds(phases(weights_bytes=GB_13B, storage=storage)) == pytest.approx(seconds)


def test_the_copy_is_documented_and_the_check_measured_here():
    steps = {p.name: p for p in phases(weights_bytes=GB_13B, storage="gp3")}
    assert steps["weights copy"].basis == DOCUMENTED and "EbsBlockDevice.Throughput" in steps["weights copy"].source
    assert (
        steps["weights check"].basis == MEASURED
        and "every 16 MiB piece, 8 at once on the instance's 4 vCPUs" in steps["weights check"].source
    )


def test_an_instance_with_more_cores_checks_8_pieces_at_once():
    steps = timeline(
        BundledScalingProps(),
        GpuCapacityProps(instance_types=("g5.12xlarge",)),
        weights_bytes=GB_13B,
        storage="gp3",
        new_instance=False,
        startup=LATEST_STARTUP,
    )
    (check,) = [p for p in steps if p.name == "weights check"]
    assert check.seconds == pytest.approx(GB_13B / (8 * 0.225e9))


def test_the_check_grows_with_the_model_not_its_largest_file():
    (check,) = [p for p in phases(weights_bytes=3 * GB_13B, storage="gp3") if p.name == "weights check"]
    assert check.seconds == pytest.approx(3 * CHECK_13B)


def test_streaming_reaches_1_gb_per_second_and_the_default_gp3_copy_does_not():
    def rate(storage):
        return GB_13B / weights_seconds(phases(weights_bytes=GB_13B, storage=storage)) / 1e9

    assert rate("stream") >= 1.0 > rate("gp3")


def test_the_bundled_servers_fetch_checks_while_it_streams_at_the_volumes_provisioned_rate():
    """No check phase after the copy: each piece is hashed as it arrives. At 1,000 MiB/s the volume binds (16
    connections carry more), so the weights arrive at over 1 GB/s; on a default gp3 volume at 125 MiB/s."""
    steps = timeline(
        BundledScalingProps(),
        GpuCapacityProps(root_volume_throughput_mib_s=1000),
        weights_bytes=GB_13B,
        storage="s3-parallel",
        new_instance=False,
        startup=LATEST_STARTUP,
    )
    (weights,) = [p for p in steps if p.name.startswith("weights")]
    assert weights.seconds == pytest.approx(GB_13B / (1000 * 2**20)) and GB_13B / weights.seconds > 1e9
    assert "hashed as it streams" in weights.source and "the volume's 1000 MiB/s" in weights.source


def test_the_connections_bind_the_fetch_when_the_volume_is_faster(monkeypatch):
    from gpu_inference_constructs.sizing import timeline as module

    monkeypatch.setattr(module, "GP3_MAX_MIB_S", 4000)
    (weights,) = [p for p in phases(weights_bytes=GB_13B, storage="gp3-provisioned") if p.name == "weights"]
    assert weights.seconds == pytest.approx(GB_13B / (16 * 90e6)) and "16 connections" in weights.source


def test_the_timeline_counts_the_servers_own_number_of_connections():
    from gpu_inference_constructs.sizing.timeline import PIECE_FETCH_CONNECTIONS
    from inference_server.engine.artifacts import DOWNLOAD_WORKERS

    assert PIECE_FETCH_CONNECTIONS == DOWNLOAD_WORKERS


@pytest.fixture
def cdk_json(tmp_path) -> list[str]:
    """--cdk-json with the tests' own environments."""
    return ["--cdk-json", str(write_scenario_cdk_json(tmp_path))]


def test_cli_prints_both_paths_and_refuses_an_unknown_environment(capsys, cdk_json):
    assert main([*cdk_json, "--environment", "prod"]) == 0
    out = capsys.readouterr().out
    assert "prod/minilm, a task on warm spare capacity:" in out and "a task that needs a new instance:" in out
    assert main([*cdk_json, "--environment", "dev"]) == 0
    assert "(none kept: target_capacity_percent 100)" in capsys.readouterr().out
    assert main([*cdk_json, "--environment", "nowhere"]) == 2
    assert main([*cdk_json, "--environment", "prod", "--storage", "floppy"]) == 2


def test_provisioned_gp3_throughput_is_what_the_weights_copy_counts():
    """Built: the capacity's root_volume_throughput_mib_s (staging's llm group: 1,000 MiB/s), then the check."""
    provisioned = timeline(
        BundledScalingProps(),
        GpuCapacityProps(root_volume_throughput_mib_s=1000),
        weights_bytes=GB_13B,
        storage="gp3",
        new_instance=False,
        startup=LATEST_STARTUP,
    )
    (copy,) = [p for p in provisioned if p.name == "weights copy"]
    assert copy.seconds == pytest.approx(GB_13B / (1000 * 2**20)) and "1000 MiB/s" in copy.source
    assert weights_seconds(provisioned) == pytest.approx(GB_13B / (1000 * 2**20) + CHECK_13B)


def test_cli_reads_the_models_capacity_group(capsys, cdk_json):
    assert (
        main([*cdk_json, "--environment", "staging", "--model", "llama-13b", "--weights-gb", "26", "--storage", "gp3"])
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "at 1000 MiB/s" in out and "(none kept: target_capacity_percent 100)" in out
    )  # the llm group, not the default


def test_an_ami_with_the_images_takes_the_pull_off_a_new_instance():
    with_ami = GpuCapacityProps(machine_image_ids={"us-east-1": "ami-0123456789abcdef0"})
    steps = {
        p.name: p
        for p in timeline(
            BundledScalingProps(),
            with_ami,
            weights_bytes=100_000_000,
            storage="s3-parallel",
            new_instance=True,
            startup=LATEST_STARTUP,
        )
    }
    assert steps["image pull"].seconds == 5 and "machine_image_ids" in steps["image pull"].source
    (pull,) = [p for p in phases() if p.name == "image pull"]
    assert pull.seconds == pytest.approx(8.25 * 1000 / 60) and "machine_image_ids" in pull.source


def test_the_pull_counts_every_image_the_task_runs_and_the_pool_pulls_them_all():
    """Issue 52.7: a new instance pulls the sidecars' images too (collector 0.25 GB, log router 0.1, fetcher 0.15,
    estimates) before the task starts; one from the warm pool pulls none of them."""
    everything = ("collector", "log router", "fetcher")
    (pull,) = [p for p in phases(sidecars=everything) if p.name == "image pull"]
    assert pull.seconds == pytest.approx((8 + 0.25 + 0.1 + 0.15) * 1000 / 60)  # 141.7 s
    assert all(
        name in pull.source for name in ("server 8 GB", "collector 0.25 GB", "log router 0.1 GB", "fetcher 0.15 GB")
    )
    (warm,) = [p for p in phases(sidecars=everything, warm_start=True) if p.name == "image pull"]
    assert warm.seconds == 0 and "log router 0.1 GB" in warm.source and "prepulls each container's" in warm.source


def test_the_health_checks_are_the_target_groups_own():
    (checks,) = [p for p in phases() if p.name == "health checks"]
    assert checks.seconds == 10 and "2 healthy checks 5 s apart" in checks.source


def test_a_streamed_model_loads_as_it_reads():
    steps = {p.name: p for p in phases(weights_bytes=GB_13B, storage="stream")}
    assert "model load" not in steps and steps["weights and load"].basis == ESTIMATED
    assert "no copy and no digest check" in steps["weights and load"].source


def test_cli_takes_the_models_own_way_of_getting_its_weights(tmp_path, capsys):
    """Without --storage: a vLLM model's copy (gp3) or stream (VllmProps.weights), the bundled server's fetch."""
    environments = scenario_environments()
    args = [
        "--cdk-json",
        str(write_scenario_cdk_json(tmp_path, environments)),
        "--environment",
        "staging",
        "--weights-gb",
        "26",
    ]
    assert main([*args, "--model", "llama-13b"]) == 0
    assert "weights copy" in capsys.readouterr().out
    llama = next(m for m in environments["staging"]["models"] if m["name"] == "llama-13b")
    llama["vllm"]["weights"] = "stream"
    write_scenario_cdk_json(tmp_path, environments)
    assert main([*args, "--model", "llama-13b"]) == 0
    out = capsys.readouterr().out
    assert "weights and load" in out and "weights copy" not in out
    assert main([*args, "--model", "minilm"]) == 0
    assert "16 parallel ranged GETs" in capsys.readouterr().out
    assert main([*args, "--model", "llama-13b", "--storage", "s3-parallel"]) == 2  # the bundled server's fetch only
    assert "copied (gp3) or streamed" in capsys.readouterr().err


@pytest.mark.parametrize("storage", ["gp3", "stream"])
def test_a_vllm_model_counts_vllms_own_start_not_our_servers(storage):
    """vLLM's compile and CUDA-graph capture from its published figures, and no phase measured on our server."""
    steps = {p.name: p for p in phases(bundled_server=False, storage=storage, weights_bytes=26_000_000_000)}
    assert not {"container start and imports", "warm-up before ready"} & set(steps)
    assert all(p.basis != MEASURED or p.name == "weights check" for p in steps.values())
    start = steps["vLLM compile and CUDA graphs"]
    assert start.seconds == VLLM_COMPILE_S and start.basis == ESTIMATED and "VLLM_CACHE_ROOT" in start.source
    if storage == "gp3":
        assert (
            steps["model load"].seconds == pytest.approx(26 / VLLM_LOAD_GB_S) and steps["model load"].basis == ESTIMATED
        )
    else:  # the streamer loads as it reads
        assert "model load" not in steps and "weights and load" in steps


def test_a_compiled_model_is_ready_on_its_eager_forward_and_loads_with_its_compile_cache(tmp_path, capsys):
    steps = {p.name: p for p in phases(compiled=True)}
    warm, load = steps["warm-up before ready"], steps["model load"]
    assert warm.seconds == LATEST_COMPILE_STARTUP["cached_warmup_s"] and warm.basis == MEASURED
    assert f"all {LATEST_COMPILE_STARTUP['cached_compiled_s']:g} s from the start with the cache" in warm.source
    assert f"{LATEST_COMPILE_STARTUP['first_compiled_s']:g} s for the version's first task" in warm.source
    assert load.seconds == LATEST_COMPILE_STARTUP["cached_load_s"] != LATEST_STARTUP["load_s"]
    assert "restoring the compile cache" in load.source
    environments = scenario_environments()
    args = ["--cdk-json", str(write_scenario_cdk_json(tmp_path, environments)), "--environment", "prod"]
    assert main(args) == 0
    assert "runtime compile" not in capsys.readouterr().out
    environments["prod"]["models"][0]["runtime"] = "compile"
    write_scenario_cdk_json(tmp_path, environments)
    assert main(args) == 0
    # warm spare, a new instance, and one from prod's warm pool
    assert capsys.readouterr().out.count("runtime compile: ready on the eager forward") == 3


# --- Issue 44: a new instance from the warm pool ---------------------------------------------------------------------

# The phases every path shares after its instance, by hand from LATEST_STARTUP and the 0.1 GB default weights on a
# default gp3 volume: container start (start-to-ready less load and warm-up), weights (at least 1 s), load, warm-up, and
# the target group's two checks 5 s apart.
SERVER_S = (5.88 - 3.53 - 0.15) + max(1.0, 100_000_000 / (125 * 2**20)) + 3.53 + 0.15 + 10
# detection, ECS, managed scaling, launch, agent, the pull: the server's 8 GB and the collector's 0.25 GB
COLD_S = 45 + 5 + 90 + 60 + 15 + 8.25 * 1000 / 60 + SERVER_S
WARM_S = 45 + 5 + 90 + 40 + 15 + 0 + SERVER_S  # the instance starts from the pool (estimate) with the images on it


def test_a_warm_start_starts_a_stopped_instance_and_pulls_nothing():
    from gpu_inference_constructs.sizing.timeline import WARM_START_S

    cold, warm = phases(), phases(warm_start=True)
    assert sum(p.seconds for p in cold) == pytest.approx(COLD_S) and round(COLD_S) == 369
    assert sum(p.seconds for p in warm) == pytest.approx(WARM_S) and round(WARM_S) == 212
    assert [p.name for p in warm][2:6] == [
        "capacity-provider reaction",
        "start from the warm pool",
        "agent registration",
        "image pull",
    ]
    steps = {p.name: p for p in warm}
    assert (
        steps["start from the warm pool"].seconds == WARM_START_S == 40
        and steps["start from the warm pool"].basis == ESTIMATED
    )
    assert "as low as 30 seconds" in steps["start from the warm pool"].source
    assert steps["image pull"].seconds == 0 and "prefer-cached" in steps["image pull"].source
    assert "ECS_WARM_POOLS_CHECK" in steps["agent registration"].source
    with pytest.raises(ValueError, match=r"warm_start.*new_instance=True"):
        phases(new_instance=False, warm_start=True)


def test_the_pools_cost_is_its_stopped_root_volumes_at_the_dashboards_prices():
    from gpu_inference_constructs.capacity.warm_pool import WarmPoolProps
    from gpu_inference_constructs.observability.monitoring import MonitoringProps, warm_pool_monthly_usd
    from gpu_inference_constructs.sizing.timeline import warm_pool_cost

    prod = GpuCapacityProps(
        on_demand_base_capacity=1, max_capacity=36, root_volume_gib=150, warm_pool=WarmPoolProps(min_size=2)
    )
    assert warm_pool_monthly_usd(prod, MonitoringProps()) == pytest.approx(2 * 150 * 0.08, abs=0.01)  # $24.00
    assert warm_pool_monthly_usd(prod, MonitoringProps(gp3_gib_month_usd=0.1)) == pytest.approx(30.0, abs=0.01)
    assert warm_pool_monthly_usd(GpuCapacityProps(), MonitoringProps()) == 0  # no pool, no cost
    line = warm_pool_cost(prod, MonitoringProps(), 1.006)
    assert "= $24.00 a month" in line and "$12.00 a month each" in line
    assert f"${1.006 * 600 / 3600:.2f} at $1.006/h" in line  # one warming: 600 s On-Demand, $0.17
    assert f"${1.006 * 0.6:.2f}/h more than a Spot one" in line  # $0.60/h while a pooled instance serves


def test_cli_prints_prods_pooled_path_its_cost_and_the_goal(capsys, cdk_json):
    assert main([*cdk_json, "--environment", "prod"]) == 0
    out = capsys.readouterr().out
    assert "prod/minilm, a task that needs a new instance, started from the warm pool: 212 s from the load step" in out
    assert "warm pool: 2 stopped instance(s)" in out and "= $24.00 a month" in out
    assert (
        "prod/minilm, a task that needs a new instance: 369 s launched, 212 s from the warm pool; goal 180 s: "
        "not met, 32 s over (largest phase left: capacity-provider reaction, 90 s, estimated)"
    ) in out
    for environment in ("dev", "staging"):  # no pool: the two paths as before
        assert main([*cdk_json, "--environment", environment]) == 0
        assert "warm pool" not in capsys.readouterr().out


def test_the_goal_line_says_met_when_the_pooled_path_is_within_it():
    from gpu_inference_constructs.sizing.timeline import Phase, goal_line

    fast = [Phase("a", 100.0, ESTIMATED, "x"), Phase("b", 80.0, MEASURED, "y")]
    assert "goal 180 s: met (largest phase left: a, 100 s, estimated)" in goal_line("e/m", phases(), fast)
    assert "not met, 1 s over" in goal_line("e/m", phases(), [*fast, Phase("c", 1.0, ESTIMATED, "z")])
