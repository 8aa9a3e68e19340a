"""Which endpoint a new call or stream goes to: the discovered nodes, the ones that are failing,
and the client's location.

``Balancer`` is the transport's choice of endpoint, kept apart from the network so that it can be
reasoned about (and tested) on its own:

- Discovery hands it the cluster's nodes (``update``); until then, the endpoint the driver was
  given is the only one.
- A node whose calls fail with transport errors is *pessimized* (``pessimize``): it is not chosen
  for new calls and streams while any other node is healthy, and comes back at the next discovery
  that still lists it, or once a call to it succeeds (``restore``). When every node is pessimized,
  all of them are used again (something has to be tried). When more than half of the nodes are
  pessimized, ``pessimize`` says so (once, as the share crosses the half): the transport then
  rediscovers the cluster at once instead of at the next interval.
- With a location (the client's own data centre, configured or detected), the healthy nodes
  there are preferred; the others are used only when none there is healthy.

Within the preferred group, calls go round robin. ``nearest_location`` detects a location: the
one whose endpoint accepts a TCP connection first.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DETECT_TIMEOUT = 4.0
"""Seconds ``nearest_location`` waits for a TCP connection to any endpoint."""
DETECT_PER_LOCATION = 3
"""Endpoints of one location raced by ``nearest_location``."""
DETECT_LIMIT = 30
"""Connections ``nearest_location`` opens at most (one per location beyond that)."""


@dataclass(frozen=True)
class Endpoint:
    """One server address, with the TLS flag."""

    host: str
    port: int
    secure: bool = False

    @property
    def target(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{'grpcs' if self.secure else 'grpc'}://{self.target}"


@dataclass(frozen=True)
class Node:
    """A discovered endpoint with what discovery says about it."""

    endpoint: Endpoint
    location: str = ""
    """The node's data centre, as discovery names it ("" when unknown)."""
    node_id: int = 0
    """YDB's node id (0 when unknown)."""


class Balancer:
    """The endpoints new calls and streams may use, and which one is next.

    ``seed`` is the endpoint the driver was given: the only one until ``update``. ``location``
    is the client's own location, whose nodes are preferred (``None``: no preference).
    """

    __slots__ = ("_by_node", "_choices", "_nodes", "_pessimized", "_turn", "location", "seed")

    def __init__(self, seed: Endpoint, *, location: str | None = None) -> None:
        self.seed = seed
        self.location = location
        self._nodes: tuple[Node, ...] = (Node(seed),)
        self._by_node: dict[int, Endpoint] = {}
        self._pessimized: set[Endpoint] = set()
        self._choices: tuple[Endpoint, ...] = (seed,)
        self._turn = itertools.count()

    # --- what it knows ----------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every known node, healthy or not, in discovery's order."""
        return self._nodes

    @property
    def endpoints(self) -> list[Endpoint]:
        """Every known endpoint, healthy or not."""
        return [node.endpoint for node in self._nodes]

    @property
    def pessimized(self) -> frozenset[Endpoint]:
        """The endpoints not chosen while others are healthy."""
        return frozenset(self._pessimized)

    @property
    def choices(self) -> tuple[Endpoint, ...]:
        """The endpoints ``choose`` takes turns among now."""
        return self._choices

    def is_pessimized(self, endpoint: Endpoint) -> bool:
        return endpoint in self._pessimized

    # --- choosing ---------------------------------------------------------------------------

    def choose(self) -> Endpoint:
        """The endpoint of the next new call or stream (round robin over the preferred ones)."""
        choices = self._choices
        return choices[next(self._turn) % len(choices)]

    def for_node(self, node_id: int) -> Endpoint | None:
        """The endpoint of YDB node ``node_id``, when discovery named it."""
        return self._by_node.get(node_id)

    # --- what happens -----------------------------------------------------------------------

    def update(self, nodes: Sequence[Node], *, location: str | None = None) -> list[Endpoint]:
        """Use ``nodes`` from now on (a discovery's answer; empty: keep the current ones).

        Every listed node starts healthy (as a discovery round says it is alive). ``location``
        replaces the preferred location when given. Returns the endpoints no longer listed.
        """
        if location is not None:
            self.location = location
        if not nodes:
            self._refresh()
            return []
        listed = {node.endpoint for node in nodes}
        dropped = [node.endpoint for node in self._nodes if node.endpoint not in listed]
        self._nodes = tuple(nodes)
        self._by_node = {node.node_id: node.endpoint for node in nodes if node.node_id}
        self._pessimized.clear()
        self._refresh()
        return dropped

    def pessimize(self, endpoint: Endpoint) -> bool:
        """Stop choosing ``endpoint`` while other nodes are healthy. True when this made more
        than half of the nodes pessimized (only on that transition): time to rediscover."""
        if endpoint in self._pessimized or all(node.endpoint != endpoint for node in self._nodes):
            return False
        before = self._too_many_pessimized()
        self._pessimized.add(endpoint)
        self._refresh()
        return not before and self._too_many_pessimized()

    def restore(self, endpoint: Endpoint) -> None:
        """A call to ``endpoint`` succeeded: choose it again."""
        if endpoint in self._pessimized:
            self._pessimized.discard(endpoint)
            self._refresh()

    def _too_many_pessimized(self) -> bool:
        return len(self._pessimized) > len(self._nodes) / 2

    def _refresh(self) -> None:
        nodes = self._nodes
        healthy = [node for node in nodes if node.endpoint not in self._pessimized]
        pool = healthy or list(nodes)  # all pessimized: try them all the same
        if self.location:
            # The nodes here among those: a pessimized node here loses to a healthy one elsewhere.
            pool = [node for node in pool if node.location == self.location] or pool
        self._choices = tuple(node.endpoint for node in pool)


async def nearest_location(nodes: Iterable[Node], *, timeout: float = DETECT_TIMEOUT) -> str | None:
    """The location whose endpoint accepts a TCP connection first, or None when none does
    within ``timeout`` (or no node names a location).

    Up to ``DETECT_PER_LOCATION`` random endpoints of each location race (one of each when that
    would open more than ``DETECT_LIMIT`` connections, and never more than that); with a single
    location there is nothing to race. Every connection is closed before this returns.
    """
    by_location: dict[str, list[Endpoint]] = {}
    for node in nodes:
        if node.location:
            by_location.setdefault(node.location, []).append(node.endpoint)
    if len(by_location) <= 1:
        return next(iter(by_location), None)
    per_location = DETECT_PER_LOCATION if DETECT_PER_LOCATION * len(by_location) <= DETECT_LIMIT else 1
    candidates = [
        (location, endpoint)
        for location, endpoints in by_location.items()
        for endpoint in random.sample(endpoints, min(per_location, len(endpoints)))
    ][:DETECT_LIMIT]

    async def connect(endpoint: Endpoint) -> None:
        _, writer = await asyncio.open_connection(endpoint.host.strip("[]"), endpoint.port)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    loop = asyncio.get_running_loop()
    races = {
        loop.create_task(connect(endpoint), name=f"ydb-topic-async location race {endpoint}"): location
        for location, endpoint in candidates
    }
    pending = set(races)
    ends = loop.time() + timeout
    try:
        while pending:
            remaining = ends - loop.time()
            if remaining <= 0:
                return None
            done, pending = await asyncio.wait(pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.exception() is None:
                    return races[task]
        return None
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        for task in races:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: a refused connection is an answer, not an error to log


__all__ = ["Balancer", "Endpoint", "Node", "nearest_location"]
