"""The instance types ``sizing pack`` and ``sizing pool`` weigh: the region's CUDA types, or those the user names."""

from __future__ import annotations

from ..core.errors import ConfigError
from ..core.instance_catalog import GpuInstanceType
from .advisor import types_in_region
from .workload import Purchase


def candidate_types(purchase: Purchase, only: list[str] | None) -> list[GpuInstanceType]:
    types = types_in_region(purchase.region)
    if only:
        known = {t.name: t for t in types}
        unknown = [name for name in only if name not in known]
        if unknown:
            raise ConfigError(
                "--instance-types",
                f"{unknown} not offered in {purchase.region} or not in the catalog; "
                f"known here: {', '.join(sorted(known))}",
            )
        refused = [name for name in only if not known[name].cuda]
        if refused:
            raise ConfigError(
                "--instance-types",
                f"{refused}: GPU sharing is NVIDIA MPS, a CUDA feature; pick CUDA types (g4dn, g5, g6, g6e)",
            )
        return [known[name] for name in dict.fromkeys(only)]
    return [t for t in types if t.cuda]
