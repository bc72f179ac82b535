"""Model affinity for a pool's tasks: which task should serve a model, so that each task's resident models are the
ones its traffic asks for (bench/pool_routing.py measures why: least-outstanding routing sends every model to every
task, and each task then needs the whole working set).

Rendezvous (highest-random-weight) hashing: a model's candidates are the tasks ranked by a hash of (model, task); the
first ``spread`` of them serve it, the least busy of those taking each request. A task that joins or leaves moves only
the models it ranks first for (about 1/N of them), so a scale-out does not flush every task's residents. The ALB cannot
route on a hash of a model name (its listener rules match paths, headers and query strings, one rule per match, and
its stickiness is per client cookie, not per model), so the scheme runs in the pool's own front: a task that receives
a request for a model it does not rank among its candidates forwards it to one that does."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence


def _weight(model: str, task: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{model}\0{task}".encode(), digest_size=8).digest(), "big")


def candidates(model: str, tasks: Sequence[str], spread: int = 1) -> list[str]:
    """The ``spread`` tasks that serve ``model``, best first."""
    return sorted(tasks, key=lambda task: _weight(model, task), reverse=True)[: max(1, spread)]


def route(model: str, tasks: Sequence[str], outstanding: Callable[[str], int], spread: int = 1) -> str:
    """The candidate with the fewest requests outstanding (the first on a tie)."""
    return min(candidates(model, tasks, spread), key=outstanding)
