"""python -m inference_server.pool: a model pool's server, every setting from the environment (pool_settings.py).
One process: the models share one device and one inference thread, so there is one event loop in front of them."""

from __future__ import annotations

import logging
import sys

from ..logs import configure_logging
from ..settings import SettingsError
from .pool_settings import load_pool_settings

log = logging.getLogger("inference_server.pool")


def main() -> int:
    try:
        settings = load_pool_settings()
    except SettingsError as exc:
        configure_logging()
        log.error("invalid setting", extra={"setting": exc.variable, "error": str(exc)})
        return 2
    configure_logging(settings.log_level, {"pool": settings.pool_name})
    import uvicorn

    from .server import PoolServer

    server = PoolServer(settings)
    server.start()
    try:
        uvicorn.run(
            server.app,
            host=settings.host,
            port=settings.port,
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=30,
        )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
