"""torch.compile's cache kept between tasks (inference_server.engine.compile_cache): saved once, restored by the next
task, and a missing, corrupt, oversized or hostile archive costs only the compile it would have saved. Against S3 (moto)
and a directory. What it saves in a start is measured by `python -m bench.startup --compile` (bench/README.md)."""

from __future__ import annotations

import io
import logging
import tarfile
import threading
import time
import types
from pathlib import Path

import pytest

from inference_server.engine import compile_cache
from inference_server.settings import load_settings

SETTINGS = {"dtype": "torch.float16", "runtime": "compile", "max_batch_size": 32, "max_sequence_length": 256}
KEY = compile_cache.cache_key("2.13.0+cu128", "cuda-sm86", SETTINGS)


def caches(root: Path) -> dict[str, Path]:
    return {"torchinductor": root / "inductor", "triton": root / "triton"}


def filled(root: Path) -> dict[str, Path]:
    directories = caches(root)
    (directories["torchinductor"] / "fxgraph" / "ab").mkdir(parents=True)
    (directories["torchinductor"] / "fxgraph" / "ab" / "entry").write_bytes(b"graph")
    (directories["triton"] / "kernel").mkdir(parents=True)
    (directories["triton"] / "kernel" / "k.cubin").write_bytes(b"\x7fELF")
    return directories


def test_the_key_names_torch_python_the_device_kind_and_the_settings_that_shape_the_compile():
    assert KEY.startswith("torch-2.13.0-cu128-py3") and "-cuda-sm86-" in KEY and KEY.endswith(".tar.gz")
    assert KEY != compile_cache.cache_key("2.13.0+cu128", "cuda-sm75", SETTINGS)  # g5's A10G and g4dn's T4 apart
    assert KEY != compile_cache.cache_key("2.13.0+cu128", "cuda-sm86", {**SETTINGS, "max_batch_size": 64})
    assert KEY == compile_cache.cache_key("2.13.0+cu128", "cuda-sm86", dict(reversed(SETTINGS.items())))


def test_the_directories_are_the_ones_the_server_points_torch_at():
    assert compile_cache.cache_directories({"TORCHINDUCTOR_CACHE_DIR": "/s/i", "TRITON_CACHE_DIR": "/s/t"}) == {
        "torchinductor": Path("/s/i"),
        "triton": Path("/s/t"),
    }


@pytest.fixture(params=["s3", "directory"])
def store(request, tmp_path) -> str:
    if request.param == "directory":
        return str(tmp_path / "store")
    s3 = request.getfixturevalue("s3")
    bucket = request.getfixturevalue("bucket")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    return f"s3://{bucket}/models/minilm/.compile-cache/1/"


def test_a_saved_cache_is_restored_by_the_next_task(store, tmp_path):
    assert compile_cache.save(store, KEY, filled(tmp_path / "first"))
    restored = caches(tmp_path / "next")
    assert compile_cache.restore(store, KEY, restored)
    assert (restored["torchinductor"] / "fxgraph" / "ab" / "entry").read_bytes() == b"graph"
    assert (restored["triton"] / "kernel" / "k.cubin").read_bytes() == b"\x7fELF"


def test_the_first_task_to_save_keeps_its_archive(store, tmp_path):
    assert compile_cache.save(store, KEY, filled(tmp_path / "first"))
    second = filled(tmp_path / "second")
    (second["torchinductor"] / "fxgraph" / "ab" / "entry").write_bytes(b"another")
    assert not compile_cache.save(store, KEY, second)
    restored = caches(tmp_path / "next")
    assert compile_cache.restore(store, KEY, restored)
    assert (restored["torchinductor"] / "fxgraph" / "ab" / "entry").read_bytes() == b"graph"


def test_no_archive_means_compiling_afresh(store, tmp_path, caplog):
    with caplog.at_level(logging.INFO, "inference_server.engine.compile_cache"):
        assert not compile_cache.restore(store, KEY, caches(tmp_path))
    assert "no compile cache yet" in caplog.text


