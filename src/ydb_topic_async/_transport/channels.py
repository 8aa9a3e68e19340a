"""The transport's channels: one per endpoint, where each new call goes, what a failed call says
about its node, and closing them all without leaving gRPC events to a closed event loop.

Reconnecting follows the SDK's retry policy rather than gRPC's own reconnect backoff (which grows
to two minutes): a channel whose connection attempts failed (TRANSIENT_FAILURE, where gRPC waits
out its backoff and cannot be told to try now) is replaced by a fresh one after a call fails on
it, so the next attempt, whenever the policy makes it, really connects.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from .._balancer import Balancer, Endpoint
from .._errors import ClosedError, ConnectionLostError, TransportError
from ..observability.logging import sdk_logger

logger = sdk_logger("driver")

SETTLE_QUIET = 0.1
"""``close`` waits for the last gRPC events of the calls it ended while they keep arriving: it
stops once none arrived for this long (the remaining ones belong to calls still running)."""
SETTLE_LIMIT = 1.0
"""At most this long in all."""

_TLS_CLOSED = "Socket closed"
_MTLS_HINT = (
    " (the server closed the TLS connection: if it requires a client certificate, pass the driver"
    " certificate_chain and private_key, or set YDB_CLIENT_CERT_FILE and YDB_CLIENT_CERT_KEY_FILE)"
)

_READY = grpc.ChannelConnectivity.READY
_FAILED_TO_CONNECT = grpc.ChannelConnectivity.TRANSIENT_FAILURE
_NODE_FAILURES = frozenset((grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL))
"""Transport failures that say the node, not the request, is at fault: it cannot be reached, its
connection broke, or, while the channel is not connected, connecting to it outlasted the call
(DEADLINE_EXCEEDED) or the connection was reset in the middle of a message (INTERNAL, "Internal
error from Core")."""
_FAULTS_ONLY_WHEN_DISCONNECTED = frozenset((grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL))


class ChannelSlot:
    """One endpoint's gRPC channel and the calls running on it.

    A channel replaced after its connection attempts failed is *retired*: no new call uses it,
    and it is closed once its last call has ended (a call created on it an instant before,
    whose start gRPC has not processed yet, would otherwise be left waiting on a closed channel).
    """

    __slots__ = ("calls", "channel", "retired")

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self.calls = 0
        self.retired = False


@dataclass(frozen=True, eq=False)
class Route:
    """Where one call went: its endpoint and the channel it used (to report how it went)."""

    endpoint: Endpoint
    slot: ChannelSlot

    @property
    def channel(self) -> grpc.aio.Channel:
        return self.slot.channel


class Channels:
    """The channels of one transport, one per endpoint, and the choice of one for each new call.

    ``seed`` is the endpoint the transport was given; ``balancer`` chooses among the discovered
    ones. TLS endpoints get channels with ``root_certificates`` and the client certificate, if any.
    """

    def __init__(
        self,
        seed: Endpoint,
        balancer: Balancer,
        options: Sequence[tuple[str, Any]],
        *,
        root_certificates: bytes | None,
        certificate_chain: bytes | None,
        private_key: bytes | None,
    ) -> None:
        self.seed = seed
        self.balancer = balancer
        self.options = list(options)
        self.root_certificates = root_certificates
        self.certificate_chain = certificate_chain
        self._private_key = private_key
        self._channels: dict[Endpoint, ChannelSlot] = {}
        self._retired: set[ChannelSlot] = set()
        """Replaced channels with calls still running (closed when the last one ends)."""
        self._closing: set[asyncio.Task[None]] = set()
        """Replaced channels being closed (``close`` waits for them)."""
        self._closed = False

    def route(self, endpoint: Endpoint | None = None, node_id: int | None = None) -> Route:
        """Where a new call goes: ``endpoint``, node ``node_id`` when discovery knows it, or the
        balancer's choice."""
        if self._closed:
            raise ClosedError("driver is closed")
        if endpoint is None and node_id is not None:
            endpoint = self.balancer.for_node(node_id)
        if endpoint is None:
            endpoint = self.balancer.choose()
        return Route(endpoint, self._channel_for(endpoint))

    def _channel_for(self, endpoint: Endpoint) -> ChannelSlot:
        slot = self._channels.get(endpoint)
        if slot is None:
            if endpoint.secure:
                creds = grpc.ssl_channel_credentials(
                    root_certificates=self.root_certificates,
                    private_key=self._private_key,
                    certificate_chain=self.certificate_chain,
                )
                channel = grpc.aio.secure_channel(endpoint.target, creds, options=self.options)
            else:
                channel = grpc.aio.insecure_channel(endpoint.target, options=self.options)
            slot = self._channels[endpoint] = ChannelSlot(channel)
        return slot

    def started(self, route: Route, call: grpc.aio.Call) -> None:
        """Count ``call`` on its channel until it ends (a retired channel closes after its last)."""
        slot = route.slot
        slot.calls += 1
        call.add_done_callback(functools.partial(self._ended, slot))

    def _ended(self, slot: ChannelSlot, call: object) -> None:
        slot.calls -= 1
        if slot.retired and not slot.calls:
            self._close_retired(slot)

    def retire(self, endpoint: Endpoint) -> None:
        """New calls to ``endpoint`` get a new channel; the current one closes after its last call."""
        slot = self._channels.pop(endpoint, None)
        if slot is not None:
            slot.retired = True
            self._retired.add(slot)
            if not slot.calls:
                self._close_retired(slot)

    def _close_retired(self, slot: ChannelSlot) -> None:
        if slot not in self._retired:
            return  # the transport closed it already
        self._retired.discard(slot)
        task = asyncio.get_running_loop().create_task(slot.channel.close(), name="ydb-topic-async closing a channel")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def call_failed(self, route: Route, error: BaseException) -> bool:
        """A call on ``route`` failed with ``error``: a transport failure that puts the node at
        fault pessimizes it (the balancer stops choosing it), and a channel whose connection
        attempts failed is replaced, so that the next call connects at once instead of when
        gRPC's reconnect backoff ends. True when most endpoints are now failing (time to
        rediscover the cluster)."""
        if self._closed or not isinstance(error, TransportError) or error.code not in _NODE_FAILURES:
            return False
        slot = route.slot
        state = slot.channel.get_state()
        if error.code in _FAULTS_ONLY_WHEN_DISCONNECTED and state is _READY:
            return False  # still connected: the call's own deadline or error, not the node's fault
        most_failing = self.balancer.pessimize(route.endpoint)
        if most_failing:
            nodes = len(self.balancer.nodes)
            logger.log(
                logging.INFO if nodes > 1 else logging.DEBUG,
                "most endpoints are failing (%s of %s): rediscovering now", len(self.balancer.pessimized), nodes,
            )
        if state is _FAILED_TO_CONNECT and self._channels.get(route.endpoint) is slot:
            # New calls get a fresh channel, which connects at once; the calls on this one fail
            # (it is not connected, and they do not wait for it to be), and then it is closed.
            self.retire(route.endpoint)
        return most_failing

    def call_succeeded(self, route: Route) -> None:
        """A call on ``route`` succeeded (a unary answer, a stream's handshake): its endpoint
        is chosen again if it was pessimized."""
        if self.balancer.is_pessimized(route.endpoint):
            self.balancer.restore(route.endpoint)

    def explained(self, error: TransportError) -> TransportError:
        """``error``, with a hint when a TLS server closed the connection of a client without a
        certificate: a server that requires client certificates (mutual TLS) does just that, and
        gRPC reports no more than "Socket closed"."""
        if (
            isinstance(error, ConnectionLostError)
            and self.seed.secure
            and self.certificate_chain is None
            and _TLS_CLOSED in error.details
        ):
            return ConnectionLostError(error.details + _MTLS_HINT, error.code)
        return error

    async def close(self) -> None:
        """Close every channel (their calls end) and wait for the last gRPC events of the calls
        they ended; no new call can be routed from now on."""
        self._closed = True
        # Channels must be closed while their event loop runs: a call freed later (after
        # asyncio.run returned) would hand its last gRPC events to a closed loop.
        channels = [slot.channel for slot in (*self._channels.values(), *self._retired)]
        self._channels, self._retired = {}, set()
        while channels:
            await channels.pop().close()
        while self._closing:
            await asyncio.wait(set(self._closing))
        await settle_cancelled_calls()


async def settle_cancelled_calls() -> None:
    """Wait until gRPC has handed this event loop the last events of the calls just cancelled.

    gRPC completes a cancelled call's pending operations a moment later, from its poller thread,
    and any event loop of the process that uses gRPC may pick the events up and forward them to
    the loop the call ran on. Forwarded to a loop closed in the meantime (``asyncio.run``
    returning right after a ``Driver.close``), they fail with "Event loop is closed". Each
    streaming call has a gRPC task that ends with the call's status, its last event: wait for
    those tasks while they keep ending (those of calls still running elsewhere do not).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_LIMIT
    pending = {t for t in asyncio.all_tasks() if _awaits_call_status(t)}
    while pending:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        done, pending = await asyncio.wait(
            pending, timeout=min(SETTLE_QUIET, remaining), return_when=asyncio.FIRST_COMPLETED
        )
        if not done:
            return


def _awaits_call_status(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` is grpc.aio's own, waiting for a streaming call's final status."""
    return getattr(task.get_coro(), "__qualname__", "") == "_AioCall._handle_status_once_received"
