"""Model affinity between real pool servers (uvicorn on loopback ports, fake loaders, a static peer list): a request
entering any task is answered by the model's owner (only the owner's loader ever loads it), a dead peer's models are
served where the request lands, and so are a draining peer's, a forwarded request is never forwarded again, and the
deadline and the owner's 4xx cross the hop. Then the peer sources: the static list and DNS (looked up with a fake
resolver)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx2
import pytest

from inference_server.pool.affinity import DEFAULT_HOT_SHARE, candidates
from inference_server.pool.gate import DRAINING_HEADER
from inference_server.pool.peer_router import FORWARDED_HEADER, HOT_WINDOW, TIMEOUT_HEADER, PeerRouter
from inference_server.pool.peers import DNS_ANSWER_LIMIT, DnsPeers, StaticPeers, is_local
from inference_server.pool.pool_settings import load_pool_settings
from inference_server.pool.registry import Registry
from inference_server.pool.server import PoolServer
from inference_server.settings import SettingsError

from ..live import free_port, live_asgi
from ..pool_fakes import FakeLoader

POOL = "pool-a"
MODELS = {f"m{index}": "1" for index in range(30)}


def store_with(tmp_path: Path, models: dict[str, str]) -> str:
    store = tmp_path / "pools" / POOL
    store.mkdir(parents=True, exist_ok=True)
    (store / "registry.json").write_bytes(Registry(POOL, models).to_json())
    return f"{store}/"


class Task:
    """One pool server on a loopback port, its loader's counters and its router's."""

    def __init__(self, server: PoolServer, loader: FakeLoader, address: str) -> None:
        self.server, self.loader, self.address = server, loader, address

    @property
    def router(self) -> PeerRouter:
        assert self.server.router is not None
        return self.server.router

    @property
    def counts(self) -> dict[str, int]:
        return self.router.counts

    def loaded(self, model: str) -> bool:
        return self.loader.loads[(model, "1")] > 0


@contextmanager
def tasks_on(tmp_path: Path, ports: list[int], peers: list[tuple[str, ...]], **overrides) -> Iterator[list[Task]]:
    """Pool servers on ``ports``, each listing its own ``peers``; ``overrides``: their settings."""
    store = store_with(tmp_path, MODELS)
    with ExitStack() as stack:
        made = []
        for index, (port, listed) in enumerate(zip(ports, peers, strict=True)):
            settings = load_pool_settings(
                {},
                pool_name=POOL,
                store_uri=store,
                cache_dir=tmp_path / f"cache-{index}",
                host="127.0.0.1",
                port=port,
                peers=listed,
                metrics_interval_s=3600.0,
                signal_interval_s=3600.0,  # the scale-out signal also logs "metrics"
                registry_poll_s=3600.0,
                **overrides,
            )
            loader = FakeLoader()
            server = PoolServer(settings, loader=loader)
            server.start()
            stack.callback(server.stop)
            made.append(Task(server, loader, stack.enter_context(live_asgi(server.app, port))))
        yield made


def tasks(tmp_path: Path, count: int, *, extra_peers: tuple[str, ...] = (), **overrides):
    """``count`` pool servers that list each other (and ``extra_peers``) as their peers."""
    ports = [free_port() for _ in range(count)]
    listed = tuple(f"127.0.0.1:{port}" for port in ports) + extra_peers
    return tasks_on(tmp_path, ports, [listed] * count, **overrides)


def predict(address: str, model: str, body=None, headers=None) -> httpx2.Response:
    return httpx2.post(
        f"http://{address}/{POOL}/models/{model}/predict", json=body or {"text": "x"}, headers=headers, timeout=30
    )


def owner_of(model: str, among: list[Task]) -> Task:
    best = candidates(model, [t.address for t in among])[0]
    return next(t for t in among if t.address == best)


def test_a_request_entering_any_task_is_answered_by_its_models_owner(tmp_path, caplog):
    with tasks(tmp_path, 3) as pool:
        owners = {model: owner_of(model, pool) for model in MODELS}
        assert len({o.address for o in owners.values()}) == 3  # every task owns some of them
        for model in MODELS:
            for entry in pool:
                answer = predict(entry.address, model)
                assert answer.status_code == 200 and answer.json() == {"prediction": 1.0}, answer.text
        for model, owner in owners.items():
            assert [t.loaded(model) for t in pool] == [t is owner for t in pool], model
            assert owner.loader.loads[(model, "1")] == 1
        for task in pool:
            owned = sum(o is task for o in owners.values())
            assert task.counts["forwarded"] == len(MODELS) - owned  # one hop for each model it does not own
            assert task.counts["served_for_peers"] == 2 * owned  # each of its models entered the two others once
            assert task.counts["failed_over"] == 0
        with caplog.at_level(logging.INFO, logger="inference_server.pool.server"):
            pool[0].server.emit_metrics()
        (document,) = [r.fields for r in caplog.records if r.getMessage() == "metrics"]  # type: ignore[attr-defined]
        owned = sum(o is pool[0] for o in owners.values())
        assert document["peer_forwarded"] == len(MODELS) - owned and document["peer_served_for_peers"] == 2 * owned
        assert document["peer_known"] == document["peer_live"] == 3
        assert "peer_forwarded" not in {m["Name"] for m in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]}


def test_a_dead_peers_models_are_served_where_the_request_lands_then_by_the_next_live_owner(tmp_path):
    dead = f"127.0.0.1:{free_port()}"  # listed, but nobody listens there
    with tasks(tmp_path, 2, extra_peers=(dead,)) as pool:
        everyone = [t.address for t in pool] + [dead]
        model = next(m for m in MODELS if candidates(m, everyone)[0] == dead)
        entry = pool[0]
        started = time.monotonic()
        answer = predict(entry.address, model)
        assert answer.status_code == 200 and answer.json() == {"prediction": 1.0}
        assert time.monotonic() - started < 5
        assert entry.loaded(model) and entry.counts["failed_over"] == 1
        assert dead not in entry.router.live()
        again = predict(entry.address, model)  # the dead peer is left out: the next-ranked live task owns it now
        assert again.status_code == 200 and entry.counts["failed_over"] == 1
        assert owner_of(model, pool).loaded(model)


def test_a_draining_owners_models_are_served_where_the_request_lands_and_it_is_left_out(tmp_path):
    with tasks(tmp_path, 2) as pool:
        entry, owner = pool
        model = next(m for m in MODELS if owner_of(m, pool) is owner)
        owner.server.begin_drain()
        direct = predict(owner.address, model)  # what the ALB's retry would get from it: refused unread
        assert direct.status_code == 503 and direct.headers[DRAINING_HEADER] == "1"
        answer = predict(entry.address, model)
        assert answer.status_code == 200 and answer.json() == {"prediction": 1.0}
        assert DRAINING_HEADER not in answer.headers
        assert entry.loaded(model) and not owner.loaded(model)
        assert entry.counts["failed_over"] == 1 and entry.counts["forwarded"] == 0
        assert owner.address not in entry.router.live()
        assert predict(entry.address, model).status_code == 200 and entry.counts["failed_over"] == 1  # no second try


def test_a_forwarded_request_is_served_where_it_lands_so_two_tasks_that_disagree_never_loop(tmp_path):
    # Task 0 lists both; task 1 does not list itself (as a task not yet registered in DNS would not), so each
    # thinks the other owns the model.
    stray = f"127.0.0.1:{free_port()}"
    ports = [free_port(), free_port()]
    a, b = (f"127.0.0.1:{port}" for port in ports)
    model = next(m for m in MODELS if candidates(m, [a, b])[0] == b and candidates(m, [a, stray])[0] == a)
    with tasks_on(tmp_path, ports, [(a, b), (a, stray)]) as pool:
        into_a = predict(a, model)
        assert into_a.status_code == 200
        assert pool[1].loaded(model) and not pool[0].loaded(model)  # a forwarded to b, which served it
        assert pool[0].counts["forwarded"] == 1 and pool[1].counts["forwarded"] == 0
        into_b = predict(b, model)
        assert into_b.status_code == 200
        assert pool[0].loaded(model) and pool[0].counts["served_for_peers"] == 1  # b forwarded to a, which served it
        marked = predict(b, model, headers={FORWARDED_HEADER: a})
        assert marked.status_code == 200 and pool[1].counts["forwarded"] == 1  # marked: served where it landed


def test_the_deadline_crosses_the_hop_and_the_owner_sheds_by_it(tmp_path):
    with tasks(tmp_path, 2, load_estimate_s=5.0, request_timeout_s=10.0) as pool:
        model = next(m for m in MODELS if owner_of(m, pool) is pool[1])
        pool[1].loader.load_gate.clear()  # the owner's load would take longer than the request may wait
        try:
            started = time.monotonic()
            answer = predict(pool[0].address, model, headers={TIMEOUT_HEADER: "500"})
            elapsed = time.monotonic() - started
        finally:
            pool[1].loader.load_gate.set()
        # Without the deadline the owner would admit it (10 s allowed, a 5 s load): it shed it by the 500 ms.
        assert answer.status_code == 503 and "deadline" in answer.json()["error"]["message"]
        assert answer.headers["retry-after"]
        assert elapsed < 3
        assert pool[0].counts["forwarded"] == 1 and pool[1].counts["served_for_peers"] == 1
        assert not pool[0].loaded(model)


def test_the_owners_4xx_cross_the_hop_and_a_bad_name_never_does(tmp_path):
    with tasks(tmp_path, 2) as pool:
        entry = pool[0]
        model = next(m for m in MODELS if owner_of(m, pool) is pool[1])
        empty = predict(entry.address, model, body={"texts": []})
        assert empty.status_code == 422 and empty.json()["error"]["code"] == "invalid_input"
        oip = httpx2.post(
            f"http://{entry.address}/{POOL}/v2/models/{model}/infer",
            json={"inputs": [{"name": "text", "datatype": "FP32", "shape": [1], "data": [1.0]}]},
        )
        assert oip.status_code == 400 and "BYTES" in oip.json()["error"]  # the OIP error shape, from the owner
        assert entry.counts["forwarded"] == 2 and pool[1].counts["served_for_peers"] == 2
        for name, status in (("ghost", 404), ("Bad_Name", 400)):
            assert predict(entry.address, name).status_code == status
        late = predict(entry.address, model, headers={TIMEOUT_HEADER: "soon"})
        assert late.status_code == 400 and "X-Request-Timeout-Ms" in late.json()["error"]["message"]
        assert entry.counts["forwarded"] == 2  # decided where they landed


def test_the_hop_carries_the_clients_key(tmp_path):
    keys = (("team", "s3cret-key-0123456789"),)
    with tasks(tmp_path, 2, api_keys=keys) as pool:
        model = next(m for m in MODELS if owner_of(m, pool) is pool[1])
        assert predict(pool[0].address, model).status_code == 401
        assert pool[0].counts["forwarded"] == 0  # refused where it landed
        answer = predict(pool[0].address, model, headers={"x-api-key": keys[0][1]})
        assert answer.status_code == 200 and pool[1].loaded(model)


def test_an_owner_that_takes_the_request_but_never_answers_is_a_504_by_the_deadline_then_left_out(tmp_path):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        mute = f"127.0.0.1:{silent.getsockname()[1]}"
        with tasks(tmp_path, 1, extra_peers=(mute,)) as pool:
            entry = pool[0]
            model = next(m for m in MODELS if candidates(m, [entry.address, mute])[0] == mute)
            started = time.monotonic()
            answer = predict(entry.address, model, headers={TIMEOUT_HEADER: "300"})
            assert answer.status_code == 504 and time.monotonic() - started < 5
            assert entry.counts["timed_out"] == 1 and mute not in entry.router.live()
            assert predict(entry.address, model).status_code == 200 and entry.loaded(model)


def test_the_router_sends_what_is_left_of_the_deadline_and_the_marks_of_a_hop():
    seen: list[httpx2.Request] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(429, content=b'{"error": 1}', headers={"retry-after": "3", "x-other": "no"})

    peers = StaticPeers(["127.0.0.1:1", "10.255.255.1:2"], port=1)
    router = PeerRouter(peers, transport=httpx2.MockTransport(answer))
    headers = {"content-type": "application/json", "x-api-key": "k", "cookie": "c", "x-amzn-trace-id": "Root=1-a"}

    async def hop():
        try:
            return await router.forward("10.255.255.1:2", "/p/models/m/predict", b"{}", headers, time.monotonic() + 2)
        finally:
            await router.aclose()

    forwarded = asyncio.run(hop())
    assert forwarded is not None and forwarded.status == 429 and forwarded.headers == {"retry-after": "3"}
    (request,) = seen
    assert str(request.url) == "http://10.255.255.1:2/p/models/m/predict" and request.content == b"{}"
    assert 0 < int(request.headers[TIMEOUT_HEADER]) <= 2000
    assert request.headers[FORWARDED_HEADER] == "127.0.0.1:1"
    assert request.headers["x-api-key"] == "k" and request.headers["x-amzn-trace-id"] == "Root=1-a"
    assert "cookie" not in request.headers


def test_a_hot_model_gets_more_owners_and_requests_entering_elsewhere_take_them_in_turn():
    addresses = [f"127.0.0.1:{9000 + index}" for index in range(4)]

    def router(address: str, hot_share: float = DEFAULT_HOT_SHARE) -> PeerRouter:
        return PeerRouter(StaticPeers(addresses, port=int(address.rsplit(":", 1)[1])), hot_share=hot_share)

    ranked = candidates("hot", addresses, 4)
    elsewhere, second, one_owner = router(ranked[3]), router(ranked[1]), router(ranked[3], hot_share=0)
    for index in range(HOT_WINDOW):  # a fifth of the requests for one model: 0.2 x 4 tasks / 0.5 -> two owners
        model = "hot" if index % 5 == 0 else f"m{index % 200}"
        for each in (elsewhere, second, one_owner):
            each.owner(model)
    assert elsewhere.owners_of("hot") == 2 and elsewhere.owners_of("m1") == 1
    assert sorted(elsewhere.owner("hot") or "" for _ in range(4)) == sorted([ranked[0], ranked[1]] * 2)
    assert second.owner("hot") is None  # one of its owners: served where it entered
    assert one_owner.owners_of("hot") == 1 and {one_owner.owner("hot") for _ in range(4)} == {ranked[0]}


# -- the peer sources ------------------------------------------------------------------------------------------


def test_this_task_is_the_listed_address_on_its_own_interface_and_port():
    assert is_local("127.0.0.1") and not is_local("192.0.2.7")
    peers = StaticPeers(["127.0.0.1:9000", "127.0.0.1:9001", "192.0.2.7:9000"], port=9000)
    assert peers.self_address == "127.0.0.1:9000"
    assert StaticPeers(["192.0.2.7:9000"], port=9000).self_address is None


class FakeDns:
    def __init__(self) -> None:
        self.answer: list[str] | OSError = []
        self.now = 100.0

    def resolve(self, name: str) -> list[str]:
        assert name == "tasks.pool-a.dev.internal"
        if isinstance(self.answer, OSError):
            raise self.answer
        return list(self.answer)


def dns_peers(dns: FakeDns, local: str = "10.0.0.1") -> DnsPeers:
    return DnsPeers(
        "tasks.pool-a.dev.internal",
        8080,
        refresh_s=5.0,
        keep_s=30.0,
        resolve=dns.resolve,
        local=lambda host: host == local,
        clock=lambda: dns.now,
    )


def test_dns_peers_are_the_a_records_with_the_servers_port_and_this_task_among_them():
    dns = FakeDns()
    dns.answer = ["10.0.0.2", "10.0.0.1"]
    peers = dns_peers(dns)
    assert peers.refresh()
    assert peers.addresses() == ("10.0.0.1:8080", "10.0.0.2:8080")
    assert peers.self_address == "10.0.0.1:8080"


def test_dns_peers_look_the_name_up_in_the_systems_resolver_and_find_this_task():
    port = free_port()
    peers = DnsPeers("localhost", port)  # the default resolver: getaddrinfo's A records, as in a task
    assert peers.refresh()
    assert peers.addresses() == (f"127.0.0.1:{port}",) and peers.self_address == f"127.0.0.1:{port}"
    missing = DnsPeers("no-such-task.invalid", port)
    assert not missing.refresh() and missing.addresses() == () and missing.lookups_failed == 1


def test_dns_peers_keep_the_union_of_recent_answers_and_age_out_a_stopped_task():
    dns = FakeDns()
    everyone = [f"10.0.1.{i}" for i in range(DNS_ANSWER_LIMIT + 4)]  # more tasks than one answer holds
    peers = dns_peers(dns, local=everyone[0])
    for start in range(0, len(everyone), 4):  # each answer a different eight
        dns.answer = (everyone + everyone)[start : start + DNS_ANSWER_LIMIT]
        peers.refresh()
        dns.now += 5
    assert len(peers.addresses()) == len(everyone)
    dns.answer = everyone[1:]  # task 0 stopped
    for _ in range(8):
        dns.now += 5
        peers.refresh()
    assert f"{everyone[0]}:8080" not in peers.addresses() and peers.self_address is None


def test_a_failed_or_empty_dns_lookup_keeps_the_peers_known():
    dns = FakeDns()
    dns.answer = ["10.0.0.1", "10.0.0.2"]
    peers = dns_peers(dns)
    peers.refresh()
    dns.now += 120  # long past keep_s: an outage must not split the pool into tasks that each own everything
    dns.answer = socket.gaierror("Name or service not known")
    assert not peers.refresh() and peers.lookups_failed == 1
    dns.answer = []
    peers.refresh()
    assert peers.addresses() == ("10.0.0.1:8080", "10.0.0.2:8080")


def test_dns_peers_refresh_on_their_own_thread():
    calls = itertools.count()

    def resolve(name: str) -> list[str]:  # a second task registers after the first look-up
        return ["10.0.0.1"] if next(calls) == 0 else ["10.0.0.1", "10.0.0.3"]

    peers = DnsPeers("tasks.pool-a.dev.internal", 8080, refresh_s=0.05, resolve=resolve, local=lambda host: False)
    peers.start()
    try:
        assert peers.addresses() == ("10.0.0.1:8080",)  # the first look-up is done before start returns
        deadline = time.monotonic() + 5
        while len(peers.addresses()) < 2:
            assert time.monotonic() < deadline, "the thread never looked the name up again"
            time.sleep(0.02)
    finally:
        peers.stop()


def test_the_peer_settings(tmp_path):
    store = store_with(tmp_path, {})
    settings = load_pool_settings(
        {"POOL_NAME": POOL, "MODEL_STORE_URI": store, "POOL_PEERS": "10.0.0.1:8080, 10.0.0.2:8080"}
    )
    assert settings.peers == ("10.0.0.1:8080", "10.0.0.2:8080") and settings.peer_dns_name is None
    dns = load_pool_settings({"POOL_NAME": POOL, "MODEL_STORE_URI": store, "POOL_PEER_DNS_NAME": "tasks.x.internal"})
    assert isinstance(PoolServer(dns, loader=FakeLoader()).peers, DnsPeers)
    assert (
        PoolServer(load_pool_settings({"POOL_NAME": POOL, "MODEL_STORE_URI": store}), loader=FakeLoader()).router
        is None
    )
    with pytest.raises(SettingsError) as both:
        load_pool_settings(
            {"POOL_NAME": POOL, "MODEL_STORE_URI": store, "POOL_PEERS": "a:1", "POOL_PEER_DNS_NAME": "tasks.x.internal"}
        )
    assert both.value.variable == "POOL_PEERS"
    with pytest.raises(SettingsError) as bad:
        load_pool_settings({"POOL_NAME": POOL, "MODEL_STORE_URI": store, "POOL_PEERS": "10.0.0.1"})
    assert bad.value.variable == "POOL_PEERS"
