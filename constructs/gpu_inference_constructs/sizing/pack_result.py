"""What ``sizing pack`` found: every candidate type's packing, cheapest first, and the best one's cdk.json blocks."""

from __future__ import annotations

from dataclasses import dataclass, field

from .advisor import TypeAdvice
from .pack_models import PackModel
from .pack_placement import TypePack
from .workload import Assumptions, Purchase

GROUP = "shared"  # the capacity group the fragment puts the shared models in


@dataclass
class PackResult:
    models: list[PackModel]
    purchase: Purchase
    assumptions: Assumptions
    types: list[TypePack]  # cheapest packing first, the ones that cannot hold the models last
    dedicated: dict[str, TypeAdvice | None] = field(default_factory=dict)
    """Per model: the single-model advisor's cheapest type. Default: empty."""
    capacity: dict | None = None
    """The capacity group's block of the best packing. Default: None (until recommended)."""
    model_blocks: list[dict] = field(default_factory=list)
    """Each model's cdk.json block. Default: empty (until recommended)."""
    notes: list[str] = field(default_factory=list)
    """What the snippet's reader should know. Default: empty."""

    @property
    def best(self) -> TypePack | None:
        return self.types[0] if self.types and self.types[0].fits else None

    def snippet(self) -> dict:
        """What to paste into the environment: a capacity group of its own (a GPU in MPS mode takes only MPS
        containers) and the models."""
        names = [block["name"] for block in self.model_blocks]
        return {"capacity_groups": {GROUP: {"capacity": self.capacity, "models": names}}, "models": self.model_blocks}
