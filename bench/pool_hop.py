"""The cost of model affinity's one hop, measured (bench/README.md, "Model pools"): two real pool servers (uvicorn on
loopback ports, in threads of this process) that list each other as peers, serving null models (no inference: the
HTTP and routing path alone). One client alternates, request by request, between asking a model's owner directly
and asking the other task, which forwards the request to the owner: p50/p95 of each and their difference, the added
latency of the hop.

``python -m bench.pool_hop [--requests 2000]`` prints JSON."""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx2
import orjson
import uvicorn

from inference_server.pool.affinity import candidates
from inference_server.pool.loaded import LoadedModel
from inference_server.pool.pool_settings import load_pool_settings
from inference_server.pool.registry import REGISTRY_FILE, Registry
from inference_server.pool.server import PoolServer
from inference_server.pool.store import DISK

from .null_handler import NullHandler
from .pool import _percentiles

POOL = "hop"
MODELS = [f"m{index}" for index in range(8)]


class NullLoader:
    """Loads every registered model as a NullHandler: a pool with nothing to compute."""

    def load(self, name: str, version: str) -> tuple[LoadedModel, str]:
        return LoadedModel(name, version, NullHandler(), 1 << 20, 1 << 20), DISK

    def to_device(self, model: LoadedModel) -> bool:
        return True

    def to_host(self, model: LoadedModel) -> bool:
        return True

    def unload(self, model: LoadedModel) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(stack: ExitStack, app: Any, port: int) -> None:
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, http="httptools")
    )
    thread = threading.Thread(target=server.run, name=f"pool-{port}", daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(10)

    stack.callback(stop)


def measure(requests: int) -> dict[str, Any]:
    with ExitStack() as stack, tempfile.TemporaryDirectory() as root:
        store = Path(root) / "pools" / POOL
        store.mkdir(parents=True)
        (store / REGISTRY_FILE).write_bytes(Registry(POOL, dict.fromkeys(MODELS, "1")).to_json())
        ports = [_free_port(), _free_port()]
        peers = tuple(f"127.0.0.1:{port}" for port in ports)
        for index, port in enumerate(ports):
            settings = load_pool_settings(
                {},
                pool_name=POOL,
                store_uri=f"{store}/",
                cache_dir=Path(root) / f"cache-{index}",
                host="127.0.0.1",
                port=port,
                peers=peers,
                metrics_interval_s=3600.0,
                registry_poll_s=3600.0,
            )
            server = PoolServer(settings, loader=NullLoader())
            server.start()
            stack.callback(server.stop)
            _serve(stack, server.app, port)
        owner = peers[1]
        model = next(m for m in MODELS if candidates(m, peers)[0] == owner)
        direct, hop = (
            f"http://{owner}/{POOL}/models/{model}/predict",
            f"http://{peers[0]}/{POOL}/models/{model}/predict",
        )
        timings: dict[str, list[float]] = {"direct": [], "hop": []}
        with httpx2.Client() as client:
            for url in (direct, hop) * 20:  # warm: the model loaded, connections open
                client.post(url, json={"text": "x"}).raise_for_status()
            for index in range(2 * requests):
                which = "direct" if index % 2 == 0 else "hop"
                started = time.perf_counter()
                answer = client.post(direct if which == "direct" else hop, json={"text": "x"})
                timings[which].append(time.perf_counter() - started)
                answer.raise_for_status()
    figures = {name: _percentiles(values) for name, values in timings.items()}
    return {
        **figures,
        "added_p50_ms": round(figures["hop"]["p50_ms"] - figures["direct"]["p50_ms"], 2),
        "added_p95_ms": round(figures["hop"]["p95_ms"] - figures["direct"]["p95_ms"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args(argv)
    sys.stdout.write(orjson.dumps(measure(args.requests), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
