"""The pool: which models are loaded, and where (the device, host memory), within their budgets.

- A request names a model; a name that is not a plain model name is refused (400) before anything else, and one the
  registry does not name is unknown (404): nothing outside the registry is ever fetched.
- The first request for a model loads it; concurrent first requests wait on that one load (single flight).
- Loaded models stay on the device within POOL_GPU_MEMORY_MIB (each model's weights plus its batch plan) and
  POOL_MAX_RESIDENT_MODELS. To make room, the least recently used model with no request in flight moves to host
  memory (POOL_HOST_MEMORY_MIB; reloading it is a copy), or is unloaded when host memory is full too; below that the
  local disk cache (store.py), then S3.
- A load that fails marks that version failed: requests get 503 with the error and a Retry-After until its backoff
  ends (POOL_LOAD_BACKOFF_S, doubling per failure), not a load per request.
- Deadline admission counts the load a request would wait for: a request that cannot finish by its deadline behind
  the load and the queue is refused at once (503), while the load goes on for the requests after it.
- The registry is read every POOL_REGISTRY_POLL_SECONDS. A model moved to another version keeps serving the version
  it has until the new one has loaded and passed its published-probe check, then switches; a version that fails is
  refused and the previous keeps serving. A removed model answers 404 at once. Requests in flight finish on the
  weights they started on: a replaced or removed model is unloaded once its last request is done.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..inputs import InputError
from ..link_messages import DeadlineExceeded, ModelUnavailable, QueueFull
from .loaded import DEVICE, HOST, LoadedModel, Loader, LoadError
from .metrics import PoolMetrics
from .registry import Registry, RegistryError, check_model_name
from .scheduler import Scheduler

log = logging.getLogger(__name__)

GC_EVERY_UNLOADS = 20  # a full collection after this many unloads frees what reference cycles held (HF modules)


class PoolError(Exception):
    """What a request gets instead of a model: an HTTP status, an error code and a message."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after_s = status, code, message, retry_after_s


@dataclass
class Failure:
    error: str
    until: float
    count: int


@dataclass(frozen=True)
class Budgets:
    device_bytes: int | None  # None: no byte budget on the device
    host_bytes: int
    max_resident: int  # 0: no count limit
    load_backoff_s: float = 30.0
    max_load_backoff_s: float = 600.0
    load_estimate_s: float = 2.0


