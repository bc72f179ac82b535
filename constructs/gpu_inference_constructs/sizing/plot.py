"""The PNG: USD per 1M requests by instance type (On-Demand, Spot, mix), and one task's throughput."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError
from .advisor import TypeAdvice, priced_throughput


def plot(advice: list[TypeAdvice], path: str | Path, title: str) -> Path:
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(
            "--plot", "needs matplotlib, which the library does not depend on: pip install matplotlib"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranked = [a for a in advice if a.usd_per_million_requests.get("mix") is not None]
    if not ranked:
        raise ConfigError("--plot", "nothing to plot: no type both fits and has a throughput")
    names = [a.name + ("" if a.deployable else " (compared only)") for a in ranked]
    fig, (cost, speed) = plt.subplots(1, 2, figsize=(13, 0.45 * len(names) + 2.2), sharey=True)
    y = range(len(names))
    for offset, (key, label, color) in enumerate(
        (
            ("on_demand", "On-Demand", "tab:red"),
            ("spot", "all Spot", "tab:green"),
            ("mix", "environment mix", "tab:blue"),
        )
    ):
        cost.barh(
            [i + (offset - 1) * 0.27 for i in y],
            [a.usd_per_million_requests[key] for a in ranked],
            height=0.27,
            label=label,
            color=color,
        )
    cost.set_yticks(list(y), names)
    cost.invert_yaxis()
    cost.set_xlabel("USD per 1M requests at the sized fleet")
    cost.legend(loc="lower right")
    speed.barh(
        list(y),
        [priced_throughput(a).requests_per_second for a in ranked],
        color=["tab:purple" if priced_throughput(a).source == "measured" else "tab:gray" for a in ranked],
    )
    speed.set_xlabel("requests/s per task (purple: measured, grey: estimate)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
