"""From a load step to new capacity serving: the expected seconds of each phase for an environment's model, each
marked measured here, AWS-documented (with its source) or estimated.

``python -m gpu_inference_constructs.sizing.timeline --environment prod [--model NAME] [--startup FILE]`` prints it
for a task that lands on warm spare capacity and for one that needs a new instance, and, where the model's capacity
has a warm pool (``capacity.warm_pool``), for one whose new instance starts from the pool, with the pool's cost and
the new-instance figure against the 180 s goal (issue 44). ``--startup`` takes the JSON of
``python -m bench.startup`` (the server's own start, measured here); without it the figures of the latest bench run
recorded below are used.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..core.capacity_props import GpuCapacityProps
from ..core.errors import ConfigError
from ..core.instance_catalog import CATALOG
from ..core.monitoring_props import MonitoringProps
from ..core.settings import from_dict
from ..routing.target_health import TARGET_HEALTH_CHECK
from ..servers.bundled_signals import BundledScalingProps
from ..store.model_fetch import CHECK_PARALLEL
from .scale_out import INGEST_DELAY, PUBLISH_DELAY, ScaleOutPath
from .timeline_figures import (
    AMI_CACHED_START_S,
    DOCUMENTED,
    ECR_PULL_MB_S,
    ESTIMATED,
    GP3_BASELINE_MIB_S,
    GP3_MAX_MIB_S,
    IMAGE_GB,
    LATEST_COMPILE_STARTUP,
    LATEST_STARTUP,
    MEASURED,
    MIB,
    PIECE_FETCH_CONNECTIONS,
    S3_CONNECTION_MB_S,
    SHA256SUM_GB_S,
    SIDECAR_IMAGE_GB,
    STREAMER_GIB_S,
    VLLM_CACHED_COMPILE_S,
    VLLM_COMPILE_S,
    VLLM_LOAD_GB_S,
    WARM_START_S,
    Phase,
)
from .timeline_report import goal_line, render, warm_pool_cost


def _weights_phases(
    weights_bytes: int, storage: str, throughput_mib_s: int = GP3_BASELINE_MIB_S, vcpus: int = CHECK_PARALLEL
) -> list[Phase]:
    if storage == "gp3":  # built: the capacity's root volume at root_volume_throughput_mib_s, then model_fetch's check
        volume = (
            "a default gp3 volume"
            if throughput_mib_s <= GP3_BASELINE_MIB_S
            else "gp3 with root_volume_throughput_mib_s provisioned"
        )
        return [
            Phase(
                "weights copy",
                weights_bytes / (throughput_mib_s * MIB),
                DOCUMENTED,
                f"{weights_bytes / 1e9:.1f} GB onto {volume} at {throughput_mib_s} MiB/s (EC2 API "
                "EbsBlockDevice.Throughput)",
            ),
            Phase(
                "weights check",
                weights_bytes / (min(CHECK_PARALLEL, vcpus) * SHA256SUM_GB_S * 1e9),
                MEASURED,
                f"SHA-256 of every 16 MiB piece, {CHECK_PARALLEL} at once on the instance's {vcpus} vCPUs, at "
                f"sha256sum's {SHA256SUM_GB_S} GB/s a core (coreutils 9.1 here; a fetcher image with openssl hashes "
                "at 1.24 GB/s), read from the page cache",
            ),
        ]
    if storage in (
        "s3-parallel",
        "gp3-provisioned",
    ):  # the bundled server: ranged GETs, each piece hashed as it streams
        rate_mib_s = GP3_MAX_MIB_S if storage == "gp3-provisioned" else throughput_mib_s
        volume, network = rate_mib_s * MIB, PIECE_FETCH_CONNECTIONS * S3_CONNECTION_MB_S * 1e6
        rate = min(volume, network)
        binds = (
            f"the volume's {rate_mib_s} MiB/s"
            if volume <= network
            else f"{PIECE_FETCH_CONNECTIONS} connections at about {S3_CONNECTION_MB_S:g} MB/s each (not AWS-documented)"
        )
        return [
            Phase(
                "weights",
                max(1.0, weights_bytes / rate),
                ESTIMATED,
                f"{weights_bytes / 1e9:.1f} GB as the bundled server's {PIECE_FETCH_CONNECTIONS} parallel ranged "
                f"GETs, each 16 MiB piece hashed as it streams (no second read); bound by {binds}",
            )
        ]
    if storage == "stream":  # VllmProps(weights="stream"): vLLM's Run:ai Model Streamer, S3 to GPU memory
        return [
            Phase(
                "weights and load",
                weights_bytes / (STREAMER_GIB_S * 1024 * MIB),
                ESTIMATED,
                f"{weights_bytes / 1e9:.1f} GB streamed from S3 into GPU memory at {STREAMER_GIB_S} GiB/s (Run:ai "
                "Model Streamer's published Llama-3-8B figure on g5.12xlarge, not AWS's; a slower instance network "
                "binds lower); no copy and no digest check",
            )
        ]
    raise ConfigError("--storage", f"{storage!r}: choose gp3, gp3-provisioned, stream or s3-parallel")


def _load_and_warmup_phases(startup: dict, storage: str, compiled: bool) -> list[Phase]:
    c = LATEST_COMPILE_STARTUP
    load = (
        []
        if storage == "stream"
        else [  # the streamer loads as it reads
            Phase(
                "model load",
                c["cached_load_s"],
                MEASURED,
                f"model fetched to model loaded, restoring the compile cache its version's first task saved "
                f"({c['restore_s']:g} s) within it ({c['command']}, MiniLM on CPU)",
            )
            if compiled
            else Phase(
                "model load",
                startup["load_s"],
                MEASURED,
                f"model fetched to model loaded ({startup['command']}, "
                "MiniLM on CPU; a GPU load of a larger model is longer)",
            )
        ]
    )
    if not compiled:
        return [
            *load,
            Phase(
                "warm-up before ready",
                startup["warmup_s"],
                MEASURED,
                f"batch 1 at every length (WARMUP=first; {startup['command']})",
            ),
        ]
    return [
        *load,
        Phase(
            "warm-up before ready",
            c["cached_warmup_s"],
            MEASURED,
            f"runtime compile: ready on the eager forward, batch 1 at every length; every shape then "
            f"compiles while idle, all {c['cached_compiled_s']:g} s from the start with the cache "
            f"({c['first_compiled_s']:g} s for the version's first task, without one; {c['command']}, "
            "CPU), traffic running eagerly until its shape has; a GPU's compile (CUDA graphs, "
            "autotuning) is not measured here",
        ),
    ]


def _vllm_start_phases(weights_bytes: int, storage: str) -> list[Phase]:
    load = (
        []
        if storage == "stream"
        else [  # the streamer loads as it reads
            Phase(
                "model load",
                weights_bytes / (VLLM_LOAD_GB_S * 1e9),
                ESTIMATED,
                f"{weights_bytes / 1e9:.1f} GB of safetensors from the scratch volume's page cache into GPU memory at "
                f"about {VLLM_LOAD_GB_S:g} GB/s; not measured here",
            )
        ]
    )
    return [
        *load,
        Phase(
            "vLLM compile and CUDA graphs",
            VLLM_COMPILE_S,
            ESTIMATED,
            f"vLLM's torch.compile and CUDA-graph capture before /health answers: {VLLM_COMPILE_S:g} s "
            f"without its compile cache, {VLLM_CACHED_COMPILE_S:g} s with it (vLLM's published figures, "
            "issue 22's anchor); the cache (VLLM_CACHE_ROOT) is on the task's scratch volume, so every "
            "new task pays the first. vLLM's imports and engine start before it are not counted: no "
            "figure is measured or published for them",
        ),
    ]


def _images(sidecars: tuple[str, ...]) -> tuple[float, str]:
    """The gigabytes a task's images pull and what they are."""
    sizes = [("server", IMAGE_GB), *((name, SIDECAR_IMAGE_GB[name]) for name in sidecars)]
    return sum(gb for _, gb in sizes), " + ".join(f"{name} {gb:g} GB" for name, gb in sizes)