class ModelPool:
    def __init__(
        self,
        pool: str,
        loader: Loader,
        budgets: Budgets,
        *,
        max_batch_size: int = 32,
        max_queue_size: int = 256,
        load_threads: int = 2,
        metrics: PoolMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool = check_model_name(pool)
        self.loader, self.budgets = loader, budgets
        self.registry: Registry | None = None  # None until first read: not ready
        self.metrics = metrics or PoolMetrics()
        self.scheduler = Scheduler(max_batch_size=max_batch_size, max_queue_size=max_queue_size)
        self._clock = clock
        self._lock = threading.RLock()
        self.models: dict[str, LoadedModel] = {}  # the version each model serves, on the device or in host memory
        self._loads: dict[tuple[str, str], Future] = {}  # single flight: (model, version) -> its load
        self._load_started: dict[tuple[str, str], float] = {}
        self._failed: dict[tuple[str, str], Failure] = {}
        self._load_times: list[float] = []  # recent loads' seconds (deadline admission's estimate)
        self._unloads = 0
        self._last_good: dict[str, str] = {}  # the version of each model that last loaded and passed its checks
        self._costs: dict[str, int] = {}  # each model's device bytes when last loaded (bounded by the registry)
        self.load_threads = load_threads
        self._executor = ThreadPoolExecutor(load_threads, thread_name_prefix="pool-load")

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.scheduler.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """The inference thread (its batch finishes, within timeout_s), the loads not started yet, then every model.
        A load in progress is not waited for: a process that exits with one running leaves it (see loading())."""
        self.scheduler.stop(timeout_s)
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            models, self.models = list(self.models.values()), {}
        for model in models:
            self.loader.unload(model)

    def loading(self) -> int:
        """Loads running now (on a load thread, not finished)."""
        with self._lock:
            return sum(1 for future in self._loads.values() if future.running())

    @property
    def ready(self) -> bool:
        return self.registry is not None

    # -- the registry ------------------------------------------------------------------------------------------

    def apply_registry(self, registry: Registry) -> None:
        """A new registry: removed models leave at once (unloaded when idle); a moved model loads its new version in
        the background and switches when it has passed its checks."""
        if registry.pool != self.pool:
            raise RegistryError(f"the registry names pool {registry.pool!r}, not {self.pool!r}")
        with self._lock:
            self.registry = registry
            for name, model in list(self.models.items()):
                version = registry.version_of(name)
                if version is None:
                    del self.models[name]
                    self._retire(model)
                elif version != model.version and (name, version) not in self._failed:
                    self._load(name, version)
        log.info(
            "pool registry applied",
            extra={"pool": self.pool, "revision": registry.revision, "models": len(registry.models)},
        )

    # -- requests ----------------------------------------------------------------------------------------------

    def version_for(self, name: str) -> str:
        """The registered version of ``name``; PoolError 400 for a name that is not plain, 404 for one not registered
        (neither reaches storage)."""
        try:
            check_model_name(name)
        except RegistryError as exc:
            raise PoolError(400, "invalid_model_name", str(exc)) from None
        registry = self.registry
        if registry is None:
            raise PoolError(503, "not_ready", f"pool {self.pool} has not read its registry yet", 1.0)
        version = registry.version_of(name)
        if version is None:
            raise PoolError(404, "model_not_found", f"model {name!r} is not in pool {self.pool!r}")
        return version

    async def acquire(self, name: str, deadline: float, inputs: int = 1) -> tuple[LoadedModel, str]:
        """The model to serve ``name`` with, held (in_flight) until release(); and where it was found (DEVICE for a
        hit, else the tier it was loaded from). Raises PoolError."""
        version = self.version_for(name)
        remaining = deadline - self._clock()
        with self._lock:
            model = self.models.get(name)
            if model is not None and model.on_device and (model.version == version or self._keeps_serving(name)):
                if model.version != version and (name, version) not in self._loads and not self._failure(name, version):
                    self._load(name, version)  # its backoff is over: the registered version again, in the background
                return self._hold(model), DEVICE
            failure = self._failure(name, version)
            if failure is not None:
                previous = self._last_good.get(name)
                if previous is not None and previous != version and self._failure(name, previous) is None:
                    version = previous  # the registered version is refused: the one that served before serves on
                elif model is None or model.version == version:
                    self.metrics.record_refused()
                    raise PoolError(
                        503,
                        "model_failed",
                        f"model {name} version {version} failed to load: {failure.error}",
                        max(1.0, failure.until - self._clock()),
                    )
            if model is not None and not model.on_device and (model.version == version or self._keeps_serving(name)):
                version = model.version  # in host memory: a copy back to the device
            queued = (name, version) not in self._loads
            # A load not started yet waits for the loads ahead of it too.
            ahead = len(self._loads) // self.load_threads if queued else 0
            expected = self._expected_load_s(name, version) * (1 + ahead) + self.scheduler.expected_wait_s(None, inputs)
            shed = expected > remaining
            # A shed request still starts its model's load for the requests after it, unless the loads already
            # queued keep every load thread busy: a load nobody waits for would only delay the ones somebody does.
            future = None if shed and queued and len(self._loads) >= self.load_threads else self._load(name, version)
        if shed or future is None:
            self.metrics.record_shed()
            raise PoolError(
                503,
                "overloaded",
                f"model {name} is loading and would not answer within the deadline",
                max(1.0, expected),
            )
        try:
            # shield: one waiter's timeout must not cancel the load every other waiter shares (single flight)
            loaded, tier = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), remaining)
        except TimeoutError:
            raise PoolError(504, "timeout", f"model {name} did not load within the deadline") from None
        except LoadError as exc:
            raise PoolError(503, "model_failed", str(exc), self.budgets.load_backoff_s) from None
        except PoolError:
            raise
        with self._lock:
            if loaded.retired or not loaded.on_device:  # replaced or evicted between its load and this request
                current = self.models.get(name)
                if current is None or not current.on_device:
                    raise PoolError(503, "overloaded", f"model {name} was evicted before it served; retry", 1.0)
                loaded = current
            return self._hold(loaded), tier

    def _registered_is_refused(self, name: str) -> bool:
        version = self.registry.version_of(name) if self.registry else None
        return version is not None and (name, version) in self._failed

    def _keeps_serving(self, name: str) -> bool:
        """The model's registered version is loading or was refused: the version it has keeps serving."""
        version = self.registry.version_of(name) if self.registry else None
        return version is not None and ((name, version) in self._loads or (name, version) in self._failed)

    def _hold(self, model: LoadedModel) -> LoadedModel:
        model.in_flight += 1
        model.last_used = self._clock()
        return model

    def release(self, model: LoadedModel) -> None:
        """Any thread: a request is done with ``model``; a retired model is unloaded once its last request is."""
        with self._lock:
            model.in_flight -= 1
            unload = model.retired and model.in_flight == 0
        if unload:
            self._unload(model)

    def shed_reason(self, model: LoadedModel, inputs: int, remaining_s: float) -> str | None:
        queued = self.scheduler.queued(model)
        if queued + inputs > self.scheduler.max_queue_size:
            return "queue full"
        if self.scheduler.expected_wait_s(model, inputs) > remaining_s:
            return "the queue ahead would miss the deadline"
        return None

    async def infer(self, model: LoadedModel, items: list[Any], deadline: float, traced: bool = False) -> Any:
        """Run preprocessed inputs on ``model`` (held by the caller); the job's outputs (traced: with the batches it
        ran in)."""
        try:
            future = self.scheduler.submit(model, items, deadline, traced)
        except QueueFull as exc:
            self.metrics.record_shed()
            raise PoolError(503, "overloaded", str(exc), 1.0) from None
        with self._lock:
            model.in_flight += 1  # the job holds the model until it has run, even past its caller's deadline
        future.add_done_callback(lambda _: self.release(model))
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(future), deadline - self._clock())
        except (TimeoutError, DeadlineExceeded):
            raise PoolError(504, "timeout", "no result within the deadline") from None
        except ModelUnavailable as exc:
            raise PoolError(503, "unavailable", str(exc), 1.0) from None
        except InputError as exc:
            raise PoolError(422, "invalid_input", str(exc)) from None
        except Exception as exc:
            log.error(
                "inference failed",
                extra={"pool": self.pool, "model": model.name, "model_version": model.version, "error": repr(exc)},
            )
            raise PoolError(500, "internal_error", "inference failed") from None
        return result

    # -- loading -----------------------------------------------------------------------------------------------

    def _failure(self, name: str, version: str) -> Failure | None:
        failure = self._failed.get((name, version))
        if failure is not None and self._clock() >= failure.until:
            return None  # the backoff is over: the next request loads it again
        return failure

    def _expected_load_s(self, name: str, version: str) -> float:
        model = self.models.get(name)
        if model is not None and model.version == version and not model.on_device:
            return 0.0  # host memory
        times = sorted(self._load_times[-50:])
        estimate = times[len(times) // 2] if times else self.budgets.load_estimate_s
        started = self._load_started.get((name, version))
        return max(0.0, estimate - (self._clock() - started)) if started is not None else estimate

    def _load(self, name: str, version: str) -> Future:
        """Under the lock: the load of (name, version), started once."""
        key = (name, version)
        future = self._loads.get(key)
        if future is None or future.cancelled():
            self._load_started[key] = self._clock()
            future = self._loads[key] = self._executor.submit(self._do_load, name, version)
        return future

    def _do_load(self, name: str, version: str) -> tuple[LoadedModel, str]:
        key = (name, version)
        try:
            with self._lock:
                model = self.models.get(name)
                if model is not None and model.version == version and not model.on_device:
                    self._make_room(model.cost_bytes, keep=model)
                    if self.loader.to_device(model):
                        model.on_device = True
                        self.metrics.record_load(HOST, 0.0)
                        return model, HOST
                    del self.models[name]
                    self._retire(model)
                if not self._make_room(self._expected_cost(name), keep=None):  # before loading what cannot fit
                    raise self._no_room()
            started = self._clock()
            try:
                loaded, tier = self.loader.load(name, version)
            except LoadError as exc:
                self._mark_failed(key, str(exc))
                raise
            except Exception as exc:
                self._mark_failed(key, f"{type(exc).__name__}: {exc}")
                raise LoadError(f"model {name} version {version} failed to load: {exc}") from exc
            seconds = self._clock() - started
            self._load_times = [*self._load_times[-99:], seconds]
            self.metrics.record_load(tier, seconds)
            with self._lock:
                self._costs[name] = loaded.cost_bytes
                if not self._make_room(loaded.cost_bytes, keep=None):
                    self._unload(loaded)
                    raise self._no_room()
                self._failed.pop(key, None)
                registered = self.registry.version_of(name) if self.registry else None
                if registered != version and not (registered is not None and self._registered_is_refused(name)):
                    loaded.retired = True  # the registry moved on while it loaded: it serves its waiters, then goes
                    return loaded, tier
                self._last_good[name] = version
                old = self.models.get(name)
                self.models[name] = loaded
                if old is not None:
                    self._retire(old)
            log.info(
                "pool model loaded",
                extra={
                    "pool": self.pool,
                    "model": name,
                    "model_version": version,
                    "tier": tier,
                    "seconds": round(seconds, 3),
                    "cost_mib": round(loaded.cost_bytes / 2**20, 1),
                },
            )
            return loaded, tier
        finally:
            with self._lock:
                self._loads.pop(key, None)
                self._load_started.pop(key, None)

    def _no_room(self) -> PoolError:
        return PoolError(
            503, "overloaded", f"pool {self.pool}'s device memory is held by models with requests in flight; retry", 1.0
        )

    def _expected_cost(self, name: str) -> int:
        """Device bytes a model will need: its own from an earlier load, else the median of the models loaded."""
        if name in self._costs:
            return self._costs[name]
        costs = sorted(self._costs.values())
        return costs[len(costs) // 2] if costs else 0

    def _mark_failed(self, key: tuple[str, str], error: str) -> None:
        with self._lock:
            previous = self._failed.get(key)
            count = previous.count + 1 if previous else 1
            backoff = min(self.budgets.max_load_backoff_s, self.budgets.load_backoff_s * 2 ** (count - 1))
            self._failed[key] = Failure(error, self._clock() + backoff, count)
        self.metrics.record_failed_load()
        serving = self.models.get(key[0])
        log.error(
            "pool model refused",
            extra={
                "pool": self.pool,
                "model": key[0],
                "model_version": key[1],
                "error": error,
                "retry_after_s": backoff,
                "serving_version": serving.version if serving else None,
            },
        )

    # -- budgets -----------------------------------------------------------------------------------------------

    def device_bytes(self) -> int:
        return sum(m.cost_bytes for m in self.models.values() if m.on_device)

    def host_bytes(self) -> int:
        return sum(m.host_bytes for m in self.models.values() if not m.on_device)

    @property
    def resident(self) -> int:
        return sum(1 for m in self.models.values() if m.on_device)

    def _make_room(self, need: int, keep: LoadedModel | None) -> bool:
        """Under the lock: evict the least recently used idle models until ``need`` more bytes (and one more model)
        fit on the device. False when the models left all have requests in flight."""
        budget, limit = self.budgets.device_bytes, self.budgets.max_resident

        def over() -> bool:
            count = self.resident + 1
            return (budget is not None and self.device_bytes() + need > budget) or (0 < limit < count)

        while over():
            idle = [m for m in self.models.values() if m.on_device and m.in_flight == 0 and m is not keep]
            if not idle:
                return False
            self._evict(min(idle, key=lambda m: m.last_used))
        return True

    def _evict(self, model: LoadedModel) -> None:
        """Under the lock: off the device, to host memory where it fits (dropping the least recently used there),
        else unloaded."""
        self.metrics.record_eviction()
        room = self.budgets.host_bytes
        if model.host_bytes <= room and self.loader.to_host(model):
            model.on_device = False
            hosted = sorted(
                (m for m in self.models.values() if not m.on_device and m.in_flight == 0), key=lambda m: m.last_used
            )
            while self.host_bytes() > room and hosted:
                dropped = hosted.pop(0)
                del self.models[dropped.name]
                self._unload(dropped)
            if model.name in self.models:
                return
        else:
            del self.models[model.name]
            self._unload(model)

    def _retire(self, model: LoadedModel) -> None:
        """Replaced or removed: unloaded now if idle, else by the release of its last request."""
        model.retired = True
        if model.in_flight == 0:
            self._unload(model)

    def _unload(self, model: LoadedModel) -> None:
        model.retired, model.on_device = True, False
        self.loader.unload(model)
        self._unloads += 1
        if self._unloads % GC_EVERY_UNLOADS == 0:
            gc.collect()

    # -- figures -----------------------------------------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        with self._lock:
            return {
                "resident_models": self.resident,
                "host_models": len(self.models) - self.resident,
                "device_mib": round(self.device_bytes() / 2**20, 1),
                "host_mib": round(self.host_bytes() / 2**20, 1),
                "loading": len(self._loads),
                "failed": len(self._failed),
            }
