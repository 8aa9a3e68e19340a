"""Endpoint discovery: asking the cluster for its nodes (``ListEndpoints``), in the background at
an interval and at once when most nodes are failing, and handing them to the balancer."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._balancer import DETECT_TIMEOUT, Balancer, Endpoint, Node, nearest_location
from .._errors import OperationTimeoutError, TransportError, YdbTopicError
from .._futures import run_within, wait_within
from .._proto import ydb_discovery_pb2
from .._retry import BackoffSchedule, RetryPolicy
from ..observability.logging import sdk_logger
from .channels import Channels

if TYPE_CHECKING:
    from google.protobuf.message import Message

logger = sdk_logger("driver")

M = TypeVar("M", bound="Message")

LIST_ENDPOINTS = "/Ydb.Discovery.V1.DiscoveryService/ListEndpoints"
DISCOVERY_TIMEOUT = 10.0
"""Bounds one background ``ListEndpoints`` call."""
DISCOVERY_CLOSE_GRACE = 1.0
"""Seconds ``close`` lets a ``ListEndpoints`` call in flight finish before cancelling it."""
REDISCOVERY_GAP = 1.0
"""An early rediscovery (most nodes failing) starts at least this long after the previous round."""
DISCOVERY_RETRY = BackoffSchedule(base=1.0, cap=10.0, floor=0.5)
"""Delays before repeating a discovery round that failed (never longer than the interval)."""


class CallOperation(Protocol):
    """The transport's unary call of an ``Operation``-returning method."""

    async def __call__(
        self, path: str, request: Message, response_cls: type[Message], result_cls: type[M] | None, **options: Any
    ) -> M | None: ...


class Discovery:
    """Which nodes the cluster has, kept current for the balancer.

    ``seed`` is the endpoint the transport was given: it is asked first, and any discovered node
    when it does not answer. With ``enabled`` false, ``discover`` only checks that the seed
    answers. ``detect_location`` makes each round find the client's location (the nodes that
    answer first) for the balancer to prefer.
    """

    def __init__(
        self,
        seed: Endpoint,
        database: str,
        balancer: Balancer,
        channels: Channels,
        call_operation: CallOperation,
        *,
        enabled: bool,
        interval: float,
        detect_location: bool,
    ) -> None:
        self.seed = seed
        self.database = database
        self.enabled = enabled
        self.rounds = 0
        """Background discovery rounds finished so far, answered or not."""
        self._balancer = balancer
        self._channels = channels
        self._call_operation = call_operation
        self._interval = interval
        self._detect_location = detect_location
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._closed = False

    def start(self) -> None:
        """Start discovering in the background (the first round at once), unless discovery is off
        or already running."""
        if self.enabled and self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="ydb-topic-async discovery")

    def wake(self) -> None:
        """Start the next round now (at least ``REDISCOVERY_GAP`` after the previous one)."""
        self._wake.set()

    def stop(self) -> None:
        """No more rounds start; what discovery finds from now on is not used."""
        self._closed = True

    @property
    def stopped(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Stop the background rounds: one in flight may finish within a grace period (a
        ``ListEndpoints`` call cancelled in flight would have its last gRPC event delivered after
        the transport closed), else it is cancelled."""
        self.stop()
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        self._wake.set()
        if not await run_within(asyncio.shield(task), DISCOVERY_CLOSE_GRACE):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def discover(
        self, *, timeout: float | None, retry: RetryPolicy | None = None, endpoint: Endpoint | None = None
    ) -> None:
        """Ask the seed (or ``endpoint``) for the cluster's nodes and use them for new calls (with
        discovery off, only check that it answers)."""
        result = await self._call_operation(
            LIST_ENDPOINTS,
            ydb_discovery_pb2.ListEndpointsRequest(database=self.database),
            ydb_discovery_pb2.ListEndpointsResponse,
            ydb_discovery_pb2.ListEndpointsResult,
            timeout=timeout,
            idempotent=True,
            retry=retry or RetryPolicy.no_retries(),
            endpoint=endpoint or self.seed,
        )
        assert result is not None
        if self.enabled:
            await self._use(result)

    async def wait_ready(self, timeout: float | None, retry: RetryPolicy | None = None) -> None:
        """Wait until the database answers (and, with discovery, its endpoints are known).

        Retriable failures (a refused connection, a server starting) are retried by ``retry``
        (for the whole ``timeout`` by default); ``OperationTimeoutError`` when nothing answered
        in time, any other failure at once.
        """
        try:
            await self.discover(timeout=timeout, retry=retry or RetryPolicy.forever())
        except OperationTimeoutError as exc:
            cause = exc.__cause__
            raise OperationTimeoutError(
                f"no YDB endpoint answered at {self.seed} (database {self.database}) within {timeout}s"
                + (f"; last error: {cause}" if cause is not None else "")
            ) from cause

    async def _use(self, result: ydb_discovery_pb2.ListEndpointsResult) -> None:
        nodes: list[Node] = []
        for info in result.endpoints:
            if info.address and info.port and (
                not info.service or "topic_service" in info.service or "topic" in info.service
            ):
                endpoint = Endpoint(info.address, info.port, self.seed.secure or info.ssl)
                nodes.append(Node(endpoint, info.location, info.node_id))
        if not nodes or self._closed:
            return
        location = None
        if self._detect_location:
            location = await nearest_location(nodes, timeout=DETECT_TIMEOUT) or result.self_location or None
            if self.stopped:  # stopped during the race
                return
        for endpoint in self._balancer.update(nodes, location=location):
            if endpoint != self.seed:
                # Streams still open to a node no longer listed end when they end (a dead node's
                # have failed already); only then is its channel closed.
                self._channels.retire(endpoint)
        logger.debug(
            "discovered endpoints: %s%s",
            ", ".join(f"{node.endpoint} ({node.location or 'no location'})" for node in nodes),
            f"; preferring location {self._balancer.location}" if self._balancer.location else "",
        )

    async def _round(self) -> None:
        try:
            await self.discover(timeout=DISCOVERY_TIMEOUT)
        except (TransportError, OperationTimeoutError):
            others = [e for e in self._balancer.choices if e != self.seed]
            if not others or self._closed:
                raise
            # The seed does not answer: any node of the cluster can list the others.
            await self.discover(timeout=DISCOVERY_TIMEOUT, endpoint=random.choice(others))

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while not self._stop.is_set():
            started = loop.time()
            self._wake.clear()
            try:
                await self._round()
            except YdbTopicError as exc:
                if self._closed:
                    return
                failures += 1
                wait = min(self._interval, DISCOVERY_RETRY.delay(failures - 1))
                log = logger.warning if failures == 1 else logger.debug
                log(
                    "endpoint discovery failed, keeping %s; trying again in %.1fs: %s",
                    ", ".join(map(str, self._balancer.endpoints)), wait, exc,
                )
            else:
                if failures:
                    logger.info("endpoint discovery answered again after %d failed rounds", failures)
                failures = 0
                wait = self._interval
            self.rounds += 1
            with contextlib.suppress(TimeoutError):
                await wait_within(self._wake.wait(), wait)
            # Woken early (most endpoints failing): still no sooner than a gap after this round.
            gap = REDISCOVERY_GAP - (loop.time() - started)
            if gap > 0 and not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await wait_within(self._stop.wait(), gap)
