"""Where models and results are kept: ``ModelStore`` (the model bucket), the fetch init container's script, the files
publish writes, and the ``ResultCache`` (ElastiCache). Imported on first use, like the package root's names."""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model_store import ModelStore, ModelStoreProps
    from .result_cache import ModelCacheProps, ResultCache, ResultCacheProps

__all__ = [
    "ModelCacheProps",
    "ModelStore",
    "ModelStoreProps",
    "ResultCache",
    "ResultCacheProps",
]

_MODULE_OF = {
    "ModelCacheProps": "result_cache",
    "ModelStore": "model_store",
    "ModelStoreProps": "model_store",
    "ResultCache": "result_cache",
    "ResultCacheProps": "result_cache",
}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
