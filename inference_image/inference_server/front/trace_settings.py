"""What tracing reads of a server's settings: a single model's Settings and a pool's PoolSettings both have it, so
one tracing (tracing.py, spans.py) serves both servers."""

from __future__ import annotations

from typing import Protocol


class TraceSettings(Protocol):
    """What tracing reads of a server's settings (a single model's Settings, a pool's PoolSettings)."""

    @property
    def traces_endpoint(self) -> str | None: ...

    @property
    def trace_sample_ratio(self) -> float: ...

    @property
    def deployment_env(self) -> str: ...

    @property
    def trace_service(self) -> tuple[str, str]:
        """The resource's service name and version."""
        ...

    @property
    def trace_attributes(self) -> dict[str, str]:
        """The resource's and every request span's attributes naming what the server serves."""
        ...
