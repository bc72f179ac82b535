"""Model handlers: the built-in Hugging Face tasks and the lookup of a plugged-in handler class."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from ..inputs import Encoded, InputError
from ..settings import Settings, SettingsError
from .base import INPUT_KINDS, Handler, LoadContext
from .batch import Batch

__all__ = [
    "INPUT_KINDS",
    "Batch",
    "Encoded",
    "Handler",
    "HandlerError",
    "check_handler_path",
    "InputError",
    "LoadContext",
    "ARTIFACT_HANDLER_FILE",
    "handler_class",
    "artifact_handler_class",
    "builtin_handler_class",
    "handler_class_from",
    "resolve_handler_class",
]

ARTIFACT_HANDLER_FILE = "handler.py"
ARTIFACT_HANDLER_CLASS = "ModelHandler"


class HandlerError(Exception):
    pass


def builtin_handler_class(task: str) -> type[Handler]:
    from .export import TorchExportHandler
    from .hf import TextClassificationHandler, TextEmbeddingHandler
    from .image import ImageClassificationHandler

    return {
        "text-classification": TextClassificationHandler,
        "text-embedding": TextEmbeddingHandler,
        "torch-export": TorchExportHandler,
        "image-classification": ImageClassificationHandler,
    }[task]


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
    if cls.input_kind not in INPUT_KINDS:
        raise HandlerError(f"{name}.input_kind is {cls.input_kind!r}; use one of {', '.join(INPUT_KINDS)}")
    return cls


def resolve_handler_class(settings: Settings, model_dir, manifest) -> tuple[type[Handler], str]:
    """The handler class and how a worker finds the same one ('import:<path>', 'artifact' or 'task:<task>')."""
    if settings.model_handler:
        return handler_class(settings.model_handler), f"import:{settings.model_handler}"
    if settings.allow_artifact_code:
        cls = artifact_handler_class(model_dir)
        if cls is not None:
            return cls, "artifact"
    task = settings.model_task or (manifest.task if manifest else None)
    if task is None:
        raise SettingsError("MODEL_TASK", "is not set, the manifest names no task and the model has no handler.py")
    return builtin_handler_class(task), f"task:{task}"


def handler_class_from(source: str, model_dir) -> type[Handler]:
    kind, _, value = source.partition(":")
    if kind == "import":
        return handler_class(value)
    if kind == "artifact":
        cls = artifact_handler_class(model_dir)
        assert cls is not None, "the model's handler.py went missing"
        return cls
    return builtin_handler_class(value)
