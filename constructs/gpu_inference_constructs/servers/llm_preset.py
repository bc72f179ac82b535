"""What the LLM presets (:class:`VllmServer`, :class:`SglangServer`) share: their fields beside ``props`` (their own
images, in place of the props' ECR mirrors, and the user) and what follows from the props and the metrics alone (the
longest request, the sidecars' reservation). Free of aws_cdk at run time (the sizing advisor loads the presets)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, Protocol, TypeVar

from ..core.adapter_sync import AdapterSync, ServerKind
from ..core.lora_settings import LoraSettings
from ..core.server_contract import (
    ModelFromS3,
    PrometheusMetrics,
    ServerContext,
    ServerDefinition,
    require_one_image,
    require_props,
    sidecar_reservation,
)
from ..core.task_size import SidecarReservation
from .llm_checks import memory_fraction
from .lora_contract import adapter_sync

if TYPE_CHECKING:
    from aws_cdk import aws_ecs as ecs


class LlmProps(Protocol):
    """What the shared part reads of a preset's props."""

    @property
    def longest_request_seconds(self) -> int: ...
    @property
    def lora(self) -> LoraSettings | None: ...
    def model_source(self, fetcher_image: ecs.ContainerImage | None = None) -> ModelFromS3: ...


PropsT = TypeVar("PropsT", bound=LlmProps)


@dataclass(frozen=True)
class LlmPreset(ServerDefinition, Generic[PropsT]):
    """An LLM preset's fields: ``props`` first (each preset redefines it with its own props type and default, in
    this same first place, so ``VllmServer(VllmProps(...))`` keeps working), then its own images and user."""

    props: PropsT
    """How the server serves the model. Required (each preset gives its own default)."""
    image: ecs.ContainerImage | None = None
    """The server's image (any ContainerImage: your own build), in place of ``props.image`` (an ECR mirror); giving
    both is refused. Default: None (``props.image``)."""
    user: str = "1000:1000"
    """The uid:gid the server runs as. Default: 1000:1000."""
    fetcher_image: ecs.ContainerImage | None = None
    """The model fetcher's image, in place of ``props.fetcher_image``; giving both is refused. Default: None."""
    collector_image: ecs.ContainerImage | None = None
    """The metrics collector's image, in place of ``props.collector_image``; giving both is refused. Default: None."""

    props_type: ClassVar[type]
    """The props class ``props`` must be an instance of (each preset sets it)."""
    collected_metrics: ClassVar[PrometheusMetrics]
    """The server's Prometheus metrics and histograms the collector brings in (each preset sets it)."""
    takes_lora_adapters = True
    adapter_server: ClassVar[ServerKind]
    """Which server's adapter endpoints the ``adapter-sync`` sidecar calls (each preset sets it)."""

    def __post_init__(self) -> None:
        require_props(self.props, self.props_type, type(self).__name__)
        require_one_image(
            type(self).__name__,
            self.props,
            {"image": self.image, "fetcher_image": self.fetcher_image, "collector_image": self.collector_image},
        )

    @property
    def longest_request_seconds(self) -> int:
        return self.props.longest_request_seconds

    def adapter_sync_for(
        self, context: ServerContext, fraction: float, context_tokens: int, dtype: str, fraction_key: str
    ) -> AdapterSync | None:
        """With ``props.lora``: the ``adapter-sync`` sidecar, once the adapter slots are checked against what each GPU
        has left at ``fraction`` of it (the props' ``fraction_key``, scaled to a GPU share) after the weights and one
        ``context_tokens`` sequence's KV cache; else None."""
        lora = self.props.lora
        if lora is None:
            return None
        return adapter_sync(
            lora,
            context,
            self.adapter_server,
            fraction=memory_fraction(fraction, context, self.name),
            context_tokens=context_tokens,
            element_bytes=4 if dtype == "float32" else 2,
            fraction_key=fraction_key,
        )

    @property
    def sidecar_reservation(self) -> SidecarReservation:
        return sidecar_reservation(self.props.model_source(), self.collected_metrics, self.props.lora is not None)
