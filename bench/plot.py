"""The PNG: throughput and p95 latency against concurrency, ours vs baseline vs the ceiling, one row per model."""

from __future__ import annotations

from pathlib import Path

from .config import BARE, BASELINE, NULL, OURS, OURS_2W, OURS_OIP, OURS_OPENAI, PEER
from .report import models, series

_STYLE = {
    OURS: dict(color="tab:blue", marker="o"),
    OURS_2W: dict(color="tab:cyan", marker="o", linestyle=":"),
    PEER: dict(color="tab:green", marker="D"),
    BASELINE: dict(color="tab:orange", marker="s"),
    BARE: dict(color="tab:gray", marker="^", linestyle="--"),
    OURS_OPENAI: dict(color="tab:olive", marker="d", linestyle=":"),
    OURS_OIP: dict(color="tab:purple", marker="v", linestyle=":"),
}


def plot(results: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    measured = models(results)
    fig, axes = plt.subplots(len(measured) or 1, 2, figsize=(11, 4 * max(1, len(measured))), squeeze=False)
    for row, model in zip(axes, measured, strict=False):
        throughput, latency = row
        for system in (OURS, OURS_OPENAI, OURS_OIP, OURS_2W, PEER, BASELINE, BARE):
            runs = series(results, system, model)
            if not runs:
                continue
            x = [r["concurrency"] for r in runs]
            label = "bare ASGI (ceiling)" if system == BARE else system
            throughput.plot(x, [r["throughput_rps"] for r in runs], label=label, **_STYLE[system])
            latency.plot(x, [r["p95_ms"] for r in runs], label=label, **_STYLE[system])
        raw = results.get("raw_model")
        if model != NULL and raw:
            throughput.axhline(
                raw["best_items_per_s"],
                color="tab:gray",
                linestyle="--",
                label=f"raw model, batch {raw['best_batch_size']} (ceiling)",
            )
        throughput.set(title=f"{model}: throughput", xlabel="concurrent clients", ylabel="requests/s", xscale="log")
        latency.set(title=f"{model}: p95 latency", xlabel="concurrent clients", ylabel="ms", xscale="log", yscale="log")
        rates = [r["throughput_rps"] for r in results["runs"] if r["model"] == model and r["throughput_rps"] > 0]
        if rates and max(rates) > 20 * min(rates):
            throughput.set_yscale("log")
        else:
            throughput.set_ylim(bottom=0)
        for ax in row:
            ax.set_xticks(sorted({r["concurrency"] for r in results["runs"]}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    setup = results["setup"]
    fig.suptitle(
        f"{setup['cpu_count']} CPUs, torch threads {setup['torch_threads']}, {setup['device']}, {setup['mode']} run",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