def _new_instance_phases(capacity: GpuCapacityProps, warm_start: bool, sidecars: tuple[str, ...]) -> list[Phase]:
    gb, images = _images(sidecars)
    reaction = Phase(
        "capacity-provider reaction",
        90.0,
        ESTIMATED,
        "managed scaling is a target tracking policy on CapacityProviderReservation, a 1-minute metric "
        "(ECS API reference, ManagedScaling); its alarm's datapoints are not documented, and ECS owns the "
        "group's desired capacity, so no policy of ours may act sooner (ECS developer guide)",
    )
    if warm_start:
        return [
            reaction,
            Phase(
                "start from the warm pool",
                WARM_START_S,
                ESTIMATED,
                "a stopped instance of the pool started and booted: the launch's boot without the first boot's "
                "work (cloud-init's per-instance modules, the root volume's first reads from the AMI's snapshot); "
                "AWS put a warm-pool start at 'as low as 30 seconds' (the feature's launch, 2021, as InfoQ "
                "reported it), not counting a GPU AMI's driver load. The launch hook's Pending:Wait is completed "
                "by the group's launch function while the instance boots",
            ),
            Phase(
                "agent registration",
                15.0,
                ESTIMATED,
                "ECS agent start and RegisterContainerInstance; ECS_WARM_POOLS_CHECK finds the target lifecycle "
                "state already InService, so the agent does not wait",
            ),
            Phase(
                "image pull",
                0.0,
                DOCUMENTED,
                "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached (ECS agent configuration) starts the task from the images the "
                f"instance pulled while it warmed: every image the task runs ({images}; ModelService prepulls each "
                "container's, GpuCapacity.prepull); an image changed since then pulls only its changed layers",
            ),
        ]
    return [
        reaction,
        Phase("instance launch", 60.0, ESTIMATED, "EC2 pending to running and the AL2023 GPU AMI's boot"),
        Phase("agent registration", 15.0, ESTIMATED, "ECS agent start and RegisterContainerInstance"),
        Phase(
            "image pull",
            AMI_CACHED_START_S,
            ESTIMATED,
            f"every image the task runs ({images}) is in the AMI (capacity.machine_image_ids) and prefer-cached "
            "uses them; a volume from "
            "a snapshot loads its blocks on first read: a PyTorch image cached on an EBS snapshot starts a pod "
            "in under 5 s (EKS blueprints, issue 22's anchor)",
        )
        if capacity.machine_image_ids
        else Phase(
            "image pull",
            gb * 1000 / ECR_PULL_MB_S,
            ESTIMATED,
            f"every image the task runs, {images} = {gb:g} GB, at {ECR_PULL_MB_S:g} MB/s pull and extract (the "
            "sidecars' before the task starts too); prefer-cached skips them only on an instance that ran them "
            "before, or with the images in the AMI (capacity.machine_image_ids)",
        ),
    ]


