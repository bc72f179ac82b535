"""How a model's tasks leave: load balancer deregistration, then SIGTERM, the server's drain, and SIGKILL."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .errors import require, require_range
from .load_balancer_props import ALB_MAX_IDLE_TIMEOUT_SECONDS

# EC2 warns two minutes before it reclaims a Spot instance.
SPOT_NOTICE_SECONDS = 120
SPOT_DETECTION_SECONDS = 10
"""How late in the notice ECS starts stopping the tasks, kept free of every stop: the agent polls the instance
metadata's spot/instance-action once a second and then calls UpdateContainerInstancesState DRAINING
(aws/amazon-ecs-agent agent/app/agent.go, startSpotInstanceDrainingPoller), and the scheduler then stops the instance's
tasks; neither the call's retries nor the scheduler's delay is documented, so 10 s is a conservative figure
(docs/aws-facts.md)."""
SPOT_STOP_SECONDS = SPOT_NOTICE_SECONDS - SPOT_DETECTION_SECONDS
"""What the notice leaves a task, from the scheduler's stop to the instance's end: deregistration delay, drain, exit."""
# A server's HTTP keep-alive outlasts the load balancer's idle timeout by this much, so the ALB, not the server,
# closes an idle connection (otherwise the ALB may send a request on a connection the server just closed: a 502).
KEEP_ALIVE_MARGIN_SECONDS = 15


@dataclass(frozen=True)
class ServiceTimingProps:
    """The task's side of stopping, the same for every server of an environment.

    On a Spot interruption all of it must fit in the two-minute notice. What the server itself does after SIGTERM
    is its contract's :class:`~gpu_inference_constructs.core.server_contract.StopTiming` (the bundled server's drain is
    ``BundledServerProps.drain_seconds``); ``ModelService`` checks it against these. A contract whose StopTiming
    names its own deregistration delay (the vLLM preset: ``VllmProps.longest_request_seconds``) gets that delay and a
    ``stopTimeout`` of its drain plus exit instead.
    """

    deregistration_delay_seconds: int = 20
    """How long the target group lets in-flight requests finish after the target is deregistered. Default: 20."""
    stop_timeout_seconds: int = 90
    """ECS's ``stopTimeout``: SIGKILL this long after SIGTERM. Default: 90 (the bundled server's 70 s drain + 15 s
    exit)."""
    keep_alive_seconds: int | None = None
    """How long the servers keep an idle HTTP connection. Default: the load balancer's idle timeout plus
    KEEP_ALIVE_MARGIN_SECONDS (75 s behind the ALB's default 60 s; :meth:`keep_alive_above`)."""

    def __post_init__(self) -> None:
        total = self.deregistration_delay_seconds + self.stop_timeout_seconds
        require(
            total <= SPOT_STOP_SECONDS,
            "stop_timeout_seconds",
            f"deregistration_delay_seconds ({self.deregistration_delay_seconds}) + stop_timeout_seconds "
            f"({self.stop_timeout_seconds}) = {total} s exceeds the {SPOT_STOP_SECONDS} s the {SPOT_NOTICE_SECONDS} s "
            f"Spot interruption notice leaves after the ECS agent sees it ({SPOT_DETECTION_SECONDS} s); shorten either",
        )
        require_range(self.deregistration_delay_seconds, 0, 3600, "deregistration_delay_seconds")
        require_range(self.stop_timeout_seconds, 2, SPOT_STOP_SECONDS, "stop_timeout_seconds")
        if self.keep_alive_seconds is not None:
            require_range(
                self.keep_alive_seconds,
                2,
                ALB_MAX_IDLE_TIMEOUT_SECONDS + KEEP_ALIVE_MARGIN_SECONDS,
                "keep_alive_seconds",
            )

    def keep_alive_above(self, idle_timeout_seconds: int) -> ServiceTimingProps:
        """These timings with the servers' HTTP keep-alive resolved for a load balancer idle timeout of
        ``idle_timeout_seconds``: ``keep_alive_seconds`` when set (it must exceed the idle timeout, or the ALB reuses
        connections the server already closed and answers 502), else that timeout plus KEEP_ALIVE_MARGIN_SECONDS."""
        if self.keep_alive_seconds is None:
            return dataclasses.replace(self, keep_alive_seconds=idle_timeout_seconds + KEEP_ALIVE_MARGIN_SECONDS)
        require(
            self.keep_alive_seconds > idle_timeout_seconds,
            "keep_alive_seconds",
            f"{self.keep_alive_seconds} must exceed the load balancer's idle timeout ({idle_timeout_seconds} s), or "
            f"the ALB reuses connections the server closed and answers 502; set at least {idle_timeout_seconds + 1}, "
            f"or leave it out for the idle timeout + {KEEP_ALIVE_MARGIN_SECONDS} s",
        )
        return self
