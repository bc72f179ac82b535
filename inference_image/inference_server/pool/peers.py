"""Who a pool task's peers are: the addresses (``host:port``) of the pool service's tasks, this task's among them
when it is registered. Two sources: a static list (POOL_PEERS: tests, a fixed fleet) and DNS service discovery
(POOL_PEER_DNS_NAME: ECS registers each running task of the service in Cloud Map, one A record per task's awsvpc
address). This task is the address that is on one of its own interfaces with its own port."""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

log = logging.getLogger(__name__)

# Route 53 answers a multivalue query with at most eight healthy records, a random eight when there are more
# (Cloud Map DnsConfig RoutingPolicy MULTIVALUE): beyond eight tasks, one answer does not name them all.
DNS_ANSWER_LIMIT = 8


def is_local(host: str) -> bool:
    """Whether ``host`` (an IP address) is one of this machine's (this task's network namespace's) own: binding to
    an address no interface holds fails with EADDRNOTAVAIL."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((host, 0))
    except OSError as exc:
        if exc.errno not in (errno.EADDRNOTAVAIL, errno.EINVAL):
            log.warning("pool peer address not checked", extra={"peer": host, "error": str(exc)})
        return False
    return True


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not host:port")
    return host, int(port)


class Peers(Protocol):
    """The pool service's tasks as this task sees them now."""

    def addresses(self) -> tuple[str, ...]:
        """Every known task's ``host:port`` (this task's included once it is registered), sorted."""
        ...

    @property
    def self_address(self) -> str | None:
        """This task's address among addresses(), or None while it is not among them."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class StaticPeers:
    """A fixed list of ``host:port`` addresses; this task is the one with its port on one of its interfaces."""

    def __init__(self, addresses: Iterable[str], port: int, local: Callable[[str], bool] = is_local) -> None:
        self._addresses = tuple(sorted(set(addresses)))
        for address in self._addresses:
            split_address(address)
        mine = [a for a in self._addresses if split_address(a)[1] == port and local(split_address(a)[0])]
        self._self = mine[0] if mine else None

    def addresses(self) -> tuple[str, ...]:
        return self._addresses

    @property
    def self_address(self) -> str | None:
        return self._self

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _resolve_a(name: str) -> list[str]:
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)})


class DnsPeers:
    """The A records of ``name``, looked up every ``refresh_s`` on a thread of its own, each with ``port``. An address
    stays known for ``keep_s`` after the last answer that named it: an answer holds at most DNS_ANSWER_LIMIT records
    (a random eight when the service has more tasks), so the union of recent answers names them all; a task that
    stopped leaves within ``keep_s`` (until then a request forwarded to it fails over, PeerRouter). A lookup that
    fails keeps what is known."""

    def __init__(
        self,
        name: str,
        port: int,
        *,
        refresh_s: float = 5.0,
        keep_s: float = 30.0,
        resolve: Callable[[str], list[str]] = _resolve_a,
        local: Callable[[str], bool] = is_local,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name, self.port, self.refresh_s, self.keep_s = name, port, refresh_s, keep_s
        self._resolve, self._local, self._clock = resolve, local, clock
        self._seen: dict[str, float] = {}  # host -> when an answer last named it
        self._lock = threading.Lock()
        self._known: tuple[str, ...] = ()
        self._self: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lookups_failed = 0
        self._noted_full_answer = False

    def refresh(self) -> bool:
        """One lookup; False when it failed (what is known stays, but for addresses past ``keep_s``)."""
        now = self._clock()
        try:
            hosts = self._resolve(self.name)
        except OSError as exc:
            self.lookups_failed += 1
            log.warning("pool peers not looked up", extra={"peer_dns_name": self.name, "error": str(exc)})
            hosts = None
        with self._lock:
            for host in hosts or ():
                self._seen[host] = now
            if hosts:  # an empty or failed answer ages nothing out: a DNS outage must not split the pool
                self._seen = {h: t for h, t in self._seen.items() if now - t <= self.keep_s}
            self._known = tuple(sorted(f"{h}:{self.port}" for h in self._seen))
            mine = [f"{h}:{self.port}" for h in self._seen if self._local(h)]
            self._self = mine[0] if mine else None
        if hosts is not None and len(hosts) >= DNS_ANSWER_LIMIT and not self._noted_full_answer:
            self._noted_full_answer = True
            log.info(
                "pool peers: a full DNS answer; the known tasks are the union of recent answers",
                extra={"peer_dns_name": self.name, "known": len(self._known)},
            )
        return hosts is not None

    def addresses(self) -> tuple[str, ...]:
        return self._known

    @property
    def self_address(self) -> str | None:
        return self._self

    def start(self) -> None:
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="pool-peers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            self.refresh()
