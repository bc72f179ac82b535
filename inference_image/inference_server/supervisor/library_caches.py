"""Where the libraries the server runs keep their caches: the root filesystem is read-only."""

from __future__ import annotations

import os
from pathlib import Path


def confine_library_caches(cache_dir: Path) -> None:
    """Point every library cache into cache_dir: the root filesystem is read-only, only it and /tmp are writable.
    Must run before torch or transformers are imported."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    defaults = {
        "HF_HOME": cache_dir / "huggingface",
        "TORCH_HOME": cache_dir / "torch",
        "TORCHINDUCTOR_CACHE_DIR": cache_dir / "torchinductor",
        "TRITON_CACHE_DIR": cache_dir / "triton",
        "CUDA_CACHE_PATH": cache_dir / "nv-compute-cache",
        "XDG_CACHE_HOME": cache_dir / "xdg",
        "HF_HUB_OFFLINE": "1",  # models come from MODEL_URI only, never from a hub
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }
    for name, value in defaults.items():
        os.environ.setdefault(name, str(value))
