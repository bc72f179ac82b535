"""Hit rates of a model pool's tasks under two routings, simulated: Zipf(1.1) traffic over ``models`` models, each
task an LRU of ``slots`` resident models, Poisson arrivals, each request outstanding for ``service_ms``; the ALB's
least_outstanding_requests algorithm picks the task a request enters (ties broken at random, as it does when the
counts are equal).

- least-outstanding: the request is served where it enters; every model reaches every task.
- peer-router: the pool server's own router (inference_server.pool.peer_router.PeerRouter, one per task, each with
  the static list of the tasks' addresses) forwards the request to its model's owner, which serves it. The function
  that decides is the one the servers run, not a copy: with ``hot_share`` 0 one owner a model, with the server's
  default (POOL_PEER_HOT_SHARE) hot models get more owners.

Per run: the hit rate, the share of requests forwarded (one hop each), and the busiest task's share of the requests
served against an even share (the load a hot model puts on its one owner). Then the capacity that reaches 95 %: the
fewest slots a task at 2 tasks, and the fewest tasks at ``slots``.

``python -m bench.pool_routing [--models 1000] [--slots 200] [--tasks 2 3 4 8] [--requests 200000]`` prints JSON."""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from collections import Counter, OrderedDict
from collections.abc import Callable

import orjson

from inference_server.pool.affinity import DEFAULT_HOT_SHARE
from inference_server.pool.peer_router import PeerRouter
from inference_server.pool.peers import StaticPeers

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


def task_routers(tasks: int, hot_share: float) -> list[PeerRouter]:
    """One PeerRouter per task, each knowing every task's address and which one is its own (loopback ports)."""
    addresses = [f"127.0.0.1:{9000 + index}" for index in range(tasks)]
    return [PeerRouter(StaticPeers(addresses, port=9000 + index), hot_share=hot_share) for index in range(tasks)]


def simulate(
    *,
    models: int,
    slots: int,
    tasks: int,
    requests: int,
    routing: str,
    hot_share: float = DEFAULT_HOT_SHARE,
    s: float = 1.1,
    rate_per_s: float = 2000.0,
    service_ms: float = 5.0,
    seed: int = 0,
) -> dict[str, float]:
    rng = random.Random(seed)
    draw = zipf_sampler(models, s, rng)
    routers = task_routers(tasks, hot_share)
    names = [router.peers.self_address or "" for router in routers]
    caches: dict[str, OrderedDict[int, None]] = {name: OrderedDict() for name in names}
    outstanding = dict.fromkeys(names, 0)
    finishing: list[tuple[float, str]] = []
    served: Counter[str] = Counter()
    now, hits, forwarded, warm = 0.0, 0, 0, requests // 5  # the first fifth warms the caches and is not counted
    counted = 0
    for index in range(requests):
        now += rng.expovariate(rate_per_s)
        while finishing and finishing[0][0] <= now:
            outstanding[heapq.heappop(finishing)[1]] -= 1
        model = draw()
        fewest = min(outstanding.values())
        entry = rng.choice([name for name, count in outstanding.items() if count == fewest])
        task = entry
        if routing == "peer-router":
            owner = routers[names.index(entry)].owner(f"model-{model}")
            task = owner or entry
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
            forwarded += task != entry
            served[task] += 1
        outstanding[entry] += 1  # the ALB counts the request at the task it sent it to, hop or not
        heapq.heappush(finishing, (now + service_ms / 1000, entry))
    return {
        "hit_rate": round(hits / counted, 4),
        "forwarded": round(forwarded / counted, 4),
        "busiest_task_share_of_even": round(max(served.values()) * tasks / counted, 3),
    }


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


def smallest(reaches: Callable[[int], bool], start: int, step: int, limit: int) -> int | None:
    """The first of start, start + step, ... up to limit for which reaches() holds."""
    for value in range(start, limit + 1, step):
        if reaches(value):
            return value
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=200)
    parser.add_argument("--tasks", type=int, nargs="+", default=[2, 3, 4, 8])
    parser.add_argument("--requests", type=int, default=200_000)
    args = parser.parse_args(argv)
    common = {"models": args.models, "requests": args.requests}
    results = []
    for tasks in args.tasks:
        for routing, hot_share in (
            ("least-outstanding", 0.0),
            ("peer-router", 0.0),
            ("peer-router", DEFAULT_HOT_SHARE),
            ("peer-router", DEFAULT_HOT_SHARE / 2),
        ):
            figures = simulate(slots=args.slots, tasks=tasks, routing=routing, hot_share=hot_share, **common)
            results.append(
                {
                    "tasks": tasks,
                    "routing": routing,
                    "hot_share": hot_share,
                    **figures,
                    "best_possible": best_possible(args.models, tasks * args.slots),
                    "meets_95": figures["hit_rate"] >= TARGET_HIT_RATE,
                }
            )

    def router_reaches(tasks: int, slots: int) -> bool:
        return simulate(slots=slots, tasks=tasks, routing="peer-router", **common)["hit_rate"] >= TARGET_HIT_RATE

    capacity = {
        "slots_a_task_at_2_tasks": smallest(lambda slots: router_reaches(2, slots), 300, 25, args.models),
        f"tasks_at_{args.slots}_slots": smallest(lambda tasks: router_reaches(tasks, args.slots), 2, 1, 16),
    }
    sys.stdout.write(
        orjson.dumps(
            {
                "models": args.models,
                "slots_per_task": args.slots,
                "zipf_s": 1.1,
                "slots_in_all_for_95": slots_for(TARGET_HIT_RATE, args.models),
                "results": results,
                "peer_router_reaches_95_with": capacity,
            },
            option=orjson.OPT_INDENT_2,
        ).decode()
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
