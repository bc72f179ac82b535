"""Where a model server's model comes from: the model bucket, through the server itself or an init container."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .errors import require

if TYPE_CHECKING:  # only its types: the props load without aws_cdk (the sizing advisor)
    from aws_cdk import aws_ecs as ecs

SCRATCH_PATH = "/scratch"
PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")
# Each of the two init containers that put a model on scratch (scratch-owner, model-fetch): ECS reserves both.
FETCH_CONTAINERS = 2


@dataclass(frozen=True)
class ModelFromS3:
    """How the model's files get from the model bucket to the server.

    ``server_downloads``: the server reads the model's S3 URI from ``uri_variable`` (ModelService
    sets it unless the contract's environment already does) and fetches it itself (our server does, and verifies
    the manifest). ``copy_to_scratch``: an init container copies the model's S3 prefix into ``local_path`` (under
    the scratch volume), checks the files against the SHA256SUMS that publish wrote (a prefix without a manifest
    is copied unverified, and its log says so) and exits; the server container starts only after it succeeded,
    so nothing is fetched from a model hub. ``server_streams``: the server reads the weights straight from S3 into
    memory (vLLM's Run:ai Model Streamer) with the model's S3 URI in ``uri_variable`` too; nothing is copied and
    nothing checks publish's digests, and an init container hands the scratch volume (caches, home) to the server's
    user, as for ``copy_to_scratch``.
    """

    mode: Literal["server_downloads", "copy_to_scratch", "server_streams"]
    """server_downloads, copy_to_scratch or server_streams (above). Required."""
    uri_variable: str = "MODEL_URI"
    """The variable the server reads the model's S3 URI from. Default: MODEL_URI."""
    local_path: str = f"{SCRATCH_PATH}/model"
    """Where ``copy_to_scratch`` puts the model, under the scratch volume. Default: /scratch/model."""
    fetcher_image: ecs.ContainerImage | None = None
    """The init containers' image. Default: None (``DEFAULT_FETCHER_IMAGE``, the AWS CLI)."""

    def __post_init__(self) -> None:
        require(
            self.mode in ("server_downloads", "copy_to_scratch", "server_streams"),
            "model_source.mode",
            f"{self.mode!r}: use 'server_downloads', 'copy_to_scratch' or 'server_streams'",
        )
        require(
            bool(re.match(r"^[A-Z_][A-Z0-9_]*$", self.uri_variable)),
            "model_source.uri_variable",
            f"{self.uri_variable!r} is not an environment variable name",
        )
        require(
            self.local_path.startswith(SCRATCH_PATH + "/") and bool(PATH.match(self.local_path)),
            "model_source.local_path",
            f"{self.local_path!r} must be a path under the scratch volume {SCRATCH_PATH}/ "
            "(the only place the task can write)",
        )

    @classmethod
    def server_downloads(cls, uri_variable: str = "MODEL_URI") -> ModelFromS3:
        return cls("server_downloads", uri_variable=uri_variable)

    @classmethod
    def copy_to_scratch(
        cls, local_path: str = f"{SCRATCH_PATH}/model", fetcher_image: ecs.ContainerImage | None = None
    ) -> ModelFromS3:
        return cls("copy_to_scratch", local_path=local_path, fetcher_image=fetcher_image)

    @classmethod
    def server_streams(
        cls, uri_variable: str = "MODEL_URI", fetcher_image: ecs.ContainerImage | None = None
    ) -> ModelFromS3:
        return cls("server_streams", uri_variable=uri_variable, fetcher_image=fetcher_image)

    @property
    def server_reads_s3(self) -> bool:
        """The server itself reads the model from S3 (its URI in ``uri_variable``)."""
        return self.mode != "copy_to_scratch"

    @property
    def init_containers(self) -> int:
        """The init containers ModelService adds: the scratch owner, and for a copy the fetcher."""
        return {"server_downloads": 0, "server_streams": 1, "copy_to_scratch": FETCH_CONTAINERS}[self.mode]
