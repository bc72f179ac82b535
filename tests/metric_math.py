"""CloudWatch metric math over single values, for the synthesized alarms' and policies' expressions: IF, FILL, CEIL,
PERIOD, AND, OR and the arithmetic and comparisons between them (enough for what this app writes)."""

from __future__ import annotations

import math
import re


def evaluate(expression: str, values: dict, periods: dict | None = None) -> float:
    """``expression`` with each metric id's value from ``values`` (None: no datapoint) and ``PERIOD(id)`` from
    ``periods`` (seconds; a PERIOD of an id not in it is a KeyError)."""
    python = re.sub(r"PERIOD\((\w+)\)", lambda match: str((periods or {})[match.group(1)]), expression)
    python = re.sub(r"\bAND\b", "and", re.sub(r"\bOR\b", "or", python))
    python = python.replace("IF(", "_if(").replace("FILL(", "_fill(").replace("CEIL(", "_ceil(")
    helpers = {
        "_if": lambda condition, then, otherwise: then if condition else otherwise,
        "_fill": lambda value, default: default if value is None else value,
        "_ceil": math.ceil,
    }
    return eval(python, {"__builtins__": {}}, {**helpers, **values})  # noqa: S307 - our own synthesized expression
