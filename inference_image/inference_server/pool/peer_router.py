"""Model affinity between a pool's tasks, in the pool's own front (the ALB cannot route on a model name): each model
is owned by one live task, the one rendezvous hashing ranks first for it (affinity.py); a request that enters any
other task is forwarded to the owner once, so each task keeps resident the models it owns and the pool as a whole
holds N tasks' worth of distinct models instead of N copies of one working set.

- One hop: a forwarded request carries FORWARDED_HEADER and is always served where it lands (no loop, even while
  two tasks disagree on who is live).
- The deadline travels: X-Request-Timeout-Ms is set to what is left of the request's own, so the owner sheds or
  times out by the same deadline; its answer (any status, 4xx included) is the client's.
- Failure: a peer that refuses or cannot be reached within ``connect_timeout_s`` or breaks the connection is left
  out for ``down_s`` (its models fall to the next-ranked live task, this one included) and this request is served
  here. A draining peer (its 503 carries gate.DRAINING_HEADER: it refused the request unread) is left out the same
  way until its tasks' list drops it, and the request is served here. A peer that took the request but did not
  answer by the deadline is left out too; the request's time is spent, so it is a 504.
- Hot models: one owner per model would put all of a hot model's traffic on one task (Zipf(1.1) over 1,000 models
  gives the top model 18 % of all requests: at 4 tasks the busiest task serves 1.30 times a task's even share). Each
  task counts the models of the requests entering it; a model whose share would put more than ``hot_share`` of a
  task's even share on one owner gets as many owners as bring it under (its next-ranked tasks), and the requests
  that enter elsewhere take them in turn. The extra owners hold a model every task sees often, so the hit rate does
  not move (bench/pool_routing.py measures both).
- The hop carries the client's body (already checked against the route's size limit), content type, credentials
  and trace header; one pool of keep-alive connections serves every peer."""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx2

from .affinity import DEFAULT_HOT_SHARE, candidates
from .gate import DRAINING_HEADER
from .peers import Peers
from .resident import PoolError

log = logging.getLogger(__name__)

FORWARDED_HEADER = "x-pool-forwarded"  # on a hop: the sending task's address
TIMEOUT_HEADER = "x-request-timeout-ms"  # what is left of the request's deadline, milliseconds
CARRIED_HEADERS = ("content-type", "x-api-key", "authorization", "x-amzn-trace-id")
ANSWER_HEADERS = ("content-type", "retry-after")
ANSWER_GRACE_S = 1.0  # past the deadline the owner enforces itself: the network's share
KEEP_ALIVE_CONNECTIONS = 64  # idle connections kept open to the peers, all together
HOT_WINDOW = 2000  # requests entering this task between two estimates of the models' shares (then halved: a decay)


class Forwarded:
    """The owner's answer to a forwarded request."""

    __slots__ = ("status", "body", "headers")

    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.status, self.body, self.headers = status, body, headers


