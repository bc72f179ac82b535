"""The bundled server's facts (its tasks, runtimes, drain and exit seconds, worker limit, variables and metric names),
read from the server's own ``inference_server/facts.py`` in the build context this package ships (``server_image``),
by its path: the library needs the server's package neither installed nor importable, and keeps no copy of them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

# The bundled server's Docker build context (Dockerfile, requirements, the inference_server package), shipped in this
# package's wheel: in the repository a link to inference_image/, so both build the same asset (the same hash).
SERVER_IMAGE_DIRECTORY = Path(__file__).parents[1] / "server_image"
SERVER_IMAGE_NAME = "gpu-inference-server"  # the image asset's display name
FACTS_FILE = SERVER_IMAGE_DIRECTORY / "inference_server" / "facts.py"


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_inference_constructs._bundled_server_facts", path)
    assert spec is not None and spec.loader is not None, f"{path} is not a Python file"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


server = _load(FACTS_FILE)
