"""One JSON object per log line on stdout (CloudWatch Logs reads it, EMF lines included)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from types import TracebackType
from typing import Any, cast

import orjson

# Attributes every LogRecord has; anything else passed with `extra=` becomes a JSON field.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    """``static`` fields (the served model and version) go on every line, so two live versions' logs never mix."""

    def __init__(self, static: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.static = dict(static or {})

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,  # the supervisor, the model process and each HTTP worker write here
            **self.static,
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and not key.startswith("_"):
                line[key] = value
        if "fields" in line:
            line.update(line.pop("fields"))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def configure_logging(level: str = "INFO", static: dict[str, Any] | None = None) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter(static))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.captureWarnings(True)  # library warnings become JSON lines too
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # the app logs each request itself
    for noisy in ("botocore", "boto3", "s3transfer", "urllib3", "httpx", "filelock"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    # An exception nobody caught is a JSON line too: Python's own hooks write plain text to stderr,
    # which breaks every reader of the log (CloudWatch Logs Insights, the tests) one line at a time.
    threading.excepthook = _log_thread_exception
    sys.excepthook = _log_uncaught_exception


_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def _log_thread_exception(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    thread = args.thread.name if args.thread is not None else None
    # ExceptHookArgs allows a None exc_value, which logging formats too; its stubs want an exception there.
    logging.getLogger("inference_server").error(
        "uncaught exception in a thread",
        exc_info=cast(_ExcInfo, (args.exc_type, args.exc_value, args.exc_traceback)),
        extra={"thread_name": thread},
    )


def _log_uncaught_exception(exc_type, exc_value, traceback) -> None:
    logging.getLogger("inference_server").critical("uncaught exception", exc_info=(exc_type, exc_value, traceback))
