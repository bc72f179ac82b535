"""The link between an HTTP worker and the model process: its messages read back as they were written, each end
unmaps its rings as soon as the link closes (a dead worker's rings do not stay in the model process), and only the
model process imports the model side."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import numpy as np
import orjson
import pytest

import inference_server
from inference_server.handlers import Encoded, InputError
from inference_server.ipc import LinkEnds
from inference_server.link_messages import (
    Artifact,
    BatchRun,
    DeadlineExceeded,
    Job,
    JobResult,
    Message,
    ModelError,
    ModelUnavailable,
    NewWorker,
    QueueFull,
    Ready,
    Results,
    Stop,
    Submit,
    decode,
    encode,
)

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


MODEL_SIDE = {"inference_server.engine.batcher", "inference_server.engine.model_runner"}


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
        "inference_server.engine.model_runner",  # the batcher
        "inference_server.engine.worker_link",  # the batcher: a link's jobs, in the model process
        "inference_server.supervisor.children",  # run_model, the model process's entry
        "inference_server.testing",  # LocalModel: the model side in a test's threads
    }


def test_the_walk_finds_a_worker_module_that_imports_the_model_side(tmp_path):
    package = tmp_path / "inference_server"
    (package / "front").mkdir(parents=True)
    (package / "front" / "client.py").write_text("def f():\n    from ..engine.model_runner import ResultCode\n")
    (package / "front" / "service.py").write_text("from ..engine import batcher\n")
    assert importers_of_the_model_side(package) == {"inference_server.front.client", "inference_server.front.service"}


def test_a_submit_message_reads_back_as_the_jobs_it_was_written_from():
    items = [
        Encoded(3, {"input_ids": np.arange(3), "attention_mask": np.ones(3, dtype=np.int64)}),
        Encoded(1, {"pixels": np.zeros((2, 2), dtype=np.float32)}),
    ]
    jobs = [Job(7, 12.5, False, items), Job(8, 13.0, True, items[1:], traced=True)]
    header, arrays = encode(Submit(jobs))
    assert header["t"] == Message.SUBMIT
    message = decode(orjson.loads(orjson.dumps(header)), arrays)  # the header crosses the link as JSON
    assert isinstance(message, Submit)
    read = message.jobs
    assert [(j.job_id, j.deadline, j.bypass_queue_limit, len(j.items), j.traced) for j in read] == [
        (7, 12.5, False, 2, False),
        (8, 13.0, True, 1, True),
    ]
    for sent, got in zip([*jobs[0].items, *jobs[1].items], [*read[0].items, *read[1].items], strict=True):
        assert got.length == sent.length and list(got.data) == list(sent.data)
        assert all(np.array_equal(got.data[name], sent.data[name]) for name in sent.data)


def test_every_outcome_a_job_ends_with_arrives_as_itself():
    """Each row's result or error, through a Results message: the worker raises what the batcher
    raised (a 4xx, 503 or 504 by its class), and anything else as a ModelError (a 500) that names it."""
    vector, named = np.arange(4, dtype=np.float32), {"logits": np.ones(2), "pooled": np.zeros(3)}
    runs = [BatchRun(10.0, 10.001, 10.004, 3, 4, 32, 21), BatchRun(10.01, 10.011, 10.02, 1, 1, 16, 9)]
    outcomes = [
        JobResult(vector, 5, 0.01, 0.02),
        JobResult(named, 6, 0.0, 0.03, runs),
        DeadlineExceeded("late"),
        InputError("too long"),
        ModelUnavailable("loading"),
        QueueFull("full"),
        RuntimeError("CUDA error"),
    ]
    header, arrays = encode(Results(list(enumerate(outcomes))))
    message = decode(orjson.loads(orjson.dumps(header)), arrays)
    assert isinstance(message, Results)
    received = message.outcomes
    assert [job_id for job_id, _ in received] == list(range(len(outcomes)))
    (_, first), (_, second) = received[:2]
    assert isinstance(first, JobResult) and np.array_equal(first.outputs, vector) and first.input_tokens == 5
    assert first.batches is None  # an untraced job's: nothing more on the link
    assert isinstance(second, JobResult) and set(second.outputs) == {"logits", "pooled"}
    assert np.array_equal(second.outputs["pooled"], named["pooled"]) and second.inference_s == 0.03
    assert second.batches == runs  # a traced job's batches, for the worker's spans
    for (_, got), sent in zip(received[2:6], outcomes[2:6], strict=True):
        assert type(got) is type(sent) and str(got) == str(sent)
    (_, failed) = received[6]
    assert type(failed) is ModelError and str(failed) == "RuntimeError: CUDA error"


@pytest.mark.parametrize(
    "message",
    [
        NewWorker("3"),
        Stop(),
        Ready(),
        Artifact("/tmp/model-cache/m/1", "task:text-embedding", "text-embedding", True, {"tokenizer": "{}"}),
    ],
)
def test_each_control_message_reads_back_as_itself(message):
    header, arrays = encode(message)
    assert arrays == [] and decode(orjson.loads(orjson.dumps(header)), []) == message


def test_a_frame_of_an_unknown_kind_reads_as_nothing():
    assert decode({"t": "gossip"}, []) is None
