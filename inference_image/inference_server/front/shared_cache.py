"""The shared result cache: a Valkey (ElastiCache) level behind the in-process LRU, shared by every task.

A request's inputs are looked up in one MGET before they are batched; what the model computed is stored in one
pipeline after (in the background: a store never delays a response). The cache is an optimisation, never a
dependency: every call has a short timeout, and errors open a circuit that skips the cache until a trial call
succeeds, so a slow or absent cache costs a request at most one timeout and then nothing.

Its keys and values are cache_values.py's.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import facts as m
from ..interval_stats import IntervalStats
from .cache_values import decode_value, encode_value

log = logging.getLogger(__name__)

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


@dataclass(frozen=True)
class SharedCacheConfig:
    host: str
    port: int = 6379
    tls: bool = True
    cluster: bool = False  # ElastiCache Serverless is cluster mode enabled: keys spread over slots
    auth_token: str | None = None
    iam_user: str | None = None  # IAM authentication: the ElastiCache user id ...
    cache_name: str | None = None  # ... and the cache's name, signed into the token
    region: str | None = None
    ttl_s: int = 3600
    max_value_bytes: int = 65536
    timeout_s: float = 0.05
    connect_timeout_s: float = 2.0  # in the background: requests skip the cache meanwhile
    failures_to_open: int = 3
    open_for_s: float = 2.0
    max_pending_stores: int = 4096  # values waiting to be stored; beyond it stores are dropped

    @classmethod
    def parse_endpoint(cls, endpoint: str) -> tuple[str, int]:
        host, _, port = endpoint.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"must be host:port, got {endpoint!r}")
        return host, int(port)


class CircuitBreaker:
    """Closed: calls go through. After `failures_to_open` failures in a row it opens: calls are skipped for
    `open_for_s`, then one trial call goes through (half open); its success closes the circuit, its failure
    opens it again."""

    def __init__(
        self,
        failures_to_open: int,
        open_for_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[str], None] = lambda state: None,
    ) -> None:
        self.failures_to_open, self.open_for_s = failures_to_open, open_for_s
        self._clock, self._on_change = clock, on_change
        self.state = CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._trial = False

    def allow(self) -> bool:
        if self.state == CLOSED:
            return True
        if self.state == OPEN and self._clock() - self._opened_at >= self.open_for_s:
            self._set(HALF_OPEN)
        if self.state == HALF_OPEN and not self._trial:
            self._trial = True
            return True
        return False

    def succeeded(self) -> None:
        self._failures, self._trial = 0, False
        if self.state != CLOSED:
            self._set(CLOSED)

    def failed(self) -> None:
        self._failures += 1
        self._trial = False
        if self.state == HALF_OPEN or self._failures >= self.failures_to_open:
            self._opened_at = self._clock()
            if self.state != OPEN:
                self._set(OPEN)

    def _set(self, state: str) -> None:
        self.state = state
        self._on_change(state)


# -- authentication ------------------------------------------------------------------------------------------------


def iam_auth_token(
    user_id: str, cache_name: str, region: str, *, serverless: bool = True, credentials: Any = None
) -> str:
    """An ElastiCache IAM authentication token: a SigV4-presigned `connect` request for the user (valid 15 min;
    ElastiCache ends IAM-authenticated connections after 12 h, and a reconnect signs a new one)."""
    import botocore.session
    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest

    creds = credentials or botocore.session.get_session().get_credentials()
    if creds is None:
        raise RuntimeError("no AWS credentials for the cache's IAM authentication")
    params = {"Action": "connect", "User": user_id}
    if serverless:
        params["ResourceType"] = "ServerlessCache"
    request = AWSRequest(method="GET", url=f"http://{cache_name}/", params=params)
    SigV4QueryAuth(creds, "elasticache", region, expires=900).add_auth(request)
    assert request.url is not None  # built from the url above
    return request.url.removeprefix("http://")


class _IamCredentials:
    """valkey's credential provider protocol: called on every new connection, so each gets a fresh token."""

    def __init__(self, config: SharedCacheConfig) -> None:
        self._config = config

    def get_credentials(self) -> tuple[str, str]:
        c = self._config
        # connect() uses this provider only with an IAM user, and the settings require the cache's name with one.
        assert c.iam_user is not None and c.cache_name is not None
        return c.iam_user, iam_auth_token(c.iam_user, c.cache_name, c.region or "", serverless=c.cluster)


def connect(config: SharedCacheConfig) -> Any:
    """The asyncio client: a cluster client (slot-aware MGET and pipelines) or a single endpoint's."""
    from valkey.asyncio import Valkey, ValkeyCluster

    auth: dict[str, Any] = {}
    if config.iam_user:
        auth["credential_provider"] = _IamCredentials(config)
    elif config.auth_token:
        auth["password"] = config.auth_token
    common: dict[str, Any] = dict(
        host=config.host,
        port=config.port,
        ssl=config.tls,
        socket_timeout=config.connect_timeout_s,
        socket_connect_timeout=config.connect_timeout_s,
        **auth,
    )
    if config.cluster:
        return ValkeyCluster(**common)
    return Valkey(**common, retry_on_timeout=False)


