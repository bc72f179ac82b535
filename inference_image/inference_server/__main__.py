"""python -m inference_server: every setting from the environment, flags override (see --help)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from .engine.gpu_share import read_share
from .logs import configure_logging
from .settings import Settings, SettingsError, load_settings
from .supervisor.library_caches import confine_library_caches

log = logging.getLogger("inference_server")


def resolve_task(settings: Settings) -> Settings:
    """MODEL_TASK defaults to the task recorded in the model's manifest (read before the server starts)."""
    if settings.model_task or settings.model_handler:
        return settings
    from .engine.artifacts import ArtifactError, read_manifest_at

    manifest = read_manifest_at(settings.model_uri)
    if manifest is None and settings.manifest_required:
        raise ArtifactError(f"{settings.model_uri} has no manifest.json and REQUIRE_MANIFEST is true")
    return settings.replace(model_task=manifest.task) if manifest and manifest.task else settings


def main(argv: Sequence[str] | None = None) -> int:
    if os.environ.get("POOL_NAME") and argv is None:  # a model pool: the same image, its own server (pool/)
        from .pool.__main__ import main as pool_main

        return pool_main()
    try:
        settings = load_settings(argv)
        read_share(os.environ)  # a malformed GPU share refuses the start before any process starts
    except SettingsError as exc:
        configure_logging()
        log.error("invalid setting", extra={"setting": exc.variable, "error": str(exc)})
        return 2
    configure_logging(settings.log_level, {"model": settings.model_name, "model_version": settings.model_version})
    confine_library_caches(settings.model_cache_dir)
    from .engine.artifacts import ArtifactError
    from .handlers import HandlerError, check_handler_path
    from .supervisor.processes import run

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
