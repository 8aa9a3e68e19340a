"""The balancer: which endpoint new calls and streams take (round robin, pessimized nodes, the
client's location), and the TCP race that detects a location.

Pessimization follows the Go SDK's balancer (``internal/balancer``: a node whose calls fail with
transport errors is banned while others are usable, all are used when all are banned, discovery
is forced when more than half are banned, and a discovery round unbans the nodes it lists);
locality follows the official SDKs' local-DC preference (``PreferNearestDC`` in Go,
``detect_local_dc`` in Python: the location of the endpoint that accepts a TCP connection first).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import pytest

from ydb_topic_async._balancer import Balancer, Endpoint, Node, nearest_location

SEED = Endpoint("seed", 2136)
A, B, C, D = (Endpoint(f"node-{n}", 2136) for n in "abcd")


def _turns(balancer: Balancer, n: int) -> Counter[Endpoint]:
    return Counter(balancer.choose() for _ in range(n))


def test_the_seed_until_discovery_then_round_robin_over_the_nodes() -> None:
    balancer = Balancer(SEED)
    assert _turns(balancer, 3) == {SEED: 3}
    assert balancer.update([Node(A), Node(B), Node(C)]) == [SEED]
    assert _turns(balancer, 9) == {A: 3, B: 3, C: 3}
    assert balancer.update([]) == []  # an empty answer keeps what is known
    assert balancer.endpoints == [A, B, C]


def test_a_pessimized_node_is_skipped_until_restored_or_listed_again() -> None:
    balancer = Balancer(SEED)
    balancer.update([Node(A), Node(B), Node(C)])
    assert balancer.pessimize(B) is False  # one of three: no early rediscovery
    assert balancer.pessimize(B) is False  # already pessimized: nothing changes
    assert _turns(balancer, 6) == {A: 3, C: 3}
    balancer.restore(B)  # a call to it succeeded
    assert _turns(balancer, 9) == {A: 3, B: 3, C: 3}
    balancer.pessimize(B)
    balancer.update([Node(A), Node(B), Node(C)])  # a discovery round that lists it again
    assert balancer.pessimized == frozenset()
    assert balancer.pessimize(Endpoint("unknown", 1)) is False
    assert balancer.pessimized == frozenset()


def test_more_than_half_pessimized_asks_for_rediscovery_once() -> None:
    balancer = Balancer(SEED)
    balancer.update([Node(A), Node(B), Node(C), Node(D)])
    assert balancer.pessimize(A) is False
    assert balancer.pessimize(B) is False  # half is not more than half
    assert balancer.pessimize(C) is True  # three of four: crossed
    assert balancer.pessimize(D) is False  # already past it
    assert _turns(balancer, 8) == {A: 2, B: 2, C: 2, D: 2}  # all failing: try them all the same
    balancer.restore(D)
    balancer.restore(C)
    assert balancer.pessimize(C) is True  # crossed again


def test_the_only_node_is_used_even_when_pessimized() -> None:
    balancer = Balancer(SEED)
    assert balancer.pessimize(SEED) is True  # one of one
    assert balancer.choose() == SEED


def test_nodes_in_the_clients_location_are_preferred_while_one_is_healthy() -> None:
    balancer = Balancer(SEED, location="dc1")
    balancer.update([Node(A, "dc1"), Node(B, "dc2"), Node(C, "dc1"), Node(D, "dc2")])
    assert _turns(balancer, 6) == {A: 3, C: 3}
    balancer.pessimize(A)
    assert _turns(balancer, 4) == {C: 4}
    balancer.pessimize(C)
    assert _turns(balancer, 4) == {B: 2, D: 2}  # none healthy here: the other location
    balancer.pessimize(B)
    balancer.pessimize(D)
    assert _turns(balancer, 4) == {A: 2, C: 2}  # none healthy anywhere: this location first
    balancer.update([Node(A, "dc1"), Node(B, "dc2")], location="dc2")  # a detected location
    assert balancer.location == "dc2"
    assert _turns(balancer, 3) == {B: 3}


def test_a_location_without_nodes_prefers_nothing() -> None:
    balancer = Balancer(SEED, location="elsewhere")
    balancer.update([Node(A, "dc1"), Node(B, "dc2")])
    assert _turns(balancer, 4) == {A: 2, B: 2}


def test_nodes_by_id() -> None:
    balancer = Balancer(SEED)
    balancer.update([Node(A, node_id=1), Node(B, node_id=2), Node(C)])
    assert (balancer.for_node(1), balancer.for_node(2), balancer.for_node(3)) == (A, B, None)


@contextlib.asynccontextmanager
async def _listening() -> AsyncIterator[Endpoint]:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    try:
        yield Endpoint("127.0.0.1", server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await server.wait_closed()


def _refusing() -> Endpoint:
    with socket.socket() as probe:  # a port nothing listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        return Endpoint("127.0.0.1", probe.getsockname()[1])


async def test_the_location_whose_endpoint_accepts_first_is_the_nearest() -> None:
    async with _listening() as live:
        nodes = [Node(_refusing(), "dc1"), Node(live, "dc2"), Node(_refusing(), "dc3"), Node(_refusing(), "dc1")]
        assert await asyncio.wait_for(nearest_location(nodes), 10) == "dc2"


async def test_no_location_is_nearest_when_nothing_accepts_in_time() -> None:
    nodes = [Node(_refusing(), "dc1"), Node(_refusing(), "dc2")]
    assert await asyncio.wait_for(nearest_location(nodes), 10) is None
    assert await nearest_location([Node(A, "only"), Node(B, "only")]) == "only"  # nothing to race
    assert await nearest_location([Node(A), Node(B)]) is None  # no locations named


@contextlib.contextmanager
def _hanging() -> Iterator[Endpoint]:
    """A port whose connections neither succeed nor fail: its listen queue is full, so the
    kernel drops new connection requests (the client keeps resending them)."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(4):
            filler = stack.enter_context(socket.socket())
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        yield Endpoint("127.0.0.1", port)


@pytest.mark.timeout(20)
async def test_the_race_gives_up_after_its_timeout() -> None:
    with _hanging() as hanging:
        await asyncio.sleep(0.1)  # the fillers' connections take the queue
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await nearest_location([Node(hanging, "dc1"), Node(hanging, "dc2")], timeout=0.5) is None
        assert 0.5 <= loop.time() - started < 10  # gives up (the hanging nodes never would)
