"""What a server does between ECS's SIGTERM and its exit (:class:`StopTiming`), and how that fits the task's
deregistration delay, its ``stopTimeout`` and the 2-minute Spot notice. Each preset's own timing is in its module."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import require, require_range
from .service_timing import SPOT_DETECTION_SECONDS, SPOT_NOTICE_SECONDS, SPOT_STOP_SECONDS


def drain_after_delay(longest_request_seconds: int, exit_seconds: int, server: str) -> int:
    """What the Spot notice leaves ``server`` to drain after SIGTERM, after the agent's detection time, a deregistration
    delay of ``longest_request_seconds`` (the longest generation finishes within it) and its ``exit_seconds``."""
    high = SPOT_STOP_SECONDS - exit_seconds
    require_range(
        longest_request_seconds,
        1,
        high,
        "longest_request_seconds",
        hint=f" (the deregistration delay, then {server}'s drain and {exit_seconds} s exit, fit the "
        f"{SPOT_STOP_SECONDS} s the {SPOT_NOTICE_SECONDS} s Spot notice leaves after the ECS agent sees it; "
        "bound longer generations with max_tokens)",
    )
    return high - longest_request_seconds


@dataclass(frozen=True)
class StopTiming:
    """What a server does between ECS's SIGTERM and its exit, so the task's timing can leave it the time.

    When ECS stops a task (scale-in, deployment, Spot interruption) the target is first deregistered from the
    load balancer: no new requests, and in-flight ones get the target group's deregistration delay to finish.
    Then ECS sends SIGTERM, and SIGKILL after the container's ``stopTimeout``. So:

    - ``drain_seconds``: after SIGTERM, the longest the server keeps finishing requests it had accepted
      (its own drain timeout; 0 for a server that aborts them, whose requests must finish in the deregistration delay).
    - ``exit_seconds``: after draining, the longest it takes to stop its processes and release the GPU.
    - ``longest_request_seconds`` (default None: unknown): the longest one request may run (the server's own
      request timeout). When given, the deregistration delay plus ``drain_seconds`` must cover it.
    - ``deregistration_delay_seconds`` (default None: the environment's ``ServiceTimingProps``): the delay this
      server's requests need. When given, the model's target groups use it and the container's ``stopTimeout`` is
      ``drain_seconds + exit_seconds``, whatever the environment's timing (a server with minutes-long requests
      cannot share an encoder's 20 s delay and 90 s stop timeout within the Spot notice).

    ``ModelService`` checks at construction that ``drain_seconds + exit_seconds`` fits the task's ``stopTimeout``
    and, after the deregistration delay, what the 2-minute Spot notice leaves once the ECS agent has seen it
    (``SPOT_STOP_SECONDS``). Each preset's own lives in its module:
    :func:`~.bundled_server.bundled_stop`, :func:`~.vllm_server.vllm_stop`, :func:`~.sglang_server.sglang_stop`,
    :func:`~.presets.tgi_stop`, :func:`~.presets.triton_stop`.
    """

    drain_seconds: int
    """After SIGTERM, the longest the server keeps finishing requests it had accepted (0-120). Required."""
    exit_seconds: int
    """After draining, the longest it takes to stop and release the GPU (1-120). Required."""
    longest_request_seconds: int | None = None
    """The longest one request may run. Default: None (unknown: not checked against the delay and drain)."""
    deregistration_delay_seconds: int | None = None
    """The delay this server's requests need. Default: None (the environment's ``ServiceTimingProps``)."""

    def __post_init__(self) -> None:
        require_range(self.drain_seconds, 0, SPOT_NOTICE_SECONDS, "server.stop.drain_seconds")
        require_range(self.exit_seconds, 1, SPOT_NOTICE_SECONDS, "server.stop.exit_seconds")
        if self.longest_request_seconds is not None:
            require_range(self.longest_request_seconds, 1, 3600, "server.stop.longest_request_seconds")
        if self.deregistration_delay_seconds is not None:
            require_range(
                self.deregistration_delay_seconds, 0, SPOT_NOTICE_SECONDS, "server.stop.deregistration_delay_seconds"
            )

    def task_timing(self, deregistration_delay_seconds: int, stop_timeout_seconds: int) -> tuple[int, int]:
        """(deregistration delay, stopTimeout) of the task: the server's own when it names a delay, else the given
        ones."""
        if self.deregistration_delay_seconds is None:
            return deregistration_delay_seconds, stop_timeout_seconds
        return self.deregistration_delay_seconds, self.seconds_after_sigterm

    def checked_task_timing(
        self, deregistration_delay_seconds: int, stop_timeout_seconds: int, server: str
    ) -> tuple[int, int]:
        """:meth:`task_timing` for the environment's delay and stop timeout, refused (:meth:`check_fits`) unless
        ``server`` drains and exits within it: what ModelService builds and what the app's config checks early."""
        delay, stop_timeout = self.task_timing(deregistration_delay_seconds, stop_timeout_seconds)
        self.check_fits(stop_timeout_seconds=stop_timeout, deregistration_delay_seconds=delay, server=server)
        return delay, stop_timeout

    @property
    def seconds_after_sigterm(self) -> int:
        """The most the server may take from SIGTERM to exit."""
        return self.drain_seconds + self.exit_seconds

    def check_fits(
        self, *, stop_timeout_seconds: int, deregistration_delay_seconds: int, server: str = "the server"
    ) -> None:
        """The server exits before SIGKILL, inside the Spot notice, and its requests finish before it stops serving."""
        need = self.seconds_after_sigterm
        require(
            deregistration_delay_seconds + need <= SPOT_STOP_SECONDS,
            "deregistration_delay_seconds",
            f"{deregistration_delay_seconds} s of deregistration delay + the {need} s {server} needs after SIGTERM "
            f"(drain {self.drain_seconds} + exit {self.exit_seconds}) = {deregistration_delay_seconds + need} s "
            f"exceeds the {SPOT_STOP_SECONDS} s the {SPOT_NOTICE_SECONDS} s Spot interruption notice leaves after the "
            f"ECS agent sees it ({SPOT_DETECTION_SECONDS} s); shorten the delay or the server's drain",
        )
        require(
            need <= stop_timeout_seconds,
            "stop_timeout_seconds",
            f"{stop_timeout_seconds} s is shorter than the {need} s {server} needs after SIGTERM (drain "
            f"{self.drain_seconds} + exit {self.exit_seconds}): ECS would SIGKILL it mid-drain; raise "
            f"stop_timeout_seconds to {need} or shorten the drain",
        )
        if self.longest_request_seconds is not None:
            window = deregistration_delay_seconds + self.drain_seconds
            require(
                window >= self.longest_request_seconds,
                "deregistration_delay_seconds",
                f"{deregistration_delay_seconds} s of deregistration delay + {self.drain_seconds} s of drain = "
                f"{window} s is shorter than the longest request {server} serves ({self.longest_request_seconds} s): "
                "requests in flight when the task stops would be cut; raise deregistration_delay_seconds to "
                f"{self.longest_request_seconds - self.drain_seconds}",
            )

    @classmethod
    def after_delay(cls, longest_request_seconds: int, exit_seconds: int, server: str) -> StopTiming:
        """An LLM server whose longest generation finishes within its own deregistration delay (that long), then
        drains for what the Spot notice leaves (:func:`drain_after_delay`) and exits within ``exit_seconds``."""
        return cls(
            drain_after_delay(longest_request_seconds, exit_seconds, server),
            exit_seconds,
            longest_request_seconds=longest_request_seconds,
            deregistration_delay_seconds=longest_request_seconds,
        )
