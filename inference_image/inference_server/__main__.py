"""python -m inference_server: every setting from the environment, flags override (see --help)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .gpu_share import read_share
from .logs import configure_logging
from .settings import Settings, SettingsError, load_settings

log = logging.getLogger("inference_server")


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


def resolve_task(settings: Settings) -> Settings:
    """MODEL_TASK defaults to the task recorded in the model's manifest (read before the server starts)."""
    if settings.model_task or settings.model_handler:
        return settings
    from .artifacts import ArtifactError, read_manifest_at

    manifest = read_manifest_at(settings.model_uri)
    if manifest is None and settings.manifest_required:
        raise ArtifactError(f"{settings.model_uri} has no manifest.json and REQUIRE_MANIFEST is true")
    return settings.replace(model_task=manifest.task) if manifest and manifest.task else settings


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = load_settings(argv)
        read_share(os.environ)  # a malformed GPU share refuses the start before any process starts
    except SettingsError as exc:
        configure_logging()
        log.error("invalid setting", extra={"setting": exc.variable, "error": str(exc)})
        return 2
    configure_logging(settings.log_level, {"model": settings.model_name, "model_version": settings.model_version})
    confine_library_caches(settings.model_cache_dir)
    from .artifacts import ArtifactError
    from .handlers import HandlerError, check_handler_path
    from .supervisor import run

    try:
        settings = resolve_task(settings)
        if settings.model_handler:
            check_handler_path(settings.model_handler)
        return run(settings)
    except SettingsError as exc:
        log.error("invalid setting", extra={"setting": exc.variable, "error": str(exc)})
        return 2
    except HandlerError as exc:
        log.error("invalid setting", extra={"setting": "MODEL_HANDLER", "error": str(exc)})
        return 2
    except ArtifactError as exc:
        log.critical("model refused; not starting", extra={"error": str(exc)})
        return 1
    except OSError as exc:  # the port is taken, or no memfd
        log.critical("cannot start the server", extra={"error": str(exc)})
        return 1


if __name__ == "__main__":
    sys.exit(main())
