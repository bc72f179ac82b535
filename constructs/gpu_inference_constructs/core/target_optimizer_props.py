"""What a model's ALB Target Optimizer is (``ModelProps.target_optimizer``): the agent's image and settings, the
target group's control port. Built by target_optimizer.py."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import require, require_range

# The user guide documents only the ":latest" tag of this repository: a deployment pins its own digest or mirror.
AGENT_REPOSITORY = "public.ecr.aws/aws-elb/target-optimizer/target-control-agent"
# What the agent (a Rust proxy) reserves: the AWS Load Balancer Controller's own end-to-end test requests 100m/128Mi.
AGENT_CPU = 128
AGENT_MEMORY_MIB = 128
MAX_CONCURRENCY_LIMIT = 1000
LOG_LEVELS = ("error", "info", "debug")


@dataclass(frozen=True)
class TargetOptimizerProps:
    """A model's ALB Target Optimizer (``target_optimizer`` in its cdk.json block): the target group gets a control
    port and every task the target-control agent in front of its server."""

    agent_image: str
    """The target-control agent's image, pinned (``@sha256:...``, or a tag of your own mirror): AWS documents only
    ``public.ecr.aws/aws-elb/target-optimizer/target-control-agent:latest``, which a deployment must not float on.
    Required."""
    max_concurrency: int = 1
    """The most requests the load balancer sends one task at once (``TARGET_CONTROL_MAX_CONCURRENCY``, 1-1000; AWS's
    own default is 1). At most the server's own limit on running requests. Default: 1."""
    control_port: int = 3000
    """The target group's ``TargetControlPort``: the load balancer's control channels to the agent (TLS).
    Default: 3000 (the port AWS's examples use)."""
    data_port: int = 8880
    """The agent's data port, which becomes the target group's port; the server keeps its own port behind it.
    Default: 8880."""
    log_level: str = "info"
    """The agent's ``RUST_LOG``: error, info or debug. Default: ``"info"``."""

    def __post_init__(self) -> None:
        require(
            isinstance(self.agent_image, str) and AGENT_REPOSITORY.split("/")[-1] in self.agent_image.split("@")[0],
            "agent_image",
            f"{self.agent_image!r}: give the target-control agent's image ({AGENT_REPOSITORY} pinned by digest, "
            "or your mirror of it, whose path ends in target-control-agent)",
        )
        require(
            self.agent_image.partition("@")[2].startswith("sha256:")
            or not self.agent_image.endswith(":latest")
            and ":" in self.agent_image.rsplit("/", 1)[-1],
            "agent_image",
            f"{self.agent_image!r} floats: pin it by digest (<image>@sha256:...) or a tag of your own mirror, so a "
            "deployment replaces the proxy in front of every task only when you choose",
        )
        require_range(self.max_concurrency, 1, MAX_CONCURRENCY_LIMIT, "max_concurrency")
        for key in ("control_port", "data_port"):
            require_range(getattr(self, key), 1024, 65535, key)
        require(
            self.control_port != self.data_port,
            "control_port",
            f"{self.control_port} is also data_port: the control channels need a port of their own; choose another",
        )
        require(self.log_level in LOG_LEVELS, "log_level", f"{self.log_level!r}: one of {', '.join(LOG_LEVELS)}")

    def environment(self, server_port: int) -> dict[str, str]:
        """The agent's variables, as the user guide names them."""
        return {
            "TARGET_CONTROL_DATA_ADDRESS": f"0.0.0.0:{self.data_port}",
            "TARGET_CONTROL_CONTROL_ADDRESS": f"0.0.0.0:{self.control_port}",
            "TARGET_CONTROL_DESTINATION_ADDRESS": f"127.0.0.1:{server_port}",
            "TARGET_CONTROL_MAX_CONCURRENCY": str(self.max_concurrency),
            "RUST_LOG": self.log_level,
        }
