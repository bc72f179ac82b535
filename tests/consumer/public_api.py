"""The library's public API as data: each name ``gpu_inference_constructs`` exports -> the keyword parameters its
constructor (or, for a function, its call) takes. ``python -m tests.consumer.public_api`` prints it as JSON, with
whichever copy of the package is first on sys.path (a release's: PYTHONPATH=<its constructs/>)."""

from __future__ import annotations

import inspect
import json
import sys

SKIPPED = ("self", "scope", "construct_id", "id", "args", "kwargs")


def _parameters(obj: object) -> list[str]:
    target = obj.__init__ if inspect.isclass(obj) else obj  # jsii's constructs hide their signature behind a metaclass
    try:
        return [name for name in inspect.signature(target).parameters if name not in SKIPPED]  # pyright: ignore[reportArgumentType]
    except (TypeError, ValueError):
        return []


def public_api() -> dict[str, list[str]]:
    import gpu_inference_constructs as package

    return {
        name: _parameters(getattr(package, name))
        for name in sorted(package.__all__)
        if callable(getattr(package, name))
    } | {name: [] for name in package.__all__ if not callable(getattr(package, name))}


if __name__ == "__main__":
    json.dump(public_api(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
