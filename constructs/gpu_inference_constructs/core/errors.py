"""The one error type that every props validation raises, and the problems a validation returns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a configuration: ``key``, the dotted path of the bad key (``models[chat].memory_mib``), and
    ``detail``, what is wrong and the fix. ``str()`` is the message a ``ConfigError`` for it carries."""

    key: str
    detail: str

    def __str__(self) -> str:
        return f"{self.key}: {self.detail}"

    def within(self, prefix: str) -> Problem:
        """The same problem, its key nested under ``prefix``."""
        key = f"{prefix}.{self.key}" if self.key and not self.key.startswith("[") else f"{prefix}{self.key}"
        return Problem(key, self.detail)


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key, the value and what is allowed.

    ``key`` is the dotted path inside the props (``capacity.instance_types[1]``);
    loaders prefix it with where the props came from (an environment name). ``problems``: each problem the error
    reports (one, or several from :meth:`of`).
    """

    def __init__(self, key: str, message: str, problems: Sequence[Problem] = ()) -> None:
        self.key = key
        self.detail = message
        self.problems: tuple[Problem, ...] = tuple(problems) or (Problem(key, message),)
        super().__init__(f"{key}: {message}")

    @classmethod
    def of(cls, problems: Sequence[Problem]) -> ConfigError:
        """One error for ``problems`` (at least one): the problem's own where there is one; else ``key`` lists each
        problem's key, comma-separated, and the message each problem on a line of its own."""
        if len(problems) == 1:
            return cls(problems[0].key, problems[0].detail)
        lines = "".join(f"\n- {problem}" for problem in problems)
        return cls(", ".join(problem.key for problem in problems), f"{len(problems)} problems:{lines}", problems)

    def within(self, prefix: str) -> ConfigError:
        """The same error, its key (each problem's) nested under ``prefix``."""
        return ConfigError.of([problem.within(prefix) for problem in self.problems])


def raise_problems(problems: Sequence[Problem]) -> None:
    """Nothing where there is no problem; else :meth:`ConfigError.of` them."""
    if problems:
        raise ConfigError.of(problems)


def problems_of(check: Callable[[], object]) -> tuple[Problem, ...]:
    """What ``check`` (a callable that raises ``ConfigError``) finds: its error's problems, or none."""
    try:
        check()
    except ConfigError as error:
        return error.problems
    return ()


def require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(key, message)


def require_range(value: float, low: float, high: float, key: str, hint: str = "") -> None:
    """``low <= value <= high``, or a ConfigError naming ``key`` and the allowed range."""
    require(low <= value <= high, key, f"{value} is out of range; allowed {low} to {high}{hint}")


def require_cdk(value: object, members: tuple[str, ...], key: str, what: str) -> None:
    """``value`` is an aws-cdk-lib object with ``members`` (how a jsii interface such as ``ecs.ICluster`` is told at
    run time), or a ConfigError naming ``key`` and ``what`` to pass."""
    require(all(hasattr(value, member) for member in members), key, f"got {type(value).__name__}: pass {what}")
