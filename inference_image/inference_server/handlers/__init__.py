"""Model handlers: the built-in Hugging Face tasks and the lookup of a plugged-in handler class."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from .base import Encoded, Handler, InputError, LoadContext

__all__ = ["Encoded", "Handler", "HandlerError", "check_handler_path", "InputError", "LoadContext", "ARTIFACT_HANDLER_FILE", "handler_class",
           "artifact_handler_class", "builtin_handler_class"]

ARTIFACT_HANDLER_FILE = "handler.py"
ARTIFACT_HANDLER_CLASS = "ModelHandler"


class HandlerError(Exception):
    pass


def builtin_handler_class(task: str) -> type[Handler]:
    from .hf import TextClassificationHandler, TextEmbeddingHandler

    return {"text-classification": TextClassificationHandler, "text-embedding": TextEmbeddingHandler}[task]


def check_handler_path(import_path: str) -> None:
    """Fail early (HandlerError) when the module of 'package.module:ClassName' cannot be found, without
    importing it: the first process stays light; the model process imports it."""
    module_name, sep, class_name = import_path.partition(":")
    if not sep or not module_name or not class_name:
        raise HandlerError(f"expected module:Class, got {import_path!r}")
    try:
        found = importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise HandlerError(f"cannot import {import_path!r}: no module named {module_name!r}")


def handler_class(import_path: str) -> type[Handler]:
    """The class named by 'package.module:ClassName'."""
    module_name, sep, class_name = import_path.partition(":")
    if not sep or not module_name or not class_name:
        raise HandlerError(f"expected module:Class, got {import_path!r}")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise HandlerError(f"cannot import {import_path!r}: {exc}") from None
    return _checked(cls, import_path)


def artifact_handler_class(model_dir: Path) -> type[Handler] | None:
    """ModelHandler from the model's own handler.py. Only call this when artifact code is allowed."""
    path = model_dir / ARTIFACT_HANDLER_FILE
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("inference_server_artifact_handler", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _checked(getattr(module, ARTIFACT_HANDLER_CLASS, None), f"{path}:{ARTIFACT_HANDLER_CLASS}")


def _checked(cls: object, name: str) -> type[Handler]:
    if not (isinstance(cls, type) and issubclass(cls, Handler)):
        raise HandlerError(f"{name} is not a subclass of inference_server.handlers.Handler")
    return cls
