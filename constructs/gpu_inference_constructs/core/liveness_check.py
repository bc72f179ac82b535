"""The container health check of a model server (:class:`LivenessCheck`): cheap, local, never the model."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import require, require_range


@dataclass(frozen=True)
class LivenessCheck:
    """The container health check: cheap, local, never the model. ECS replaces a container that fails it.

    ``command`` is Docker's form: ``("CMD", "prog", "arg", ...)`` or ``("CMD-SHELL", "a shell line")``.
    Defaults: every 15 s, 5 s timeout, 3 retries; the start period follows the model's load time (at most 300 s,
    the ECS maximum). ``passes_while_loading``: the check passes while the model loads (readiness is the target
    group's job); when False, synth refuses a model whose ``expected_load_seconds`` exceeds the start period plus
    the retries, since ECS would replace the container mid-load, in a loop.
    """

    command: tuple[str, ...]
    """Docker's form of the check. Required."""
    interval_seconds: int = 15
    """Seconds between checks (5-300). Default: 15."""
    timeout_seconds: int = 5
    """Seconds one check may take, below the interval (2-60). Default: 5."""
    retries: int = 3
    """Failed checks in a row before ECS replaces the container (1-10). Default: 3."""
    passes_while_loading: bool = False
    """The check passes while the model loads. Default: false."""

    def start_window_seconds(self, start_period_seconds: int) -> int:
        """How long a container that never passes survives: the start period, then ``retries`` failed checks."""
        return start_period_seconds + self.retries * self.interval_seconds

    def __post_init__(self) -> None:
        require(
            len(self.command) >= 2 and self.command[0] in ("CMD", "CMD-SHELL"),
            "liveness.command",
            f"{list(self.command)} must start with 'CMD' or 'CMD-SHELL' followed by the check, e.g. ('CMD', 'curl', "
            "'-f', 'http://127.0.0.1:8000/health')",
        )
        require_range(self.interval_seconds, 5, 300, "liveness.interval_seconds")
        require_range(self.timeout_seconds, 2, 60, "liveness.timeout_seconds")
        require(
            self.timeout_seconds < self.interval_seconds,
            "liveness.timeout_seconds",
            f"{self.timeout_seconds} must be below interval_seconds ({self.interval_seconds})",
        )
        require_range(self.retries, 1, 10, "liveness.retries")


def port_liveness(port: int, path: str) -> LivenessCheck:
    """Passes while nothing listens on ``port`` (the server is still loading, which takes minutes for a large model,
    past ECS's 300 s start period); once it listens, ``path`` must answer 200 within 4 s."""
    script = (
        "import socket, sys, urllib.request\n"
        "probe = socket.socket()\n"
        "probe.settimeout(2)\n"
        f"loading = probe.connect_ex(('127.0.0.1', {port})) != 0\n"
        "probe.close()\n"
        f"sys.exit(0) if loading else urllib.request.urlopen('http://127.0.0.1:{port}{path}', timeout=4)\n"
    )
    return LivenessCheck(command=("CMD", "python3", "-c", script), passes_while_loading=True)
