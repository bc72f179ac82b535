"""Where models and results are kept: ``ModelStore`` (the model bucket), the fetch init container's script, the files
publish writes, and the ``ResultCache`` (ElastiCache); ``ModelSource``, the open type of where a ModelService's model
files are (``bind`` gives a ``BoundModelSource``), with ``ModelBucket`` for a bucket of a team's own. Imported on first
use, like the package root's names."""

from typing import TYPE_CHECKING

from ..core.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .model_bucket import BoundModelSource, ModelBucket, ModelSource
    from .model_store import ModelStore, ModelStoreProps
    from .result_cache import ModelCacheProps, ResultCache, ResultCacheProps

__all__ = [
    "BoundModelSource",
    "ModelBucket",
    "ModelCacheProps",
    "ModelSource",
    "ModelStore",
    "ModelStoreProps",
    "ResultCache",
    "ResultCacheProps",
]

_MODULE_OF = {
    "BoundModelSource": "model_bucket",
    "ModelBucket": "model_bucket",
    "ModelCacheProps": "result_cache",
    "ModelSource": "model_bucket",
    "ModelStore": "model_store",
    "ModelStoreProps": "model_store",
    "ResultCache": "result_cache",
    "ResultCacheProps": "result_cache",
}


__getattr__, __dir__ = lazy_exports(__name__, _MODULE_OF)
