"""The link's shared memory: each end unmaps its rings as soon as the link closes, so a dead worker's rings do not
stay in the model process."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import numpy as np
import pytest

import inference_server
from inference_server.ipc import LinkEnds

from .conftest import infer


def held(inodes: set[int]) -> list[str]:
    """This process's mappings and open fds of the shared-memory files with these inodes."""
    found = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and int(fields[4]) in inodes:
            found.append(line)
    for fd in Path("/proc/self/fd").iterdir():
        try:
            if fd.stat().st_ino in inodes and fd.readlink().name.startswith("memfd:"):
                found.append(f"fd {fd.name}")
        except OSError:
            pass
    return found


def test_closing_a_channel_unmaps_its_rings_and_it_sends_no_more():
    link = LinkEnds(ring_bytes=1 << 16)
    worker, model = link.worker_channel(), link.model_channel()
    link.close_ring_fds()
    inodes = {worker.out_ring.inode, worker.in_ring.inode}
    worker.send({"t": "submit"}, [np.arange(10)])
    [(header, arrays)] = model.receive()
    assert header["t"] == "submit" and arrays[0].tolist() == list(range(10))
    assert len(held(inodes)) == 8  # two rings, each mapped (and its fd held) by both ends

    worker.close()
    assert worker.out_ring.closed and worker.in_ring.closed
    assert len(held(inodes)) == 4  # the model's end alone
    with pytest.raises(OSError):
        worker.send({"t": "submit"}, [np.arange(10)])
    worker.close()  # twice is fine
    assert model.receive() == []  # the peer is gone
    model.close()
    assert held(inodes) == []


def test_the_model_side_unmaps_a_links_rings_as_soon_as_its_worker_is_gone(echo_service):
    service = echo_service()
    runner = service.local_model.runner
    assert infer(service, ["hello there"])[0][0]["echo"] == "hello there"
    [link] = runner.links
    inodes = {link.channel.in_ring.inode, link.channel.out_ring.inode}
    assert held(inodes)

    service.client.close()  # the worker's end goes, as when a worker process dies
    deadline = time.monotonic() + 10
    while runner.links and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.links == []  # no later worker needed to drop it
    assert held(inodes) == []


MODEL_SIDE = {"inference_server.batcher", "inference_server.model_runner"}


def importers_of_the_model_side(package: Path) -> set[str]:
    """Modules of ``package`` that import the batcher or the model runner, at module level or in a function."""
    found = set()
    for path in package.rglob("*.py"):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        here = module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here
                for _ in range(max(node.level - 1, 0)):
                    base = base.rsplit(".", 1)[0]
                target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
                names = {target} | {f"{target}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                names = {alias.name for alias in node.names}
            else:
                continue
            if names & MODEL_SIDE:
                found.add(module)
    return found


def test_only_the_model_process_imports_the_model_side():
    """The link (ipc) holds what both sides share; an HTTP worker never imports the batcher or the model runner
    (the worker imported result codes from model_runner, errors from batcher and the handler lookup from the
    model side)."""
    assert importers_of_the_model_side(Path(inference_server.__file__).parent) == {
        "inference_server.model_runner",  # the batcher
        "inference_server.children",  # run_model, the model process's entry
        "inference_server.testing",  # LocalModel: the model side in a test's threads
    }


def test_the_walk_finds_a_worker_module_that_imports_the_model_side(tmp_path):
    package = tmp_path / "inference_server"
    package.mkdir()
    (package / "client.py").write_text("def f():\n    from .model_runner import ResultCode\n")
    (package / "service.py").write_text("from . import batcher\n")
    assert importers_of_the_model_side(package) == {"inference_server.client", "inference_server.service"}
