"""Where models and results are kept: ``ModelStore`` (the model bucket), the fetch init container's script, the files
publish writes, and the ``ResultCache`` (ElastiCache). Imported on first use, like the package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
