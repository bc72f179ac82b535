"""What ``ModelService`` accepts as ``server``, and everything the library reads of a server besides the contract it
builds: a preset (BundledServer, VllmServer, SglangServer, TritonServer, TgiServer, NeuronServer), a team's own preset
class, or a ServerContract itself. A team's class subclasses :class:`ServerDefinition`, implements ``contract`` and
declares what it knows; every declaration has a default that asks nothing of the library. The library asks the
object, never which class it is."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .model_props import ModelProps
    from .result_cache_props import ModelCacheProps
    from .server_contract import ServerContext, ServerContract

Accelerator = Literal["cuda", "neuron"]
ACCELERATORS: tuple[Accelerator, ...] = ("cuda", "neuron")
SupportLevel = Literal["supported", "experimental", "deprecated"]
SUPPORT_LEVELS: tuple[SupportLevel, ...] = ("supported", "experimental", "deprecated")


class ServerDefinition(ABC):
    """A server ``ModelService`` can run: its contract for one model, and what it declares about itself."""

    name: str = "custom"
    """The server's name in messages and graphs. Default: "custom"."""
    accelerator: Accelerator = "cuda"
    """What its image and model are built for: ``cuda`` (NVIDIA GPUs) or ``neuron`` (Inferentia2/Trainium);
    ``ModelService`` refuses capacity of the other kind before the contract is built. Default: "cuda"."""
    support: SupportLevel = "supported"
    """How far this library vouches for the preset: ``supported`` (run and tested end to end), ``experimental`` (built
    from its maker's documentation, not yet run on its hardware: a synth note says so) or ``deprecated`` (a synth
    warning with ``support_note``). Default: "supported"."""
    support_note: str = ""
    """Why the preset is experimental or deprecated, and what to use instead. Default: none."""
    sheds_load_itself: bool = False
    """The server answers 503 itself once full (its own admission), so a load balancer's concurrency cap in front of
    it is a second one (a synth warning where ``target_optimizer`` is set). Default: false."""

    @abstractmethod
    def contract(self, context: ServerContext) -> ServerContract:
        """The contract for ``context.model``."""

    def concurrency_limit(self) -> tuple[str, int] | None:
        """(the setting's key, its value): the most requests the server runs at once; a load balancer cap above it
        never binds and is refused. Default: None (not known)."""
        return None

    def cache_client(self) -> ModelCacheProps | None:
        """The server's settings as a client of the shared result cache (``ModelService.use_cache``); None for a
        server that reads no cache. Default: None."""
        return None

    def deprecation_warning_id(self) -> str:
        """The id of the synth warning a deprecated preset gets (to acknowledge it). Default:
        ``gpu-inference:<name>-deprecated``."""
        return f"gpu-inference:{self.name}-deprecated"

    def check(self, model: ModelProps) -> None:
        """What this server needs of the model, checked before any construct is made (and by the sizing advisor).
        Default: nothing."""
        return None
