"""Hit rates of a model pool's tasks under two routings, simulated: Zipf(1.1) traffic over ``models`` models, each
task an LRU of ``slots`` resident models, Poisson arrivals, each request outstanding for ``service_ms``.

- least-outstanding: the ALB's least_outstanding_requests algorithm, ties broken at random (what it does when the
  counts are equal); every model reaches every task.
- affinity: rendezvous hashing on the model name (inference_server.pool.affinity), the least outstanding of the
  model's ``spread`` candidate tasks.

``python -m bench.pool_routing [--models 1000] [--slots 200] [--tasks 2 4] [--requests 200000]`` prints JSON."""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from collections import OrderedDict
from collections.abc import Callable

import orjson

from inference_server.pool.affinity import route

TARGET_HIT_RATE = 0.95


def zipf_sampler(models: int, s: float, rng: random.Random) -> Callable[[], int]:
    weights = [1 / (rank**s) for rank in range(1, models + 1)]
    ranks = list(range(models))
    cumulative = []
    total = 0.0
    for weight in weights:
        total += weight
        cumulative.append(total)
    return lambda: rng.choices(ranks, cum_weights=cumulative)[0]


def simulate(
    *,
    models: int,
    slots: int,
    tasks: int,
    requests: int,
    routing: str,
    spread: int = 1,
    s: float = 1.1,
    rate_per_s: float = 2000.0,
    service_ms: float = 5.0,
    seed: int = 0,
) -> dict[str, float]:
    rng = random.Random(seed)
    draw = zipf_sampler(models, s, rng)
    names = [f"task-{i}" for i in range(tasks)]
    caches: dict[str, OrderedDict[int, None]] = {name: OrderedDict() for name in names}
    outstanding = dict.fromkeys(names, 0)
    finishing: list[tuple[float, str]] = []
    now, hits, warm = 0.0, 0, requests // 5  # the first fifth warms the caches and is not counted
    counted = 0
    for index in range(requests):
        now += rng.expovariate(rate_per_s)
        while finishing and finishing[0][0] <= now:
            outstanding[heapq.heappop(finishing)[1]] -= 1
        model = draw()
        if routing == "affinity":
            task = route(f"model-{model}", names, outstanding.__getitem__, spread)
        else:
            fewest = min(outstanding.values())
            task = rng.choice([name for name in names if outstanding[name] == fewest])
        cache = caches[task]
        hit = model in cache
        if hit:
            cache.move_to_end(model)
        else:
            cache[model] = None
            if len(cache) > slots:
                cache.popitem(last=False)
        if index >= warm:
            counted += 1
            hits += hit
        outstanding[task] += 1
        heapq.heappush(finishing, (now + service_ms / 1000, task))
    return {"hit_rate": round(hits / counted, 4)}


def best_possible(models: int, slots: int, s: float = 1.1) -> float:
    """The hit rate of the ``slots`` most requested models held for good: no routing or eviction policy does better
    with that many slots in all."""
    weights = [1 / (rank**s) for rank in range(1, models + 1)]
    return round(sum(weights[:slots]) / sum(weights), 4)


def slots_for(target: float, models: int, s: float = 1.1) -> int:
    """The fewest slots in all whose best possible hit rate reaches ``target``."""
    weights = [1 / (rank**s) for rank in range(1, models + 1)]
    total, running = sum(weights), 0.0
    for count, weight in enumerate(weights, 1):
        running += weight
        if running / total >= target:
            return count
    return models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=200)
    parser.add_argument("--tasks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--requests", type=int, default=200_000)
    args = parser.parse_args(argv)
    results = []
    for tasks in args.tasks:
        for routing, spread in (("least-outstanding", 1), ("affinity", 1), ("affinity", 2)):
            figures = simulate(
                models=args.models,
                slots=args.slots,
                tasks=tasks,
                requests=args.requests,
                routing=routing,
                spread=spread,
            )
            results.append(
                {
                    "tasks": tasks,
                    "routing": routing,
                    "spread": spread,
                    **figures,
                    "best_possible": best_possible(args.models, tasks * args.slots),
                    "meets_95": figures["hit_rate"] >= TARGET_HIT_RATE,
                }
            )
    sys.stdout.write(
        orjson.dumps(
            {
                "models": args.models,
                "slots_per_task": args.slots,
                "zipf_s": 1.1,
                "slots_in_all_for_95": slots_for(TARGET_HIT_RATE, args.models),
                "results": results,
            },
            option=orjson.OPT_INDENT_2,
        ).decode()
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