def timeline(
    scaling: BundledScalingProps,
    capacity: GpuCapacityProps,
    *,
    weights_bytes: int,
    storage: str,
    new_instance: bool,
    startup: dict,
    bundled_server: bool = True,
    compiled: bool = False,
    warm_start: bool = False,
    sidecars: tuple[str, ...] = ("collector",),
) -> list[Phase]:
    """The phases from a load step to the new task serving: on warm spare capacity, or (``new_instance``) on an
    instance that a scale-out launches, or (``warm_start`` too) starts from the group's warm pool. ``sidecars``: the
    images the task pulls beside the server's (SIDECAR_IMAGE_GB's names; default: the collector every task runs)."""
    if warm_start and not new_instance:
        raise ValueError("warm_start is a way of getting a new instance: pass new_instance=True with it")
    if bundled_server:
        signal = ScaleOutPath(
            "QueueBacklog",
            "step",
            scaling.queue_signal_period_seconds,
            scaling.queue_signal_periods,
            scaling.queue_signal_periods,
            "server-signal",
            "",
            0,
            "Maximum",
        )
        detection = Phase(
            "detection and alarm",
            signal.range_s()[1],
            ESTIMATED,
            f"worst phase of sizing.scale_out: {PUBLISH_DELAY['server-signal'][1]}; "
            f"{scaling.queue_signal_periods} x {scaling.queue_signal_period_seconds} s periods "
            f"(CloudWatch PutMetricAlarm, high resolution); {INGEST_DELAY[1]}",
        )
    else:
        detection = Phase(
            "detection and alarm",
            190.0,
            ESTIMATED,
            "ALB p95 latency, 2 x 60 s datapoints after ELB's first 60 s datapoint (sizing.scale_out)",
        )
    phases = [
        detection,
        Phase(
            "ECS service reaction",
            5.0,
            ESTIMATED,
            "Application Auto Scaling sets the desired count; ECS "
            "places the task, or holds it PROVISIONING when no instance has room",
        ),
    ]
    if new_instance:
        phases += _new_instance_phases(capacity, warm_start, sidecars)
    else:
        phases.append(
            Phase(
                "image pull",
                0.0,
                DOCUMENTED,
                "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached: the warm instance "
                "already has the image (ECS agent configuration)",
            )
        )
    weights = _weights_phases(
        weights_bytes, storage, capacity.root_volume_throughput_mib_s, capacity.resolve_instance_types()[0].vcpus
    )
    phases += (
        [
            Phase(
                "container start and imports",
                startup["ours_median_s"] - startup["load_s"] - startup["warmup_s"],
                MEASURED,
                f"our server's start-to-ready less load and warm-up ({startup['command']}, CPU)",
            ),
            *weights,
            *_load_and_warmup_phases(startup, storage, compiled),
        ]
        if bundled_server
        else [*weights, *_vllm_start_phases(weights_bytes, storage)]
    )
    phases += [
        Phase(
            "health checks",
            float(TARGET_HEALTH_CHECK.seconds_to_healthy),
            DOCUMENTED,
            f"the target group's {TARGET_HEALTH_CHECK.healthy_threshold} healthy checks "
            f"{TARGET_HEALTH_CHECK.interval_seconds} s apart (our template; ELB: healthy after HealthyThresholdCount "
            "consecutive successes)",
        ),
    ]
    return phases