# -- the cache -----------------------------------------------------------------------------------------------------


class SharedCacheMetrics:
    """Per-interval counts and the latency distribution for the EMF document, plus Prometheus series."""

    COUNTS = (
        m.SHARED_CACHE_HITS,
        m.SHARED_CACHE_MISSES,
        m.SHARED_CACHE_ERRORS,
        m.SHARED_CACHE_SKIPPED,
        m.SHARED_CACHE_OVERSIZED,
        m.SHARED_CACHE_STORED,
    )

    def __init__(self, registry: Any = None) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = dict.fromkeys(self.COUNTS, 0)
        self.latency_ms = IntervalStats(exact=False)
        self.state = CLOSED
        self._prometheus = None
        if registry is not None:
            from prometheus_client import Counter, Enum

            self._prometheus = Counter(
                "shared_cache_events", "Shared result cache events", ["event"], registry=registry
            )
            self._state = Enum(
                "shared_cache_circuit",
                "The shared cache's circuit",
                states=[CLOSED, OPEN, HALF_OPEN],
                registry=registry,
            )

    def count(self, name: str, n: int = 1) -> None:
        if not n:
            return
        with self._lock:
            self._counts[name] += n
        if self._prometheus is not None:
            self._prometheus.labels(name.removeprefix("SharedCache").lower()).inc(n)

    def set_state(self, state: str) -> None:
        self.state = state
        if self._prometheus is not None:
            self._state.state(state)

    def take_interval(self) -> dict[str, Any]:
        with self._lock:
            values: dict[str, Any] = dict(self._counts)
            self._counts = dict.fromkeys(self.COUNTS, 0)
        values[m.SHARED_CACHE_OPEN] = int(self.state != CLOSED)  # 1 while the circuit skips the cache
        latency = self.latency_ms.take()
        if latency is not None:
            values[m.SHARED_CACHE_LATENCY] = latency
        return values


