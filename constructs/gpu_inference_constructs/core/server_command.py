"""What a server's command says agrees with its contract (:func:`check_command`): the flags whose value the contract
states elsewhere (port, metrics port, drain), read off the command without loading aws_cdk."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from .errors import require

if TYPE_CHECKING:
    from .prometheus_metrics import PrometheusMetrics
    from .stop_timing import StopTiming

# Flags whose value the contract states elsewhere: (flags, the contract's field, how to read it off the contract).
PORT_FLAGS = ("--port", "--http-port")
METRICS_PORT_FLAGS = ("--metrics-port", "--prometheus-port")
EXIT_TIMEOUT_FLAGS = ("--exit-timeout-secs",)


def command_flag(command: Sequence[str], flags: Sequence[str]) -> str | None:
    """The value the last of ``flags`` gets in ``command`` (``--flag value`` or ``--flag=value``), or None."""
    found = None
    for index, arg in enumerate(command):
        name, equals, value = arg.partition("=")
        if name in flags:
            found = value if equals else (command[index + 1] if index + 1 < len(command) else "")
    return found


# How aws-cdk-lib writes a value it resolves only at synth or deploy into a string (its token encoding,
# "${Token[NAME.1]}"): cdk.Token.is_unresolved's test of a string, read without loading aws_cdk. (A list token's
# element, "#{Token[...]}", is no string token to it.)
TOKEN_IN_TEXT = re.compile(r"\$\{Token\[[a-zA-Z0-9:._-]+\]\}")


def holds_token(text: str) -> bool:
    """Whether ``text`` holds a CDK token (a value known only at synth or deploy): ``cdk.Token.is_unresolved``."""
    return bool(TOKEN_IN_TEXT.search(text))


class CommandedServer(Protocol):
    """What :func:`check_command` reads of a contract (a ServerContract)."""

    @property
    def name(self) -> str: ...

    @property
    def command(self) -> tuple[str, ...]: ...

    @property
    def port(self) -> int: ...

    @property
    def metrics(self) -> PrometheusMetrics | None: ...

    @property
    def stop(self) -> StopTiming: ...


def check_command(contract: CommandedServer) -> None:
    """What the command says agrees with the contract: the port the target group checks, the port the metrics
    sidecar scrapes, and the drain the stop timing budgets (a contradiction would synthesize a service that never
    passes its health check, scrapes nothing, or is killed mid-drain)."""

    def agree(flags: Sequence[str], expected: int | None, key: str, fix: str) -> None:
        said = command_flag(contract.command, flags)
        if said is None or expected is None or holds_token(said):
            return
        require(
            said == str(expected),
            key,
            f"{expected} but the {contract.name} server's command says "
            f"{next(a for a in contract.command if a.split('=')[0] in flags).split('=')[0]} {said}: {fix}",
        )

    agree(
        PORT_FLAGS, contract.port, "server.port", "set port to the port the command listens on, or change the command"
    )
    metrics_port = (contract.metrics.port or contract.port) if contract.metrics is not None else None
    agree(
        METRICS_PORT_FLAGS,
        metrics_port,
        "server.metrics.port",
        "set PrometheusMetrics(port=...) to the port the command serves metrics on (default: the server's port)",
    )
    agree(
        EXIT_TIMEOUT_FLAGS,
        contract.stop.drain_seconds,
        "server.stop.drain_seconds",
        "the server drains for as long as its --exit-timeout-secs: use triton_stop(<that value>), or change the flag",
    )
