"""constructs/README.md's worked example of a team's own handler, end to end without Docker: the page's app synthesizes
the image asset of the page's package and MODEL_HANDLER (test_readme_examples.py runs it as written, beside the
package); the package installs as the generated Dockerfile installs it and passes the build's own handler check; and a
TorchScript ranker published without --task is served by the page's handler through the server's worker and model
process (in threads, as tests/server does), scores equal to TorchScript's own."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.consumer.team_model import (
    FEATURES,
    HANDLER,
    PACKAGE,
    MemoryS3,
    page_package_files,
    scripted_ranker,
    write_page_package,
)
from tests.consumer.test_readme_examples import containers, ran


def staged_image(namespace: dict) -> Path:
    """The staged build context of the server container's image asset, in the example's cloud assembly."""
    app, stack = namespace["app"], namespace["stack"]
    outdir = Path(app.outdir)
    assets = json.loads((outdir / f"{stack.artifact_id}.assets.json").read_text())["dockerImages"]
    image = json.dumps(containers(namespace["template"])["server"]["Image"])
    (digest,) = [key for key in assets if f":{key}" in image]
    return outdir / assets[digest]["source"]["directory"]


def test_the_pages_app_runs_the_pages_handler_from_an_image_of_the_pages_package():
    _, plain, flagged = ran("team-handler")
    for namespace in (plain, flagged):
        server = containers(namespace["template"])["server"]
        environment = {e["Name"]: e["Value"] for e in server["Environment"]}
        assert environment["MODEL_HANDLER"] == HANDLER == "ranking_handler.handlers:RankingHandler"
        assert server["Command"] == ["python", "-m", "inference_server"] and server["User"] == "10001:10001"
        staged = staged_image(namespace)
        for path, text in page_package_files().items():
            assert (staged / "handler_package" / path.removeprefix(f"{PACKAGE}/")).read_text() == text
        assert (staged / "Dockerfile").read_text().endswith(f"ENV MODEL_HANDLER={HANDLER}\n")
    assert staged_image(plain).name == staged_image(flagged).name, "the same image asset under cdk.json's flags"


def the_builds_handler_check() -> str:
    """The Python the generated Dockerfile runs once the package is installed (handler_class of MODEL_HANDLER)."""
    dockerfile = (staged_image(ran("team-handler")[1]) / "Dockerfile").read_text()
    # The adapter-sync stage has an import check of its own: the handler's names handler_class.
    (command,) = [c for c in re.findall(r'python -P -c "(.*?)"', dockerfile) if "handler_class" in c]
    return command


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The page's package installed as the image's build installs it (pip install --no-deps), into a folder of its own;
    here without build isolation, which would fetch setuptools (the build has the network, the tests need not)."""
    root = tmp_path_factory.mktemp("team")
    package = write_page_package(root / "app")
    site = root / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(package),
        ],
        check=True,
        timeout=300,
    )
    return site


def test_the_pages_package_installs_and_passes_the_builds_handler_check(installed):
    assert (installed / PACKAGE / "handlers.py").is_file()
    env = {**os.environ, "PYTHONPATH": str(installed)}
    done = subprocess.run(
        [sys.executable, "-P", "-c", the_builds_handler_check()],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=installed.parent,
    )
    assert done.returncode == 0, done.stderr


def test_the_builds_handler_check_fails_on_a_class_that_is_not_there(installed):
    """The twin: the same check, a class the package lacks, fails the build (and so could fail above)."""
    env = {**os.environ, "PYTHONPATH": str(installed)}
    command = the_builds_handler_check().replace(HANDLER, "ranking_handler.handlers:NoSuchHandler")
    done = subprocess.run([sys.executable, "-P", "-c", command], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "cannot import 'ranking_handler.handlers:NoSuchHandler'" in done.stderr


def test_a_torchscript_ranker_published_without_a_task_is_served_by_the_pages_handler(installed, tmp_path, monkeypatch):
    """As deployed: published without --task (the page's command), fetched with its manifest required, MODEL_TASK the
    BundledServer default (text-embedding: the task only labels it) and MODEL_HANDLER the page's handler."""
    import httpx
    import torch

    from inference_server.front.app import create_app
    from inference_server.manifest import Manifest
    from inference_server.publish import publish
    from inference_server.settings import Settings
    from inference_server.testing import LocalModel

    ranker = scripted_ranker()
    version = tmp_path / "ranker"
    version.mkdir()
    torch.jit.save(ranker, str(version / "model.ts"))
    s3 = MemoryS3()
    publish(version, "s3://ranking-models-123456789012/models/ranker/2026-12-01/", client=s3)
    manifest = Manifest.from_json(s3.objects["models/ranker/2026-12-01/manifest.json"])
    assert manifest.task is None and set(manifest.files) == {"model.ts"}
    copy = s3.download("models/ranker/2026-12-01/", tmp_path / "copy")

    monkeypatch.syspath_prepend(str(installed))
    settings = Settings(
        model_name="ranker",
        model_version="2026-12-01",
        model_uri=str(copy),
        model_task="text-embedding",
        model_handler=HANDLER,
        require_manifest=True,
        max_batch_size=8,
        ready_probe_interval_s=60.0,
        metrics_interval_s=3600.0,
    )
    local = LocalModel(settings)
    service = local.start()
    try:
        deadline = time.monotonic() + 120
        while service.readiness() is not None:
            assert not local.runner.batcher.failed, local.runner.batcher.error
            assert time.monotonic() < deadline, service.readiness()
            time.sleep(0.02)
        features = np.random.default_rng(3).standard_normal((5, FEATURES)).astype(np.float32)

        async def calls():
            transport = httpx.ASGITransport(app=create_app(service))
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                scored = await client.post(
                    "/ranker/v2/models/ranker/infer",
                    json={
                        "inputs": [
                            {
                                "name": "features",
                                "datatype": "FP32",
                                "shape": [5, FEATURES],
                                "data": features.ravel().tolist(),
                            }
                        ]
                    },
                )
                metadata = await client.get("/ranker/v2/models/ranker")
                text = await client.post("/ranker/predict", json={"text": "not a ranker's input"})
                return scored, metadata, text

        scored, metadata, text = asyncio.run(calls())
    finally:
        local.stop()
        sys.modules.pop(f"{PACKAGE}.handlers", None)
        sys.modules.pop(PACKAGE, None)
    assert scored.status_code == 200, scored.text
    (output,) = scored.json()["outputs"]
    assert (output["name"], output["datatype"], output["shape"]) == ("score", "FP32", [5])
    expected = ranker(torch.from_numpy(features)).detach().numpy()
    np.testing.assert_allclose(np.array(output["data"], dtype=np.float32), expected, rtol=1e-5, atol=1e-6)
    assert metadata.json()["inputs"] == [{"name": "features", "datatype": "FP32", "shape": [-1, FEATURES]}]
    assert text.status_code == 422 and "/v2/models/ranker/infer" in text.json()["error"]["message"]
