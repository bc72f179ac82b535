"""Where a ModelService's model files are (its ``model_source``), as an open type in CDK's idiom: ``ModelSource``,
whose ``bind`` returns the bucket and the prefix that holds one folder per model (``BoundModelSource``). The built-in
choices: a ModelStore (model_store.py), and ``ModelBucket`` for a bucket of your own (``ModelSource.from_bucket``)."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_s3 as s3
from constructs import Construct

from ..core.errors import require, require_cdk

MODELS_PREFIX = "models"


def _check_prefix(prefix: object, key: str) -> None:
    require(
        isinstance(prefix, str) and not any(c in prefix for c in "*? "),
        key,
        f"{prefix!r}: pass the folder that holds the models' folders, such as 'models' ('' for the bucket's root)",
    )


@dataclass(frozen=True)
class BoundModelSource:
    """What a ModelService needs to read its model: what ``ModelSource.bind`` returns. The model's files are under
    ``<prefix>/<model name>/<version>/``; the task role reads that folder only."""

    bucket: s3.IBucket
    """The bucket. Required."""
    prefix: str = MODELS_PREFIX
    """The folder that holds one folder per model. Default: ``"models"`` (a ModelStore's)."""

    def __post_init__(self) -> None:
        require_cdk(self.bucket, ("bucket_name", "arn_for_objects"), "model_source.bucket", "an s3.IBucket")
        _check_prefix(self.prefix, "model_source.prefix")


class ModelSource:
    """Where a ModelService's model files are (its ``model_source``). A ModelStore is one; ``ModelSource.from_bucket(
    bucket, prefix="models")`` is a bucket of your own. Subclass it and return a BoundModelSource from :meth:`bind`
    for a source of any other kind."""

    @staticmethod
    def from_bucket(bucket: s3.IBucket, prefix: str = MODELS_PREFIX) -> ModelBucket:
        """The models under ``prefix`` of ``bucket``."""
        return ModelBucket(bucket, prefix)

    def bind(self, service: Construct) -> BoundModelSource:
        """The bucket and prefix ``service`` (the ModelService that serves a model from here) reads."""
        raise NotImplementedError(f"{type(self).__name__}.bind: return a BoundModelSource")


@dataclass(frozen=True)
class ModelBucket(ModelSource):
    """A model's files in a bucket of your own (the other option is a ModelStore), under
    ``<prefix>/<model name>/<version>/``."""

    bucket: s3.IBucket
    """The bucket (an imported one: ``s3.Bucket.from_bucket_name``). Required."""
    prefix: str = MODELS_PREFIX
    """The folder that holds one folder per model. Default: ``"models"`` (a ModelStore's)."""

    def __post_init__(self) -> None:
        require_cdk(
            self.bucket,
            ("bucket_name", "arn_for_objects"),
            "bucket",
            "an s3.IBucket (s3.Bucket.from_bucket_name for an imported one)",
        )
        _check_prefix(self.prefix, "prefix")

    def bind(self, service: Construct) -> BoundModelSource:
        return BoundModelSource(self.bucket, self.prefix)