class SharedCache:
    def __init__(
        self,
        config: SharedCacheConfig,
        *,
        metrics: SharedCacheMetrics | None = None,
        client_factory: Callable[[SharedCacheConfig], Any] = connect,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.metrics = metrics or SharedCacheMetrics()
        self._client_factory = client_factory
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connected = False
        self._connecting: asyncio.Task | None = None
        self._clock = clock
        self.circuit = CircuitBreaker(config.failures_to_open, config.open_for_s, clock, self._state_changed)
        self._pending: set[asyncio.Task] = set()
        self._lookups: list[tuple[list[str], asyncio.Future]] = []
        self._lookup_flush: asyncio.Task | None = None
        self._stores: list[tuple[str, bytes]] = []
        self._store_flush: asyncio.Task | None = None

    def _state_changed(self, state: str) -> None:
        self.metrics.set_state(state)
        log.warning("shared cache circuit %s", state, extra={"circuit": state})

    def _connection(self) -> Any | None:
        """The client once it has connected (a cluster client has also read the slot map), else None while a
        connection is made in the background: connecting takes longer than a call may, and no request waits."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a client belongs to the loop it was made on
            self._client, self._connected, self._connecting, self._loop = None, False, None, loop
        if self._connected:
            return self._client
        if self._connecting is None and self.circuit.allow():
            self._connecting = loop.create_task(self._connect())
        return None

    async def _connect(self) -> None:
        client = self._client_factory(self.config)
        try:
            ready = client.initialize() if self.config.cluster else client.ping()
            await asyncio.wait_for(ready, self.config.connect_timeout_s)
        except Exception as exc:
            self.circuit.failed()
            self.metrics.count(m.SHARED_CACHE_ERRORS)
            log.debug("shared cache connection failed", extra={"error": repr(exc)})
            await self._close_client(client)
        else:
            self.circuit.succeeded()
            self._client, self._connected = client, True
        finally:
            self._connecting = None

    async def _call(self, operation: Callable[[Any], Any]) -> tuple[bool, Any]:
        """(True, result), or (False, None) when not connected yet, the circuit is open, or the call failed or
        timed out."""
        client = self._connection()
        if client is None or not self.circuit.allow():
            return False, None
        started = self._clock()
        try:
            result = await asyncio.wait_for(operation(client), self.config.timeout_s)
        except asyncio.CancelledError:
            self.circuit.failed()  # a half-open trial that never finishes must not hold the circuit forever
            raise
        except Exception as exc:
            self.circuit.failed()
            self.metrics.count(m.SHARED_CACHE_ERRORS)
            log.debug("shared cache call failed", extra={"error": repr(exc)})
            if self.circuit.state != CLOSED:
                await self._reset_connection()
            return False, None
        self.circuit.succeeded()
        self.metrics.latency_ms.observe((self._clock() - started) * 1000)
        return True, result

    async def _reset_connection(self) -> None:
        client, self._client, self._connected = self._client, None, False
        await self._close_client(client)

    async def _close_client(self, client: Any) -> None:
        if client is not None:
            try:
                await asyncio.wait_for(client.aclose(), self.config.connect_timeout_s)
            except Exception:
                pass

    async def get_many(self, keys: Sequence[str]) -> list[Any | None]:
        """The cached predictions of ``keys`` (None for a miss). The lookups of every request that asks within
        one turn of the event loop go out together: one MGET (one per node in cluster mode) for all of them."""
        if not keys:
            return []
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._lookups.append((list(keys), waiter))
        if self._lookup_flush is None:
            self._lookup_flush = loop.create_task(self._flush_lookups())
        return await waiter

    async def _flush_lookups(self) -> None:
        await asyncio.sleep(0)  # the other requests of this turn add theirs
        batch, self._lookups, self._lookup_flush = self._lookups, [], None
        keys = [key for wanted, _ in batch for key in wanted]
        try:
            values = await self._lookup(keys)
        except BaseException:
            values = [None] * len(keys)
        start = 0
        for wanted, waiter in batch:
            if not waiter.done():
                waiter.set_result(values[start : start + len(wanted)])
            start += len(wanted)

    async def _lookup(self, keys: list[str]) -> list[Any | None]:
        cluster = self.config.cluster
        ok, raw = await self._call(lambda c: c.mget_nonatomic(keys) if cluster else c.mget(keys))
        if not ok:
            self.metrics.count(m.SHARED_CACHE_SKIPPED, len(keys))
            return [None] * len(keys)
        values: list[Any | None] = []
        for item in raw:
            try:
                values.append(None if item is None else decode_value(item))
            except Exception:  # a value this version cannot read: a miss
                values.append(None)
        hits = sum(v is not None for v in values)
        self.metrics.count(m.SHARED_CACHE_HITS, hits)
        self.metrics.count(m.SHARED_CACHE_MISSES, len(keys) - hits)
        return values

    def store_many(self, entries: Sequence[tuple[str, Any]]) -> asyncio.Task | None:
        """Store predictions in the background; the stores of one turn of the event loop go out as one pipeline.
        Oversized or unencodable values are skipped, and so is everything while max_pending_stores values wait."""
        for key, prediction in entries:
            try:
                value = encode_value(prediction)
            except TypeError:
                continue
            if len(value) > self.config.max_value_bytes:
                self.metrics.count(m.SHARED_CACHE_OVERSIZED)
                continue
            if len(self._stores) < self.config.max_pending_stores:
                self._stores.append((key, value))
        if not self._stores or self._store_flush is not None:
            return self._store_flush
        task = asyncio.get_running_loop().create_task(self._flush_stores())
        self._store_flush = task
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def _flush_stores(self) -> None:
        await asyncio.sleep(0)
        batch, self._stores, self._store_flush = self._stores, [], None
        await self._store(batch)

    async def _store(self, encoded: list[tuple[str, bytes]]) -> None:
        ttl_ms = self.config.ttl_s * 1000

        async def pipeline(client: Any) -> Any:
            pipe = client.pipeline(transaction=False)
            for key, value in encoded:
                pipe.set(key, value, px=ttl_ms)
            return await pipe.execute()

        ok, _ = await self._call(pipeline)
        if ok:
            self.metrics.count(m.SHARED_CACHE_STORED, len(encoded))

    async def flush(self) -> None:
        """Wait for the background stores (tests, shutdown)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def connected(self, timeout_s: float = 5.0) -> bool:
        """Wait until the client has connected (tests, warm-up); False if it did not within timeout_s."""
        deadline = self._clock() + timeout_s
        while self._connection() is None:
            if self._clock() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def close(self) -> None:
        await self.flush()
        await self._reset_connection()


def config_from_settings(settings: Any, environ: Mapping[str, str] | None = None) -> SharedCacheConfig | None:
    """The shared cache's configuration from the server's settings; None when SHARED_CACHE_ENDPOINT is unset.
    Raises SettingsError naming the variable."""
    import os

    from ..settings import SettingsError

    s = settings
    if not s.shared_cache_endpoint:
        return None
    environ = os.environ if environ is None else environ
    try:
        host, port = SharedCacheConfig.parse_endpoint(s.shared_cache_endpoint)
    except ValueError as exc:
        raise SettingsError("SHARED_CACHE_ENDPOINT", str(exc)) from None
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if s.shared_cache_iam_user:
        if not s.shared_cache_name:
            raise SettingsError("SHARED_CACHE_NAME", "is required with SHARED_CACHE_IAM_USER (IAM tokens sign it)")
        if not region:
            raise SettingsError("AWS_REGION", "is required with SHARED_CACHE_IAM_USER (IAM tokens sign it)")
        if s.shared_cache_auth_token:
            raise SettingsError("SHARED_CACHE_AUTH_TOKEN", "set it or SHARED_CACHE_IAM_USER, not both")
    return SharedCacheConfig(
        host=host,
        port=port,
        tls=s.shared_cache_tls,
        cluster=s.shared_cache_cluster,
        auth_token=s.shared_cache_auth_token,
        iam_user=s.shared_cache_iam_user,
        cache_name=s.shared_cache_name,
        region=region,
        ttl_s=s.shared_cache_ttl_s,
        max_value_bytes=s.shared_cache_max_value_bytes,
        timeout_s=s.shared_cache_timeout_ms / 1000,
    )