def _environment(path: Path, name: str) -> dict:
    try:
        environments = json.loads(path.read_text())["context"]["environments"]
    except (OSError, KeyError, json.JSONDecodeError) as error:
        raise ConfigError("--cdk-json", f"{str(path)!r}: {error}") from None
    if name not in environments:
        raise ConfigError("--environment", f"unknown environment {name!r}; defined: {', '.join(environments)}")
    return environments[name]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m gpu_inference_constructs.sizing.timeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--environment", required=True)
    p.add_argument("--cdk-json", default="cdk.json")
    p.add_argument("--model", help="a model of the environment (default: its first)")
    p.add_argument("--weights-gb", type=float, default=0.1, help="the model's weights (default 0.1: MiniLM-size)")
    p.add_argument(
        "--storage",
        help="how the weights arrive; default: the model's own: s3-parallel (the bundled server's fetch onto "
        "the root volume at its provisioned rate), gp3 (the copy-to-scratch init container's copy, then "
        "check: vLLM's weights copy) or stream (vLLM's weights stream); gp3-provisioned: s3-parallel at "
        "1,000 MiB/s",
    )
    p.add_argument("--startup", help="the JSON of python -m bench.startup (default: the latest recorded run)")
    args = p.parse_args(argv)
    try:
        data = _environment(Path(args.cdk_json), args.environment)
        models = data.get("models", [])
        model = next((m for m in models if m.get("name") == args.model), None) if args.model else (models or [None])[0]
        if args.model and model is None:
            raise ConfigError("--model", f"{args.model!r} is not a model of {args.environment}")
        block = (model or {}).get("scaling", {})
        scaling = from_dict(
            BundledScalingProps,
            {key: value for key, value in block.items() if key in {f.name for f in fields(BundledScalingProps)}},
            "models[].scaling",
        )
        name = (model or {}).get("name")
        group = next((g for g in data.get("capacity_groups", {}).values() if name in g.get("models", [])), data)
        capacity = from_dict(GpuCapacityProps, group.get("capacity", {}), f"environments.{args.environment}.capacity")
        prices = from_dict(MonitoringProps, data.get("monitoring", {}), f"environments.{args.environment}.monitoring")
        on_demand = (prices.hourly_price_usd if group is data else None) or CATALOG[
            capacity.instance_types[0]
        ].on_demand_hourly_usd
        vllm = (model or {}).get("vllm")
        storage = args.storage or (("stream" if vllm.get("weights") == "stream" else "gp3") if vllm else "s3-parallel")
        if vllm and storage not in ("gp3", "stream"):
            raise ConfigError(
                "--storage",
                f"{storage!r} is the bundled server's fetch; a vLLM model's weights are "
                "copied (gp3) or streamed (stream)",
            )
        _weights_phases(1, storage)  # refuses an unknown storage
        startup = LATEST_STARTUP
        if args.startup:
            measured = json.loads(Path(args.startup).read_text())
            median = sorted(measured["ours"], key=lambda run: run["seconds"])[len(measured["ours"]) // 2]["phases"]
            startup = {
                "ours_median_s": measured["ours_median_s"],
                "bare_median_s": measured["bare_median_s"],
                "load_s": median["model loaded"] - median["model fetched"],
                "warmup_s": median["warm-up done"] - median["model loaded"],
                "command": args.startup,
            }
    except ConfigError as error:
        print(f"timeline: error: {error}", file=sys.stderr)
        return 2
    bundled = not vllm
    sidecars = (
        "collector",
        *(("log router",) if data.get("telemetry", {}).get("firelens") else ()),
        *(("fetcher",) if vllm else ()),
    )
    common: dict[str, Any] = dict(
        weights_bytes=int(args.weights_gb * 1e9),
        storage=storage,
        startup=startup,
        bundled_server=bundled,
        compiled=bundled and (model or {}).get("runtime") == "compile",
        sidecars=sidecars,
    )
    name = (model or {}).get("name", "model")
    spare = capacity.target_capacity_percent < 100
    print(
        render(
            f"{args.environment}/{name}, a task on warm spare capacity"
            + ("" if spare else " (none kept: target_capacity_percent 100)"),
            timeline(scaling, capacity, new_instance=False, **common),
        )
    )
    cold = timeline(scaling, capacity, new_instance=True, **common)
    print(render(f"{args.environment}/{name}, a task that needs a new instance", cold))
    if capacity.warm_pool is not None:
        warm = timeline(scaling, capacity, new_instance=True, warm_start=True, **common)
        print(render(f"{args.environment}/{name}, a task that needs a new instance, started from the warm pool", warm))
        print(warm_pool_cost(capacity, prices, on_demand))
        print(goal_line(f"{args.environment}/{name}", cold, warm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
