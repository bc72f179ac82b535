"""python -m inference_server.pool: a model pool's server, every setting from the environment (pool_settings.py).
One process: the models share one device and one inference thread, so there is one event loop in front of them.

SIGTERM: readiness fails and new requests get 503 at once, the accepted ones finish (at most DRAIN_TIMEOUT_S), then
the pool stops within EXIT_GRACE_S and the process exits 0, as the single-model server does (the library's stop
timing, bundled_stop, is the same for both). A model load still running then is not waited for."""

from __future__ import annotations

import logging
import os
import sys
from typing import cast

from ..facts import EXIT_GRACE_S
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

    from ..front.draining import DrainingServer
    from .server import PoolServer

    try:
        server = PoolServer(settings)
    except SettingsError as exc:  # an OTLP endpoint without the tracing extra
        log.error("invalid setting", extra={"setting": exc.variable, "error": str(exc)})
        return 2
    server.start()
    # uvicorn annotates timeout_keep_alive as int, but a float works (a call_later delay): keep the setting's.
    config = uvicorn.Config(
        server.app,
        host=settings.host,
        port=settings.port,
        lifespan="off",
        access_log=False,
        log_config=None,
        timeout_keep_alive=cast(int, settings.keep_alive_s),
        timeout_graceful_shutdown=5,
        server_header=False,
    )
    try:
        DrainingServer(config, server).run()
    finally:
        server.stop(EXIT_GRACE_S / 2)
    loading = server.pool.loading()
    log.info("exiting", extra={"exit_code": 0, "loads_left": loading})
    if loading:  # the interpreter's exit would wait for the load threads: leave them, as the drain's bound says
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
