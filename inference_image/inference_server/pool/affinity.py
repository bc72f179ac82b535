"""Which of a pool's tasks owns a model: rendezvous (highest-random-weight) hashing, the ranking peer_router.py routes
by and bench/pool_routing.py measures. A model's candidates are the tasks ranked by a hash of (model, task); the first
owns it. Every task computes the same ranking from the same task list with no coordination, and a task that joins or
leaves moves only the models it ranks first for (about 1/N of them), so a scale-out does not flush every task's
resident models. The ALB cannot route on a hash of a model name (its listener rules match paths, headers and query
strings, one rule per match, and its stickiness is per client cookie), so the pool's own front does it."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

# A hot model gets more owners once one owner would serve more than this share of a task's even load from it alone
# (peer_router.py; POOL_PEER_HOT_SHARE).
DEFAULT_HOT_SHARE = 0.5


def _weight(model: str, task: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{model}\0{task}".encode(), digest_size=8).digest(), "big")


def candidates(model: str, tasks: Sequence[str], spread: int = 1) -> list[str]:
    """The ``spread`` tasks that rank first for ``model``, best first."""
    return sorted(tasks, key=lambda task: _weight(model, task), reverse=True)[: max(1, spread)]