def put(store: str, data: bytes, s3=None) -> None:
    if store.startswith("s3://"):
        assert s3 is not None
        bucket, _, prefix = store.removeprefix("s3://").partition("/")
        s3.put_object(Bucket=bucket, Key=prefix + KEY, Body=data)
    else:
        Path(store).mkdir(parents=True, exist_ok=True)
        (Path(store) / KEY).write_bytes(data)


def raw_archive(members: list[tarfile.TarInfo]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info in members:
            archive.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, **attributes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    for attribute, value in attributes.items():
        setattr(info, attribute, value)
    return info


@pytest.mark.parametrize(
    "data",
    [
        b"not a gzip archive",
        raw_archive([member("../../escape", size=1)]),
        raw_archive([member("torchinductor/out", tarfile.SYMTYPE, linkname="/etc/passwd")]),
    ],
    ids=["corrupt", "parent-path", "link-out"],
)
def test_an_unusable_or_hostile_archive_is_refused_and_nothing_lands_outside(store, tmp_path, data, request, caplog):
    put(store, data, request.getfixturevalue("s3") if store.startswith("s3://") else None)
    directories = caches(tmp_path / "task")
    with caplog.at_level(logging.WARNING, "inference_server.engine.compile_cache"):
        assert not compile_cache.restore(store, KEY, directories)
    assert "compile cache unusable; compiling afresh" in caplog.text
    assert not (tmp_path / "escape").exists() and not [f for d in directories.values() for f in d.rglob("*")]


def with_bad_crc(data: bytes) -> bytes:
    """A gzip stream whose CRC trailer is wrong: tarfile alone would unpack it without a word."""
    return data[:-8] + bytes(b ^ 0xFF for b in data[-8:-4]) + data[-4:]


def test_an_archive_whose_checksum_fails_is_refused(store, tmp_path, request, caplog):
    assert compile_cache.save(store, "good.tar.gz", filled(tmp_path / "first"))
    good = Path(store, "good.tar.gz").read_bytes() if not store.startswith("s3://") else None
    if good is None:
        s3 = request.getfixturevalue("s3")
        bucket, _, prefix = store.removeprefix("s3://").partition("/")
        good = s3.get_object(Bucket=bucket, Key=prefix + "good.tar.gz")["Body"].read()
    put(store, with_bad_crc(good), request.getfixturevalue("s3") if store.startswith("s3://") else None)
    directories = caches(tmp_path / "task")
    with caplog.at_level(logging.WARNING, "inference_server.engine.compile_cache"):
        assert not compile_cache.restore(store, KEY, directories)
    assert "compile cache unusable" in caplog.text
    assert not list(directories["torchinductor"].rglob("*"))  # nothing half-restored for Inductor to load


@pytest.mark.parametrize("limit", ["MAX_ARCHIVE_BYTES", "MAX_UNPACKED_BYTES"])
def test_an_archive_over_a_size_limit_is_refused(store, tmp_path, monkeypatch, limit, caplog):
    assert compile_cache.save(store, KEY, filled(tmp_path / "first"))
    monkeypatch.setattr(compile_cache, limit, 10)
    with caplog.at_level(logging.WARNING, "inference_server.engine.compile_cache"):
        assert not compile_cache.restore(store, KEY, caches(tmp_path / "task"))
    assert any("more than 10" in getattr(record, "error", "") for record in caplog.records), caplog.records


@pytest.mark.parametrize(
    "members",
    [
        [member("torchinductor/inner", tarfile.SYMTYPE, linkname="k")],  # a link, even inside
        [member("torchinductor/k"), member("torchinductor/hard", tarfile.LNKTYPE, linkname="torchinductor/k")],
        [member("torchinductor/sparse", tarfile.GNUTYPE_SPARSE, size=0)],  # unpacks small, copies large
    ],
    ids=["symlink", "hard-link", "sparse"],
)
def test_only_plain_files_and_directories_are_unpacked(tmp_path, members, caplog):
    store = tmp_path / "store"
    store.mkdir()
    (store / KEY).write_bytes(raw_archive(members))
    with caplog.at_level(logging.WARNING, "inference_server.engine.compile_cache"):
        assert not compile_cache.restore(str(store), KEY, caches(tmp_path / "task"))
    assert any("only plain files and directories" in getattr(r, "error", "") for r in caplog.records), caplog.records


def test_too_many_members_are_refused(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(compile_cache, "MAX_MEMBERS", 2)
    assert compile_cache.save(str(tmp_path / "store"), KEY, filled(tmp_path / "first"))  # 2 folders, 4 files and more
    with caplog.at_level(logging.WARNING, "inference_server.engine.compile_cache"):
        assert not compile_cache.restore(str(tmp_path / "store"), KEY, caches(tmp_path / "task"))
    assert any("more than 2 members" in getattr(r, "error", "") for r in caplog.records), caplog.records


def test_a_body_longer_than_its_head_said_is_cut_off(monkeypatch, tmp_path, caplog):
    class Lying:
        def head_object(self, **_):
            return {"ContentLength": 5, "ETag": '"e"'}

        def get_object(self, **_):
            return {
                "Body": types.SimpleNamespace(iter_chunks=lambda size: iter([b"x" * 8, b"x" * 8]), close=lambda: None)
            }

    monkeypatch.setattr(compile_cache, "s3_client", lambda workers: Lying())
    monkeypatch.setattr(compile_cache, "MAX_ARCHIVE_BYTES", 10)
    with caplog.at_level(logging.WARNING, "inference_server.engine.compile_cache"):
        assert not compile_cache.restore("s3://bucket/models/m/.compile-cache/1/", KEY, caches(tmp_path))
    assert any("more than 10 bytes" in getattr(r, "error", "") for r in caplog.records), caplog.records


def test_a_403_on_the_archive_reads_as_no_archive(monkeypatch, tmp_path, caplog):
    """A role without s3:ListBucket on the key gets 403 for a missing object."""
    from botocore.exceptions import ClientError

    class Forbidden:
        def head_object(self, **_):
            raise ClientError({"Error": {"Code": "403", "Message": "Forbidden"}}, "HeadObject")

    monkeypatch.setattr(compile_cache, "s3_client", lambda workers: Forbidden())
    with caplog.at_level(logging.INFO, "inference_server.engine.compile_cache"):
        assert not compile_cache.restore("s3://bucket/models/m/.compile-cache/1/", KEY, caches(tmp_path))
    assert "no compile cache yet (or none this task may read)" in caplog.text


def test_a_store_that_cannot_be_written_costs_nothing(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the store's directory would be")
    with caplog.at_level(logging.WARNING, "inference_server.engine.compile_cache"):
        assert not compile_cache.save(str(blocker), KEY, filled(tmp_path / "task"))
    assert "compile cache not saved" in caplog.text


def test_the_setting_reads_compile_cache_uri():
    settings = load_settings(
        [],
        {
            "MODEL_NAME": "m",
            "MODEL_VERSION": "1",
            "MODEL_URI": "/m",
            "COMPILE_CACHE_URI": "s3://b/models/m/.compile-cache/1/",
        },
    )
    assert settings.compile_cache_uri == "s3://b/models/m/.compile-cache/1/"
    assert load_settings([], {"MODEL_NAME": "m", "MODEL_VERSION": "1", "MODEL_URI": "/m"}).compile_cache_uri is None


def test_the_runner_restores_before_the_model_compiles_and_saves_once_every_shape_is_warm(tmp_path, monkeypatch):
    """The save starts when every shape is warm, off the inference thread, once, and only when nothing was
    restored."""
    calls: list[str] = []
    saved = threading.Event()
    monkeypatch.setattr(compile_cache, "restore", lambda uri, key, dirs: calls.append(f"restore {uri}") or False)
    monkeypatch.setattr(
        compile_cache,
        "save",
        lambda uri, key, dirs: calls.append(f"save {uri} {threading.current_thread().name}") or saved.set(),
    )
    runner = bare_runner()
    runner._restore_compile_cache("s3://b/p/")
    assert calls == ["restore s3://b/p/"]
    runner._on_all_warm()
    assert saved.wait(5)
    assert calls[1] == "save s3://b/p/ compile-cache"
    runner._on_all_warm()  # once only
    assert len(calls) == 2


def bare_runner(warm_failures: int = 0):
    import torch

    from inference_server.engine import model_runner

    runner = model_runner.ModelRunner.__new__(model_runner.ModelRunner)  # only what the two methods read
    vars(runner).update(
        _save_compile_cache=None,
        device=torch.device("cpu"),
        dtype=torch.float32,
        _torch=torch,
        compile=True,
        start_phases={"loaded": time.time() - 2.5},
        settings=load_settings([], {"MODEL_NAME": "m", "MODEL_VERSION": "1", "MODEL_URI": "/m"}),
        batcher=types.SimpleNamespace(warm_failures=warm_failures),
    )
    return runner


@pytest.mark.parametrize(
    "restored, warm_failures", [(True, 0), (False, 1), (False, 0)], ids=["restored", "a-shape-failed", "saves"]
)
def test_nothing_is_saved_after_a_restore_or_when_a_shape_failed_to_warm(monkeypatch, restored, warm_failures):
    from inference_server.engine import model_runner

    threads: list[str] = []  # the save's thread, recorded instead of started: no race with the assertion
    monkeypatch.setattr(compile_cache, "restore", lambda uri, key, dirs: restored)
    monkeypatch.setattr(
        model_runner.threading,
        "Thread",
        lambda target, name, daemon: types.SimpleNamespace(start=lambda: threads.append(name)),
    )
    runner = bare_runner(warm_failures)
    runner._restore_compile_cache("s3://b/p/")
    runner._on_all_warm()
    assert threads == ([] if restored or warm_failures else ["compile-cache"])


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_once_every_shape_has_compiled_a_gpu_hands_the_eager_forwards_cached_memory_back(device):
    import torch

    emptied: list[bool] = []
    runner = bare_runner()
    runner.device = torch.device(device)
    vars(runner).update(
        _torch=types.SimpleNamespace(cuda=types.SimpleNamespace(empty_cache=lambda: emptied.append(True)))
    )
    runner._on_all_warm()
    assert emptied == ([True] if device == "cuda" else [])


@pytest.mark.parametrize("compiles", [True, False])
def test_every_shape_compiled_is_a_start_metric_from_the_model_loaded(compiles, caplog):
    """The dashboard's task-start graph plots it (tests/infra/test_monitoring.py)."""
    runner = bare_runner()
    runner.compile = compiles
    with caplog.at_level(logging.INFO, "inference_server"):
        runner._on_all_warm()
    documents = [r.fields for r in caplog.records if r.getMessage() == "metrics"]
    if not compiles:
        assert documents == []
        return
    (document,) = documents
    assert 2.5 <= document["StartupCompileSeconds"] < 10
    assert document["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [{"Name": "StartupCompileSeconds", "Unit": "Seconds"}]


def test_the_model_load_restores_before_the_handler_loads():
    """In the runner's own load (read from its source: a real compile takes a minute here): the archive is unpacked
    before the handler builds, and so compiles, the model."""
    import inspect

    from inference_server.engine import model_runner

    source = inspect.getsource(model_runner.ModelRunner._load_handler)
    assert source.index("self._restore_compile_cache(") < source.index("handler.load(ctx)")
    assert "if self.compile and s.compile_cache_uri:" in source
