"""inference_image/README.md's client examples (each ```bash or ```python block that starts with `# Example:`),
run as written against live servers of the models they name: curl and the client libraries, for each protocol.
Only the address (localhost:8080), the key ($API_KEY) and the image file (cat.jpg) are this test's."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from inference_server.testing import IMAGE_LABELS

from .conftest import MINILM_API_KEY
from .live import live_server

README = Path(__file__).resolve().parents[2] / "inference_image" / "README.md"
EXAMPLE = re.compile(r"```(bash|python)\n(# Example: (.+?)\n.*?)```", re.S)
MODEL_OF = {
    "OpenAI embeddings with curl": "minilm",
    "OpenAI embeddings with the openai client": "minilm",
    "torch-export with curl": "tabular",
    "torch-export with tritonclient": "tabular",
    "image classification with curl": "vision",
    "image classification with tritonclient": "vision",
}


def examples() -> dict[str, tuple[str, str]]:
    """title -> (language, source)."""
    return {title: (language, source) for language, source, title in EXAMPLE.findall(README.read_text())}


def test_every_protocol_has_a_curl_and_a_client_library_example():
    assert set(examples()) == set(MODEL_OF)


@pytest.fixture(scope="module")
def servers(minilm_service, export_service, image_service):
    with (
        live_server(minilm_service) as minilm,
        live_server(export_service) as tabular,
        live_server(image_service) as vision,
    ):
        yield {"minilm": minilm, "tabular": tabular, "vision": vision}


def run_example(title: str, address: str, cwd: Path) -> str:
    language, source = examples()[title]
    source = source.replace("localhost:8080", address)
    command = ["bash", "-euo", "pipefail", "-c", source] if language == "bash" else [sys.executable, "-c", source]
    done = subprocess.run(
        command, cwd=cwd, env={**os.environ, "API_KEY": MINILM_API_KEY}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{title}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture
def workdir(tmp_path) -> Path:
    from PIL import Image

    pixels = np.random.default_rng(7).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG")
    (tmp_path / "cat.jpg").write_bytes(buffer.getvalue())
    return tmp_path


@pytest.mark.parametrize("title", list(MODEL_OF))
def test_the_readme_example_runs_as_written(servers, workdir, title):
    out = run_example(title, servers[MODEL_OF[title]], workdir)
    if title == "OpenAI embeddings with curl":
        data = json.loads(out)["data"]
        assert [len(d["embedding"]) for d in data] == [128, 128]
    elif title == "OpenAI embeddings with the openai client":
        assert out.split() == ["2", "384"]
    elif title == "torch-export with curl":
        outputs = {o["name"]: o for o in json.loads(out)["outputs"]}
        assert outputs["probabilities"]["shape"] == [1, 3] and outputs["total"]["data"] == [1.5]
    elif title == "torch-export with tritonclient":
        shape, total = out.split(")", 1)
        assert shape + ")" == "(2, 3)" and [float(x) for x in re.findall(r"-?\d+\.?\d*", total)] == [1.5, 4.0]
    elif title == "image classification with curl":
        labels = next(o for o in json.loads(out)["outputs"] if o["name"] == "labels")
        assert labels["shape"] == [1, 2] and set(labels["data"]) <= set(IMAGE_LABELS)
    else:
        assert sum(f"b'{label}'" in out for label in IMAGE_LABELS) == 2, out
