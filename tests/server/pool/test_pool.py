"""The pool's rules against a fake loader (pool_fakes.py): single flight, the budgets and LRU eviction (never a model
with work in flight), fairness between models, 404/400 before storage, failed-load backoff, deadline admission with
a pending load, registry changes with requests in flight."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

from inference_server.pool.loaded import DEVICE, HOST
from inference_server.pool.registry import Registry
from inference_server.pool.resident import Budgets, ModelPool, PoolError
from inference_server.pool.scheduler import Scheduler

from ..pool_fakes import MIB, FakeLoader

FAR = 30.0  # seconds: a deadline no test reaches


class Clock:
    """time.monotonic() moved on by what a test adds to ``now``: the pool's backoffs read it, while its scheduler
    keeps the real clock, so the two agree on a deadline (a clock of its own origin would put every deadline in the
    past, or far off, by the machine's uptime)."""

    def __init__(self) -> None:
        self.offset = 0.0

    @property
    def now(self) -> float:
        return time.monotonic() + self.offset

    @now.setter
    def now(self, value: float) -> None:
        self.offset = value - time.monotonic()

    def __call__(self) -> float:
        return self.now


def make_pool(
    loader: FakeLoader,
    models: dict[str, str],
    *,
    device_mib: int | None = None,
    host_mib: int = 0,
    max_resident: int = 0,
    clock=time.monotonic,
    load_threads: int = 2,
    **budget,
) -> ModelPool:
    budgets = Budgets(device_mib * MIB if device_mib else None, host_mib * MIB, max_resident, **budget)
    pool = ModelPool("pool-a", loader, budgets, max_batch_size=4, load_threads=load_threads, clock=clock)
    pool.apply_registry(Registry("pool-a", models))
    pool.start()
    return pool


@pytest.fixture
def pools():
    made: list[ModelPool] = []

    def make(*args, **kwargs) -> ModelPool:
        made.append(make_pool(*args, **kwargs))
        return made[-1]

    yield make
    for pool in made:
        pool.stop()


async def serve(pool: ModelPool, name: str, texts=("x",)) -> list[float]:
    deadline = pool._clock() + FAR
    model, _ = await pool.acquire(name, deadline, len(texts))
    try:
        result = await pool.infer(model, model.handler.preprocess(list(texts)), deadline)
        return model.handler.postprocess(result.outputs, len(texts))
    finally:
        pool.release(model)


def test_concurrent_first_requests_wait_on_one_load(pools):
    loader = FakeLoader()
    loader.load_gate.clear()
    pool = pools(loader, {"a": "1"})

    async def main():
        waiting = [asyncio.ensure_future(serve(pool, "a")) for _ in range(10)]
        await asyncio.sleep(0.1)
        loader.load_gate.set()
        return await asyncio.gather(*waiting)

    assert asyncio.run(main()) == [[1.0]] * 10
    assert loader.loads == {("a", "1"): 1}


@pytest.mark.parametrize("name", ["../etc", "A", "a/b", "a_b", "-a", "a" * 65, "", "a%2Fb", "a b"])
def test_a_name_that_is_not_plain_is_a_400_and_never_loads(pools, name):
    loader = FakeLoader()
    pool = pools(loader, {"a": "1"})
    with pytest.raises(PoolError) as caught:
        asyncio.run(pool.acquire(name, time.monotonic() + FAR))
    assert caught.value.status == 400 and not loader.loads


def test_an_unregistered_model_is_a_404_naming_the_pool_and_never_loads(pools):
    loader = FakeLoader()
    pool = pools(loader, {"a": "1"})
    with pytest.raises(PoolError) as caught:
        asyncio.run(pool.acquire("ghost", time.monotonic() + FAR))
    assert caught.value.status == 404 and "pool-a" in caught.value.message and "ghost" in caught.value.message
    assert not loader.loads


def test_the_least_recently_used_idle_model_is_evicted_never_one_with_work_in_flight(pools):
    loader = FakeLoader()
    pool = pools(loader, {"a": "1", "b": "1", "c": "1", "d": "1"}, device_mib=2)  # two models fit

    async def main():
        held, _ = await pool.acquire("a", time.monotonic() + FAR)  # "a" is the oldest, but in flight
        await serve(pool, "b")
        await serve(pool, "c")  # evicts "b" (idle), not "a"
        assert {m.name for m in pool.models.values() if m.on_device} == {"a", "c"}
        held_c, _ = await pool.acquire("c", time.monotonic() + FAR)
        with pytest.raises(PoolError) as caught:  # both resident models busy: no room, and neither is touched
            await pool.acquire("d", time.monotonic() + FAR)
        assert caught.value.status == 503
        assert {m.name for m in pool.models.values() if m.on_device} == {"a", "c"}
        pool.release(held)
        pool.release(held_c)
        await serve(pool, "d")  # now "a" (least recently used, idle) goes
        assert {m.name for m in pool.models.values() if m.on_device} == {"c", "d"}

    asyncio.run(main())
    assert loader.unloaded == [("b", "1"), ("a", "1")]  # "a" only once idle
    assert loader.loads[("d", "1")] == 1  # not loaded while it could not fit


def test_an_evicted_model_waits_in_host_memory_and_comes_back_without_a_load(pools):
    loader = FakeLoader()
    pool = pools(loader, {"a": "1", "b": "1"}, max_resident=1, host_mib=8)

    async def main():
        await serve(pool, "a")
        await serve(pool, "b")  # "a" to host memory
        assert not pool.models["a"].on_device
        model, tier = await pool.acquire("a", time.monotonic() + FAR)
        pool.release(model)
        return tier

    assert asyncio.run(main()) == HOST
    assert loader.loads[("a", "1")] == 1 and not loader.unloaded


def test_a_hot_model_cannot_starve_a_cold_one():
    loader = FakeLoader()
    pool = make_pool(loader, {"hot": "1", "cold": "2"})
    try:

        async def main():
            await serve(pool, "hot")
            await serve(pool, "cold")
            loader.runs.clear()
            loader.forward_gate.clear()  # the hot model's first batch holds the thread while both queues fill
            hot = [asyncio.ensure_future(serve(pool, "hot", ["x"] * 4)) for _ in range(20)]
            await asyncio.sleep(0.1)
            cold = asyncio.ensure_future(serve(pool, "cold"))
            await asyncio.sleep(0.05)
            loader.forward_gate.set()
            await asyncio.gather(*hot, cold)

        asyncio.run(main())
    finally:
        pool.stop()
    # 20 hot batches were queued before the cold request: it ran after at most the running one and one more.
    assert loader.runs.index("cold") <= 2, loader.runs


def test_the_expected_wait_counts_batches_and_a_turn_of_every_busy_model():
    scheduler = Scheduler(max_batch_size=2, max_queue_size=100)
    assert scheduler.expected_wait_s(None, 4) == pytest.approx(2 * scheduler.batch_seconds)


def test_a_failed_load_is_marked_failed_with_a_backoff_not_retried_per_request(pools):
    loader = FakeLoader()
    loader.fail[("a", "1")] = "the weights do not match the manifest"
    clock = Clock()
    pool = pools(loader, {"a": "1"}, clock=clock, load_backoff_s=30.0)

    async def attempt() -> PoolError:
        with pytest.raises(PoolError) as caught:
            await pool.acquire("a", clock.now + FAR)
        return caught.value

    first = asyncio.run(attempt())
    assert first.status == 503 and "do not match the manifest" in first.message
    for _ in range(5):
        again = asyncio.run(attempt())
        assert again.status == 503 and again.code == "model_failed" and "do not match" in again.message
        assert again.retry_after_s is not None and 1 <= again.retry_after_s <= 30
    assert loader.loads[("a", "1")] == 1
    clock.now += 31  # the backoff is over: one more load, which fails again and doubles it
    asyncio.run(attempt())
    assert loader.loads[("a", "1")] == 2
    assert asyncio.run(attempt()).retry_after_s == pytest.approx(60, abs=1)


def test_deadline_admission_counts_the_pending_load_and_sheds_fast(pools):
    loader = FakeLoader()
    loader.load_gate.clear()
    pool = pools(loader, {"a": "1"}, load_estimate_s=60.0)
    started = time.monotonic()
    with pytest.raises(PoolError) as caught:
        asyncio.run(pool.acquire("a", time.monotonic() + 10.0))
    assert caught.value.status == 503 and "loading" in caught.value.message
    assert time.monotonic() - started < 5  # refused at once, not at the 10 s deadline (at any load)
    assert loader.loading.wait(5)  # the load goes on for the requests after it
    loader.load_gate.set()


def test_a_registry_change_switches_versions_with_requests_in_flight_undisturbed(pools):
    loader = FakeLoader()
    pool = pools(loader, {"a": "1"})

    async def main():
        assert await serve(pool, "a") == [1.0]
        loader.forward_gate.clear()
        in_flight = asyncio.ensure_future(serve(pool, "a"))  # started on version 1, held in its forward
        await asyncio.sleep(0.1)
        pool.apply_registry(Registry("pool-a", {"a": "2"}, 1))
        for _ in range(100):  # version 2 loads in the background; version 1 serves meanwhile
            if pool.models["a"].version == "2":
                break
            await asyncio.sleep(0.02)
        assert ("a", "1") not in loader.unloaded  # its request is still running
        loader.forward_gate.set()
        assert await in_flight == [1.0]
        assert await serve(pool, "a") == [2.0]

    asyncio.run(main())
    assert loader.unloaded == [("a", "1")]


def test_a_refused_version_leaves_the_previous_one_serving(pools):
    loader = FakeLoader()
    loader.fail[("a", "2")] = "does not answer the probe as published"
    pool = pools(loader, {"a": "1"})

    async def main():
        await serve(pool, "a")
        pool.apply_registry(Registry("pool-a", {"a": "2"}, 1))
        for _ in range(100):
            if ("a", "2") in pool._failed:
                break
            await asyncio.sleep(0.02)
        return [await serve(pool, "a") for _ in range(3)]

    assert asyncio.run(main()) == [[1.0]] * 3
    assert loader.loads[("a", "2")] == 1 and not loader.unloaded


def test_a_removed_model_is_a_404_at_once_and_its_request_in_flight_finishes(pools):
    loader = FakeLoader()
    pool = pools(loader, {"a": "1", "b": "1"})

    async def main():
        await serve(pool, "a")
        loader.forward_gate.clear()
        in_flight = asyncio.ensure_future(serve(pool, "a"))
        await asyncio.sleep(0.1)
        pool.apply_registry(Registry("pool-a", {"b": "1"}, 1))
        with pytest.raises(PoolError) as caught:
            await pool.acquire("a", time.monotonic() + FAR)
        assert caught.value.status == 404
        assert not loader.unloaded
        loader.forward_gate.set()
        assert await in_flight == [1.0]

    asyncio.run(main())
    assert loader.unloaded == [("a", "1")]


def test_a_request_past_its_deadline_still_holds_its_model_until_its_batch_is_done(pools):
    loader = FakeLoader()
    pool = pools(loader, {"a": "1", "b": "1"}, max_resident=1)

    async def main():
        await serve(pool, "a")
        loader.forward_gate.clear()
        model, _ = await pool.acquire("a", time.monotonic() + FAR)
        with pytest.raises(PoolError):
            await pool.infer(model, model.handler.preprocess(["x"]), time.monotonic() + 0.1)
        pool.release(model)
        with pytest.raises(PoolError):  # "a" runs a batch still: it cannot be evicted for "b"
            await pool.acquire("b", time.monotonic() + FAR)
        loader.forward_gate.set()
        await asyncio.sleep(0.1)
        assert await serve(pool, "b") == [1.0]

    asyncio.run(main())


def test_threads_do_not_grow_with_loads_and_evictions(pools):
    loader = FakeLoader()
    names = {f"m{i}": "1" for i in range(50)}
    pool = pools(loader, names, max_resident=3)

    async def main():
        for name in names:
            await serve(pool, name)

    def threads() -> Counter[str]:
        return Counter("load" if t.name.startswith("pool-load") else "other" for t in threading.enumerate())

    for _ in range(2):
        asyncio.run(main())
    before = threads()
    asyncio.run(main())
    after = threads()
    # The load threads start on demand (a second only when two loads overlap, which the machine's load decides), up to
    # the pool's load_threads; every other thread is there before as after.
    assert after["load"] <= 2 and after["other"] <= before["other"]
    assert pool.resident == 3 and len(loader.unloaded) >= 140
    assert pool.metrics.take(pool.resident)[0]["PoolEvictions"] >= 140


def test_hits_count_as_device_and_misses_by_tier(pools):
    loader = FakeLoader()
    pool = pools(loader, {"a": "1"})

    async def main():
        tiers = []
        for _ in range(3):
            model, tier = await pool.acquire("a", time.monotonic() + FAR)
            pool.release(model)
            tiers.append(tier)
        return tiers

    assert asyncio.run(main()) == ["disk", DEVICE, DEVICE]


def test_a_refused_version_leaves_the_previous_one_serving_even_once_it_was_unloaded(pools):
    loader = FakeLoader()
    loader.fail[("a", "2")] = "does not answer the probe as published"
    clock = Clock()
    pool = pools(loader, {"a": "1", "b": "1"}, max_resident=1, clock=clock)

    async def main():
        await serve(pool, "a")
        await serve(pool, "b")  # "a" version 1 is unloaded (no host memory)
        pool.apply_registry(Registry("pool-a", {"a": "2", "b": "1"}, 1))
        with pytest.raises(PoolError):  # version 2's load fails
            await pool.acquire("a", clock.now + FAR)
        return await serve(pool, "a")

    assert asyncio.run(main()) == [1.0]  # version 1 loaded again, and serving
    assert loader.loads[("a", "1")] == 2 and loader.loads[("a", "2")] == 1


def test_after_its_backoff_a_refused_version_is_tried_again_in_the_background(pools):
    loader = FakeLoader()
    loader.fail[("a", "2")] = "a transient fetch error"
    clock = Clock()
    pool = pools(loader, {"a": "1"}, clock=clock, load_backoff_s=30.0)

    async def main():
        await serve(pool, "a")
        pool.apply_registry(Registry("pool-a", {"a": "2"}, 1))
        for _ in range(100):
            if ("a", "2") in pool._failed:
                break
            await asyncio.sleep(0.02)
        assert await serve(pool, "a") == [1.0]
        assert loader.loads[("a", "2")] == 1  # within the backoff: not tried again
        del loader.fail[("a", "2")]
        clock.now += 31
        assert await serve(pool, "a") == [1.0]  # served by version 1 while version 2 loads
        for _ in range(100):
            if pool.models["a"].version == "2":
                break
            await asyncio.sleep(0.02)
        return await serve(pool, "a")

    assert asyncio.run(main()) == [2.0]


def test_a_forward_that_raises_is_a_500_with_a_json_error_and_the_model_serves_on(pools):
    loader = FakeLoader()
    pool = pools(loader, {"a": "1"})

    async def main():
        await serve(pool, "a")
        model = pool.models["a"]
        forward = model.handler.forward
        model.handler.forward = lambda batch: (_ for _ in ()).throw(RuntimeError("boom"))  # type: ignore[method-assign]
        with pytest.raises(PoolError) as caught:
            await serve(pool, "a")
        model.handler.forward = forward  # type: ignore[method-assign]
        return caught.value, await serve(pool, "a")

    error, after = asyncio.run(main())
    assert error.status == 500 and error.code == "internal_error" and after == [1.0]


def test_a_shed_request_queues_no_load_behind_busy_load_threads(pools):
    loader = FakeLoader()
    loader.load_gate.clear()
    pool = pools(loader, {f"m{i}": "1" for i in range(6)}, load_estimate_s=1.0)  # two load threads (the default)

    async def main():
        waiting = [asyncio.ensure_future(pool.acquire(f"m{i}", time.monotonic() + FAR)) for i in range(2)]
        await asyncio.sleep(0.1)  # both load threads busy
        for i in range(2, 6):  # a short deadline: shed, and no load of their models queued
            with pytest.raises(PoolError) as caught:
                await pool.acquire(f"m{i}", time.monotonic() + 0.5)
            assert caught.value.status == 503
        assert len(pool._loads) == 2
        loader.load_gate.set()
        for model, _ in await asyncio.gather(*waiting):
            pool.release(model)

    asyncio.run(main())
    assert set(loader.loads) == {("m0", "1"), ("m1", "1")}


def test_one_waiters_timeout_does_not_cancel_the_load_the_others_wait_on(pools):
    loader = FakeLoader()
    loader.load_gate.clear()
    pool = pools(loader, {"a": "1", "b": "1"}, load_estimate_s=0.01, load_threads=1)

    async def main():
        blocker = asyncio.ensure_future(pool.acquire("b", time.monotonic() + FAR))  # the one load thread, held
        await asyncio.sleep(0.05)
        patient = asyncio.ensure_future(pool.acquire("a", time.monotonic() + FAR))  # a's load queued
        with pytest.raises(PoolError) as caught:  # admitted (a short load expected), then times out waiting
            await pool.acquire("a", time.monotonic() + 0.2)
        assert caught.value.status == 504
        loader.load_gate.set()
        for model, _ in (await blocker, await patient):
            pool.release(model)

    asyncio.run(main())
    assert loader.loads == {("a", "1"): 1, ("b", "1"): 1}