class PeerRouter:
    def __init__(
        self,
        peers: Peers,
        *,
        connect_timeout_s: float = 0.5,
        down_s: float = 10.0,
        max_connections: int = 256,
        hot_share: float = DEFAULT_HOT_SHARE,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.peers = peers
        self.connect_timeout_s, self.down_s, self.max_connections = connect_timeout_s, down_s, max_connections
        self._clock, self._transport = clock, transport
        self._down: dict[str, float] = {}  # address -> until when it is left out
        self._client: httpx2.AsyncClient | None = None
        self.counts: dict[str, int] = dict.fromkeys(("forwarded", "failed_over", "timed_out", "served_for_peers"), 0)
        self.hot_share = hot_share
        self._entered: Counter[str] = Counter()  # models of the requests entering this task, decayed
        self._entered_total = 0
        self._owners: dict[str, int] = {}  # model -> its number of owners, where more than one
        self._turns: dict[str, itertools.count] = {}

    # -- who owns a model --------------------------------------------------------------------------------------

    def live(self) -> tuple[str, ...]:
        """The known tasks less those left out after a failure (never this one)."""
        now, me = self._clock(), self.peers.self_address
        return tuple(a for a in self.peers.addresses() if a == me or self._down.get(a, 0.0) <= now)

    def owner(self, model: str) -> str | None:
        """The live task to serve a request for ``model`` that entered here, or None when that is this task (it owns
        the model, or is one of a hot model's owners, or knows no other task)."""
        live = self.live()
        if not live:
            return None
        self._count(model, len(live))
        owners = candidates(model, live, self._owners.get(model, 1))
        if self.peers.self_address in owners:
            return None
        if len(owners) == 1:
            return owners[0]
        return owners[next(self._turns.setdefault(model, itertools.count())) % len(owners)]

    def owners_of(self, model: str) -> int:
        """How many tasks own ``model`` now (more than one for a hot model)."""
        return self._owners.get(model, 1)

    def _count(self, model: str, tasks: int) -> None:
        if self.hot_share <= 0:
            return
        self._entered[model] += 1
        self._entered_total += 1
        total = self._entered_total
        if total < HOT_WINDOW:
            return
        # A model with share p on k owners puts p / k on each; a task's even share is 1 / tasks.
        self._owners = {
            name: min(tasks, math.ceil(count / total * tasks / self.hot_share))
            for name, count in self._entered.items()
            if count / total * tasks > self.hot_share
        }
        self._turns = {name: turn for name, turn in self._turns.items() if name in self._owners}
        self._entered = Counter({name: count // 2 for name, count in self._entered.items() if count > 1})
        self._entered_total = self._entered.total()

    def mark_down(self, address: str) -> None:
        self._down[address] = self._clock() + self.down_s

    # -- the hop -----------------------------------------------------------------------------------------------

    def _client_for_hops(self) -> httpx2.AsyncClient:
        if self._client is None:
            limits = httpx2.Limits(
                max_connections=self.max_connections, max_keepalive_connections=KEEP_ALIVE_CONNECTIONS
            )
            self._client = httpx2.AsyncClient(limits=limits, transport=self._transport, follow_redirects=False)
        return self._client

    async def forward(self, owner: str, path: str, body: bytes, headers: Any, deadline: float) -> Forwarded | None:
        """The owner's answer, or None: serve the request here (the owner could not be reached, or no time is
        left to ask it); PoolError 504 when the owner took the request but did not answer by its deadline.
        ``headers``: the request's (a mapping of lower-case names)."""
        remaining = deadline - self._clock()
        if remaining <= 0:
            return None
        sent = {name: value for name in CARRIED_HEADERS if (value := headers.get(name))}
        sent[FORWARDED_HEADER] = self.peers.self_address or "-"
        sent[TIMEOUT_HEADER] = str(max(1, int(remaining * 1000)))
        quick = min(self.connect_timeout_s, remaining)
        timeout = httpx2.Timeout(remaining + ANSWER_GRACE_S, connect=quick, pool=quick)
        try:
            answer = await self._client_for_hops().post(
                f"http://{owner}{path}", content=body, headers=sent, timeout=timeout
            )
        except httpx2.PoolTimeout:  # every connection busy: this task's limit, not the owner's fault
            self.counts["failed_over"] += 1
            return None
        except (httpx2.NetworkError, httpx2.RemoteProtocolError, httpx2.ConnectTimeout) as exc:
            log.warning("pool peer failed; serving here", extra={"peer": owner, "error": repr(exc)})
            self._fail_over(owner)
            return None
        except httpx2.TimeoutException:
            self.mark_down(owner)
            self.counts["timed_out"] += 1
            log.warning("pool peer did not answer by the deadline", extra={"peer": owner})
            raise PoolError(504, "timeout", "the pool task that holds the model did not answer in time") from None
        if answer.status_code == 503 and DRAINING_HEADER in answer.headers:
            log.info("pool peer draining; serving here", extra={"peer": owner})
            self._fail_over(owner)
            return None
        self.counts["forwarded"] += 1
        kept = {name: answer.headers[name] for name in ANSWER_HEADERS if name in answer.headers}
        return Forwarded(answer.status_code, answer.content, kept)

    def _fail_over(self, owner: str) -> None:
        """``owner`` is left out for ``down_s``; the request is served here."""
        self.mark_down(owner)
        self.counts["failed_over"] += 1

    def note_served_for_peer(self) -> None:
        self.counts["served_for_peers"] += 1

    def take(self) -> dict[str, int]:
        """The counts since the last take, and the known and live peers now."""
        taken = dict(self.counts)
        self.counts = dict.fromkeys(self.counts, 0)
        return {**taken, "known": len(self.peers.addresses()), "live": len(self.live())}

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
