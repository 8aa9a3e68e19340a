"""The transport: channels and endpoint discovery, request headers and auth, unary calls with a
total deadline across retries, and opening streams.

Everything that talks to the network goes through one ``Transport`` (a ``Driver`` owns it):
topic administration, writers and readers, query sessions and transactions, and the login of
``StaticCredentials``. Options are checked once, here, when it is made.

Which endpoint each new call or stream takes is the ``Balancer``'s choice (``_balancer``): the
transport tells it what discovery found and which calls failed with transport errors, and
rediscovers at once when it reports that most nodes are failing. Reconnecting follows the SDK's
retry policy rather than gRPC's own reconnect backoff (which grows to two minutes): a channel
whose connection attempts failed (TRANSIENT_FAILURE, where gRPC waits out its backoff and
cannot be told to try now) is replaced by a fresh one after a call fails on it, so the next
attempt, whenever the policy makes it, really connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import grpc
import grpc.aio

from ._balancer import DETECT_TIMEOUT, Balancer, Endpoint, Node, nearest_location
from ._credentials import Credentials, bind_credentials, fetch_token, unbind_credentials
from ._errors import (
    ClosedError,
    ConnectionLostError,
    DeadlineExceededError,
    InvalidArgumentError,
    InvalidEndpointError,
    OperationTimeoutError,
    TransportError,
    YdbTopicError,
    error_from_grpc,
    raise_for_status,
)
from ._futures import release_frames, run_within, wait_within
from ._limits import DEFAULT_MAX_MESSAGE_SIZE, MIN_MAX_MESSAGE_SIZE
from ._proto import ydb_auth_pb2, ydb_discovery_pb2
from ._retry import DEFAULT_RETRY, BackoffSchedule, RetryPolicy, retry_call
from ._version import __version__
from .observability.logging import register_secret, sdk_logger

if TYPE_CHECKING:
    from google.protobuf.message import Message

logger = sdk_logger("driver")

R = TypeVar("R")
M = TypeVar("M", bound="Message")
Req = TypeVar("Req", bound="Message")
Resp = TypeVar("Resp", bound="Message")

DEFAULT_KEEPALIVE_INTERVAL = 10.0
"""Seconds between HTTP/2 keepalive pings on a connection with open calls."""
DEFAULT_KEEPALIVE_TIMEOUT = 10.0
"""Seconds a keepalive ping may go unanswered before the connection counts as dead."""
MIN_SAFE_KEEPALIVE_INTERVAL = 10.0
"""Servers may refuse more frequent pings: gRPC's default server policy answers a client that
pings more often than it allows with GOAWAY "too_many_pings" (YDB's official SDK pings every 10 s)."""
DISCOVERY_TIMEOUT = 10.0
"""Bounds one background ``ListEndpoints`` call."""
LOGIN_TIMEOUT = 10.0
"""Bounds one ``AuthService.Login`` call (retries included)."""
DISCOVERY_CLOSE_GRACE = 1.0
"""Seconds ``close`` lets a ``ListEndpoints`` call in flight finish before cancelling it."""
SETTLE_QUIET = 0.1
"""``close`` waits for the last gRPC events of the calls it ended while they keep arriving: it
stops once none arrived for this long (the remaining ones belong to calls still running)."""
SETTLE_LIMIT = 1.0
"""At most this long in all."""
REDISCOVERY_GAP = 1.0
"""An early rediscovery (most nodes failing) starts at least this long after the previous round."""
DISCOVERY_RETRY = BackoffSchedule(base=1.0, cap=10.0, floor=0.5)
"""Delays before repeating a discovery round that failed (never longer than the interval)."""
MIN_GRPC_BACKOFF_MS = 100
"""gRPC's floor for its reconnect backoff options: smaller values are raised to it."""

_SDK_BUILD_INFO = f"ydb-topic-async/{__version__}"
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


class _Channel:
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
    slot: _Channel

    @property
    def channel(self) -> grpc.aio.Channel:
        return self.slot.channel


def parse_connection_string(value: str) -> tuple[Endpoint, str | None]:
    """Split ``grpc[s]://host:port/?database=/local`` (or ``grpc://host:port/local``) into parts.

    A bare ``host:port`` means plain ``grpc://``; without a port, 2136 (2135 for ``grpcs``).
    The database is None when the string has none. A malformed string raises
    ``InvalidEndpointError``.
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidEndpointError("endpoint must be a non-empty string like 'grpc://localhost:2136'")
    text = value.strip()
    if "://" not in text:
        text = "grpc://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise InvalidEndpointError(f"malformed endpoint {value!r}: {exc}") from None
    if parts.scheme not in ("grpc", "grpcs"):
        raise InvalidEndpointError(f"unsupported endpoint scheme {parts.scheme!r} in {value!r}: use grpc:// or grpcs://")
    if not parts.hostname:
        raise InvalidEndpointError(f"endpoint {value!r} has no host")
    if port is not None and not 1 <= port <= 65535:
        raise InvalidEndpointError(f"endpoint {value!r} has port {port}: ports are 1-65535")
    secure = parts.scheme == "grpcs"
    database: str | None = None
    query = parse_qs(parts.query)
    if "database" in query:
        database = query["database"][0]
    elif parts.path and parts.path != "/":
        database = parts.path
    return Endpoint(parts.hostname, port or (2135 if secure else 2136), secure), database


def _check_client_certificate(endpoint: Endpoint, chain: bytes | None, key: bytes | None) -> None:
    """A client certificate (mutual TLS) is a PEM chain and its PEM private key, over TLS."""
    for name, value in (("certificate_chain", chain), ("private_key", key)):
        if value is not None and (not isinstance(value, bytes) or b"-----BEGIN" not in value):
            raise InvalidArgumentError(f"{name} must be PEM bytes")
    if (chain is None) != (key is None):
        raise InvalidArgumentError("a client certificate needs both certificate_chain and private_key")
    if chain is not None and not endpoint.secure:
        raise InvalidArgumentError(f"a client certificate needs a TLS endpoint (grpcs://), not {endpoint}")
    if key is not None:
        register_secret(key.decode("ascii", "replace"), pinned=True)


def keepalive_options(interval: float | None, timeout: float) -> dict[str, int]:
    """gRPC channel arguments for HTTP/2 keepalive pings every ``interval`` seconds (None: off)."""
    if interval is None:
        return {}  # gRPC clients send no keepalive pings unless asked to
    return {
        "grpc.keepalive_time_ms": max(1, round(interval * 1000)),
        "grpc.keepalive_timeout_ms": max(1, round(timeout * 1000)),
        # A keepalive ping due while another ping (gRPC's bandwidth probe) is unanswered is not
        # sent; that ping's own timeout (a minute by default) then decides, so it gets the same.
        "grpc.http2.ping_timeout_ms": max(1, round(timeout * 1000)),
        # A stream waiting for acks or data sends nothing for long stretches: ping regardless.
        "grpc.http2.max_pings_without_data": 0,
        # Idle connections need no liveness check: the next call finds out.
        "grpc.keepalive_permit_without_calls": 0,
    }


def reconnect_backoff_options(policy: RetryPolicy) -> dict[str, int]:
    """gRPC channel arguments that make a channel's own reconnect attempts follow ``policy``'s
    backoff for transient failures (gRPC's defaults start at 1 s and grow 1.6 times up to 120 s)."""
    return {
        "grpc.initial_reconnect_backoff_ms": max(MIN_GRPC_BACKOFF_MS, round(policy.fast.base * 1000)),
        "grpc.max_reconnect_backoff_ms": max(MIN_GRPC_BACKOFF_MS, round(policy.fast.cap * 1000)),
    }


def _positive_seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not value > 0:
        raise InvalidArgumentError(f"{what} must be a positive number of seconds, got {value!r}")
    return float(value)


def operation_result(result_cls: type[M] | None) -> Callable[[Any], M | None]:
    """Parse an ``Operation``-carrying response: raise for its status, unpack its result.

    The result's ``Any`` is parsed into ``result_cls`` whatever package its type URL names.
    """

    def parse(response: Any) -> M | None:
        operation = response.operation
        raise_for_status(operation.status, operation.issues)
        if result_cls is None:
            return None
        result: M = result_cls()
        result.ParseFromString(operation.result.value)
        return result

    return parse


def status_result(response: R) -> R:
    """Parse a response that carries ``status`` and ``issues`` itself (QueryService)."""
    raise_for_status(response.status, response.issues)  # type: ignore[attr-defined]
    return response


class Transport:
    """Connection to one YDB database: channels, discovery, headers, unary calls and streams.

    ``retry`` is the policy of unary calls that are not given one; its backoff for transient
    failures also paces the channels' reconnects. ``on_retry(method, error)`` is told about every
    unary retry (for metrics). ``location`` is the client's own location, whose nodes new calls
    prefer; ``detect_location`` finds it at each discovery instead (see ``Driver``).
    """

    def __init__(
        self,
        endpoint: str | Endpoint,
        database: str | None,
        credentials: Credentials,
        *,
        root_certificates: bytes | None = None,
        certificate_chain: bytes | None = None,
        private_key: bytes | None = None,
        application_name: str | None = None,
        discovery: bool = True,
        discovery_interval: float = 60.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        channel_options: Sequence[tuple[str, Any]] | Mapping[str, Any] = (),
        keepalive_interval: float | None = DEFAULT_KEEPALIVE_INTERVAL,
        keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
        on_retry: Callable[[str, BaseException], None] | None = None,
        location: str | None = None,
        detect_location: bool = False,
    ) -> None:
        if isinstance(endpoint, Endpoint):
            parsed_endpoint, parsed_db = endpoint, None
        else:
            parsed_endpoint, parsed_db = parse_connection_string(endpoint)
        database = database or parsed_db
        if not database:
            raise InvalidArgumentError(
                "database is required: pass database='/local' or use 'grpc://host:port/?database=/local'"
            )
        if not isinstance(database, str) or not database.startswith("/"):
            raise InvalidArgumentError(f"database must be an absolute path starting with '/', got {database!r}")
        if not isinstance(credentials, Credentials):
            raise InvalidArgumentError("credentials must have an async auth_token() method")
        if isinstance(max_message_size, bool) or not isinstance(max_message_size, int):
            raise InvalidArgumentError(f"max_message_size must be an int, got {max_message_size!r}")
        if max_message_size < MIN_MAX_MESSAGE_SIZE:
            raise InvalidArgumentError(f"max_message_size must be at least {MIN_MAX_MESSAGE_SIZE} bytes")
        if keepalive_interval is not None:
            keepalive_interval = _positive_seconds(keepalive_interval, "keepalive_interval")
        keepalive_timeout = _positive_seconds(keepalive_timeout, "keepalive_timeout")
        discovery_interval = _positive_seconds(discovery_interval, "discovery_interval")
        if not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a RetryPolicy, got {retry!r}")
        if root_certificates is not None and not isinstance(root_certificates, bytes):
            raise InvalidArgumentError("root_certificates must be PEM bytes")
        _check_client_certificate(parsed_endpoint, certificate_chain, private_key)
        if application_name is not None:
            if not isinstance(application_name, str):
                raise InvalidArgumentError(f"application_name must be a string, got {application_name!r}")
            if not application_name.isascii() or not application_name.isprintable():
                raise InvalidArgumentError(f"application_name must be printable ASCII, got {application_name!r}")
        if location is not None and (not isinstance(location, str) or not location):
            raise InvalidArgumentError(f"location must be a non-empty string or None, got {location!r}")
        if not isinstance(detect_location, bool):
            raise InvalidArgumentError(f"detect_location must be True or False, got {detect_location!r}")
        if location is not None and detect_location:
            raise InvalidArgumentError("give location or detect_location=True, not both")
        if keepalive_interval is not None and keepalive_interval < MIN_SAFE_KEEPALIVE_INTERVAL:
            logger.warning(
                "keepalive_interval=%ss is below %ss: a real YDB cluster may refuse pings this frequent"
                " (GOAWAY \"too_many_pings\") and close the connection",
                keepalive_interval, MIN_SAFE_KEEPALIVE_INTERVAL,
            )
        self.endpoint = parsed_endpoint
        self.database = database.rstrip("/") or "/"
        self.credentials = credentials
        self.retry = retry
        self.max_message_size = max_message_size
        self._root_certificates = root_certificates
        self._certificate_chain = certificate_chain
        self._private_key = private_key
        self._application_name = application_name
        self._discovery = bool(discovery)
        self._discovery_interval = discovery_interval
        self._on_retry = on_retry
        options: dict[str, Any] = {
            "grpc.max_send_message_length": max_message_size,
            "grpc.max_receive_message_length": max_message_size,
            # Connections belong to this transport alone: gRPC would otherwise share them
            # process-wide, and closing one driver could break, or keep alive, another's calls.
            "grpc.use_local_subchannel_pool": 1,
            **keepalive_options(keepalive_interval, keepalive_timeout),
            **reconnect_backoff_options(retry),
        }
        options.update(dict(channel_options))
        self._channel_options = list(options.items())
        self._channels: dict[Endpoint, _Channel] = {}
        self.balancer = Balancer(self.endpoint, location=location)
        """Which endpoint each new call and stream takes (discovered nodes, pessimization, locality)."""
        self._detect_location = detect_location
        self._retired: set[_Channel] = set()
        """Replaced channels with calls still running (closed when the last one ends)."""
        self._closing: set[asyncio.Task[None]] = set()
        """Replaced channels being closed (``close`` waits for them)."""
        self._discovery_task: asyncio.Task[None] | None = None
        self._stop_discovery = asyncio.Event()
        self._wake_discovery = asyncio.Event()
        self.discovery_rounds = 0
        """Background discovery rounds finished so far, answered or not."""
        self._last_token: str | None = None
        self._closed = False
        bind_credentials(credentials, self, self._login)

    # --- lifecycle --------------------------------------------------------------------------

    @property
    def channel_options(self) -> list[tuple[str, Any]]:
        """The gRPC arguments every channel is made with: the driver's own (message sizes,
        keepalive) with the ``channel_options`` it was given over them."""
        return list(self._channel_options)

    @property
    def endpoints(self) -> list[Endpoint]:
        """The endpoints new calls are spread across (discovered, or the given one); the
        pessimized ones among them are skipped while others are healthy."""
        return self.balancer.endpoints

    @property
    def discovers(self) -> bool:
        """Whether it asks the cluster for its nodes (discovery on), so that a node id can be reached."""
        return self._discovery

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        """Raise ``ClosedError`` once closed."""
        if self._closed:
            raise ClosedError("driver is closed")

    def start(self) -> None:
        """Start discovering endpoints in the background (the first round at once); returns at once."""
        self.check_open()
        if self._discovery and self._discovery_task is None:
            self._discovery_task = asyncio.get_running_loop().create_task(
                self._discovery_loop(), name="ydb-topic-async discovery"
            )

    async def close(self) -> None:
        """Stop discovery and close every channel (their calls end); a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        await unbind_credentials(self.credentials, self)  # the credentials' background refresh for us ends
        task, self._discovery_task = self._discovery_task, None
        if task is not None:
            # A ListEndpoints call cancelled in flight would have its last event delivered after
            # this returns (see settle_cancelled_calls): let it finish, unless it takes too long.
            self._stop_discovery.set()
            self._wake_discovery.set()
            if not await run_within(asyncio.shield(task), DISCOVERY_CLOSE_GRACE):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # Channels must be closed while their event loop runs: a call freed later (after
        # asyncio.run returned) would hand its last gRPC events to a closed loop.
        channels = [slot.channel for slot in (*self._channels.values(), *self._retired)]
        self._channels, self._retired = {}, set()
        while channels:
            await channels.pop().close()
        while self._closing:
            await asyncio.wait(set(self._closing))
        await settle_cancelled_calls()

    # --- channels and headers -------------------------------------------------------------

    def _channel_for(self, endpoint: Endpoint) -> _Channel:
        slot = self._channels.get(endpoint)
        if slot is None:
            if endpoint.secure:
                creds = grpc.ssl_channel_credentials(
                    root_certificates=self._root_certificates,
                    private_key=self._private_key,
                    certificate_chain=self._certificate_chain,
                )
                channel = grpc.aio.secure_channel(endpoint.target, creds, options=self._channel_options)
            else:
                channel = grpc.aio.insecure_channel(endpoint.target, options=self._channel_options)
            slot = self._channels[endpoint] = _Channel(channel)
        return slot

    def _started(self, route: Route, call: grpc.aio.Call) -> None:
        """Count ``call`` on its channel until it ends (a retired channel closes after its last)."""
        slot = route.slot
        slot.calls += 1
        call.add_done_callback(functools.partial(self._ended, slot))

    def _ended(self, slot: _Channel, call: object) -> None:
        slot.calls -= 1
        if slot.retired and not slot.calls:
            self._close_retired(slot)

    def _retire(self, endpoint: Endpoint) -> None:
        """New calls to ``endpoint`` get a new channel; the current one closes after its last call."""
        slot = self._channels.pop(endpoint, None)
        if slot is not None:
            slot.retired = True
            self._retired.add(slot)
            if not slot.calls:
                self._close_retired(slot)

    def _close_retired(self, slot: _Channel) -> None:
        if slot not in self._retired:
            return  # the transport closed it already
        self._retired.discard(slot)
        task = asyncio.get_running_loop().create_task(slot.channel.close(), name="ydb-topic-async closing a channel")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _route(self, endpoint: Endpoint | None = None, node_id: int | None = None) -> Route:
        """Where a new call goes: ``endpoint``, node ``node_id`` when discovery knows it, or the
        balancer's choice."""
        self.check_open()
        if endpoint is None and node_id is not None:
            endpoint = self.balancer.for_node(node_id)
        if endpoint is None:
            endpoint = self.balancer.choose()
        return Route(endpoint, self._channel_for(endpoint))

    def call_failed(self, route: Route, error: BaseException) -> None:
        """A call on ``route`` failed with ``error``: a transport failure that puts the node at
        fault pessimizes it (the balancer stops choosing it), and a channel whose connection
        attempts failed is replaced, so that the next call connects at once instead of when
        gRPC's reconnect backoff ends."""
        if self._closed or not isinstance(error, TransportError) or error.code not in _NODE_FAILURES:
            return
        slot = route.slot
        state = slot.channel.get_state()
        if error.code in _FAULTS_ONLY_WHEN_DISCONNECTED and state is _READY:
            return  # still connected: the call's own deadline or error, not the node's fault
        if self.balancer.pessimize(route.endpoint):
            nodes = len(self.balancer.nodes)
            logger.log(
                logging.INFO if nodes > 1 else logging.DEBUG,
                "most endpoints are failing (%s of %s): rediscovering now", len(self.balancer.pessimized), nodes,
            )
            self._wake_discovery.set()
        if state is _FAILED_TO_CONNECT and self._channels.get(route.endpoint) is slot:
            # New calls get a fresh channel, which connects at once; the calls on this one fail
            # (it is not connected, and they do not wait for it to be), and then it is closed.
            self._retire(route.endpoint)

    def call_succeeded(self, route: Route) -> None:
        """A call on ``route`` succeeded (a unary answer, a stream's handshake): its endpoint
        is chosen again if it was pessimized."""
        if self.balancer.is_pessimized(route.endpoint):
            self.balancer.restore(route.endpoint)

    @property
    def current_token(self) -> str | None:
        """The token of the latest call (None before any, or without one)."""
        return self._last_token

    async def auth_token(self) -> str | None:
        """The credentials' current token, checked, and masked from then on in the SDK's logs."""
        token = await fetch_token(self.credentials, self)
        if token != self._last_token:
            self._last_token = token
            register_secret(token)
        return token

    async def metadata(self, *, with_token: bool = True) -> list[tuple[str, str]]:
        """The YDB headers for a new call."""
        md = [("x-ydb-database", self.database), ("x-ydb-sdk-build-info", _SDK_BUILD_INFO)]
        if self._application_name:
            md.append(("x-ydb-application-name", self._application_name))
        if with_token:
            token = await self.auth_token()
            if token:
                md.append(("x-ydb-auth-ticket", token))
        return md

    # --- unary calls ------------------------------------------------------------------------

    async def unary(
        self,
        path: str,
        request: Message,
        response_cls: type[Message],
        parse: Callable[[Any], R],
        *,
        timeout: float | None = None,
        idempotent: bool = False,
        retry: RetryPolicy | None = None,
        with_token: bool = True,
        endpoint: Endpoint | None = None,
    ) -> R:
        """Call a unary method and return ``parse(response)``, retrying by ``retry`` (the
        transport's policy by default) while the failure allows it.

        ``path`` is the full method path (``/Ydb.Topic.V1.TopicService/DescribeTopic``);
        ``parse`` raises the ``ServerError`` of a non-success status. ``timeout`` bounds the whole
        call, retries, backoff and token fetching included: when it passes, the call raises
        ``OperationTimeoutError`` (naming the last failure, if any). Without a ``timeout`` the
        policy's ``max_elapsed`` bounds the whole call the same way, an attempt that never gets
        an answer included (a policy without one that still limits its attempts, such as
        ``RetryPolicy.no_retries()``, gets the transport's policy's, or 60 s); only a policy
        that retries forever leaves the call unbounded.
        """
        self.check_open()
        method = path.rsplit("/", 1)[-1]
        policy = retry or self.retry
        bound, by_budget = self._call_bound(timeout, policy)
        loop = asyncio.get_running_loop()
        deadline = None if bound is None else loop.time() + bound
        last: BaseException | None = None

        async def attempt() -> R:
            remaining = None if deadline is None else deadline - loop.time()
            routes: list[Route] = []
            try:
                if remaining is not None and remaining <= 0:
                    raise TimeoutError
                response = await wait_within(
                    self._unary_attempt(path, request, response_cls, remaining, with_token, endpoint, routes),
                    remaining,
                )
                return parse(response)
            except DeadlineExceededError as exc:
                if remaining is not None:
                    raise _timed_out(method, bound, by_budget, exc) from exc  # gRPC applied our deadline
                raise
            except YdbTopicError:
                raise
            except TimeoutError:  # wait_within's: the deadline passed during an attempt
                if routes:
                    self.call_failed(routes[0], DeadlineExceededError("the call's deadline passed"))
                raise _timed_out(method, bound, by_budget, last) from last

        def before_retry(error: BaseException, delay: float) -> None:
            nonlocal last
            if deadline is not None and loop.time() + delay >= deadline:
                raise _timed_out(method, bound, by_budget, error) from error
            last = error
            logger.debug("retrying %s in %.3fs after %r", method, delay, error)
            if self._on_retry is not None:
                self._on_retry(method, error)

        return await retry_call(attempt, policy, idempotent=idempotent, on_retry=before_retry)

    def _call_bound(self, timeout: float | None, policy: RetryPolicy) -> tuple[float | None, bool]:
        """How long a unary call may take in all, and whether that is a retry budget (not the
        caller's ``timeout``)."""
        if timeout is not None:
            return timeout, False
        if policy.max_elapsed is not None:
            return policy.max_elapsed, True
        if policy.max_attempts is not None:  # a few attempts, each of which could wait forever
            budget = self.retry.max_elapsed if self.retry.max_elapsed is not None else DEFAULT_RETRY.max_elapsed
            return budget, True
        return None, False

    async def _unary_attempt(
        self,
        path: str,
        request: Message,
        response_cls: type[Message],
        timeout: float | None,
        with_token: bool,
        endpoint: Endpoint | None,
        routes: list[Route],
    ) -> Any:
        metadata = await self.metadata(with_token=with_token)
        route = self._route(endpoint)
        routes.append(route)
        method = route.channel.unary_unary(
            path,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_cls.FromString,
        )
        call = method(request, metadata=metadata, timeout=timeout)
        self._started(route, call)
        try:
            response = await call
        except grpc.aio.AioRpcError as exc:
            error = self._explained(error_from_grpc(exc))
        except asyncio.CancelledError as exc:
            release_frames(exc)
            raise
        else:
            self.call_succeeded(route)
            return response
        self.call_failed(route, error)
        raise error  # outside the except block: the gRPC error (and its call) is not kept as context

    def _explained(self, error: TransportError) -> TransportError:
        """``error``, with a hint when a TLS server closed the connection of a client without a
        certificate: a server that requires client certificates (mutual TLS) does just that, and
        gRPC reports no more than "Socket closed"."""
        if (
            isinstance(error, ConnectionLostError)
            and self.endpoint.secure
            and self._certificate_chain is None
            and _TLS_CLOSED in error.details
        ):
            return ConnectionLostError(error.details + _MTLS_HINT, error.code)
        return error

    async def call_operation(
        self,
        path: str,
        request: Message,
        response_cls: type[Message],
        result_cls: type[M] | None,
        **options: Any,
    ) -> M | None:
        """``unary`` for an ``Operation``-returning method: the unpacked result (None without
        ``result_cls``). ``options`` are those of ``unary``."""
        return await self.unary(path, request, response_cls, operation_result(result_cls), **options)

    # --- streams ------------------------------------------------------------------------------

    async def open_stream(
        self,
        path: str,
        request_cls: type[Req],
        response_cls: type[Resp],
        *,
        node_id: int | None = None,
        deserializer: Callable[[bytes], Resp] | None = None,
    ) -> tuple[grpc.aio.StreamStreamCall[Req, Resp], Route]:
        """Start a bidirectional stream with the YDB headers (see ``BidiStream``, which wraps it);
        returns the call and its route, to report its failures and its handshake to
        (``call_failed``, ``call_succeeded``).

        With ``node_id``, the stream goes to that node's discovered endpoint (the balancer's
        choice when the node is unknown: the cluster forwards it, only less efficiently).
        ``deserializer`` parses each response instead of ``response_cls.FromString``.
        """
        self.check_open()
        metadata = await self.metadata()
        route = self._route(node_id=node_id)
        method = route.channel.stream_stream(
            path,
            request_serializer=request_cls.SerializeToString,
            response_deserializer=deserializer or response_cls.FromString,
        )
        call: grpc.aio.StreamStreamCall[Req, Resp] = method(metadata=metadata)
        self._started(route, call)
        return call, route

    async def open_server_stream(
        self, path: str, request: Message, response_cls: type[Message], *, node_id: int | None = None
    ) -> grpc.aio.UnaryStreamCall[Any, Any]:
        """Start a server-streaming call with the YDB headers; the caller reads and cancels it.
        ``node_id`` routes it as for ``open_stream``."""
        self.check_open()
        metadata = await self.metadata()
        route = self._route(node_id=node_id)
        method = route.channel.unary_stream(
            path,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_cls.FromString,
        )
        call: grpc.aio.UnaryStreamCall[Any, Any] = method(request, metadata=metadata)
        self._started(route, call)
        return call

    # --- auth and discovery -----------------------------------------------------------------

    async def _login(self, user: str, password: str) -> str:
        result = await self.call_operation(
            "/Ydb.Auth.V1.AuthService/Login",
            ydb_auth_pb2.LoginRequest(user=user, password=password),
            ydb_auth_pb2.LoginResponse,
            ydb_auth_pb2.LoginResult,
            idempotent=True,
            with_token=False,
            # Any node logs in: the balancer's choice, so that the given endpoint going away
            # (a seed node or load balancer that is down) does not end every token's renewal.
            timeout=LOGIN_TIMEOUT,
        )
        assert result is not None
        register_secret(result.token)
        return result.token

    async def discover(
        self, *, timeout: float | None, retry: RetryPolicy | None = None, endpoint: Endpoint | None = None
    ) -> None:
        """Ask the given endpoint (or ``endpoint``) for the cluster's nodes and use them for new
        calls (with discovery off, only check that it answers)."""
        result = await self.call_operation(
            "/Ydb.Discovery.V1.DiscoveryService/ListEndpoints",
            ydb_discovery_pb2.ListEndpointsRequest(database=self.database),
            ydb_discovery_pb2.ListEndpointsResponse,
            ydb_discovery_pb2.ListEndpointsResult,
            timeout=timeout,
            idempotent=True,
            retry=retry or RetryPolicy.no_retries(),
            endpoint=endpoint or self.endpoint,
        )
        assert result is not None
        if self._discovery:
            await self._use_endpoints(result)

    async def _use_endpoints(self, result: ydb_discovery_pb2.ListEndpointsResult) -> None:
        nodes: list[Node] = []
        for info in result.endpoints:
            if info.address and info.port and (
                not info.service or "topic_service" in info.service or "topic" in info.service
            ):
                endpoint = Endpoint(info.address, info.port, self.endpoint.secure or info.ssl)
                nodes.append(Node(endpoint, info.location, info.node_id))
        if not nodes or self._closed:
            return
        location = None
        if self._detect_location:
            location = await nearest_location(nodes, timeout=DETECT_TIMEOUT) or result.self_location or None
            if self.closed:  # closed during the race
                return
        for endpoint in self.balancer.update(nodes, location=location):
            if endpoint != self.endpoint:
                # Streams still open to a node no longer listed end when they end (a dead node's
                # have failed already); only then is its channel closed.
                self._retire(endpoint)
        logger.debug(
            "discovered endpoints: %s%s",
            ", ".join(f"{node.endpoint} ({node.location or 'no location'})" for node in nodes),
            f"; preferring location {self.balancer.location}" if self.balancer.location else "",
        )

    async def _discovery_round(self) -> None:
        try:
            await self.discover(timeout=DISCOVERY_TIMEOUT)
        except (TransportError, OperationTimeoutError):
            others = [e for e in self.balancer.choices if e != self.endpoint]
            if not others or self._closed:
                raise
            # The given endpoint does not answer: any node of the cluster can list the others.
            await self.discover(timeout=DISCOVERY_TIMEOUT, endpoint=random.choice(others))

    async def _discovery_loop(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while not self._stop_discovery.is_set():
            started = loop.time()
            self._wake_discovery.clear()
            try:
                await self._discovery_round()
            except YdbTopicError as exc:
                if self._closed:
                    return
                failures += 1
                wait = min(self._discovery_interval, DISCOVERY_RETRY.delay(failures - 1))
                log = logger.warning if failures == 1 else logger.debug
                log(
                    "endpoint discovery failed, keeping %s; trying again in %.1fs: %s",
                    ", ".join(map(str, self.balancer.endpoints)), wait, exc,
                )
            else:
                if failures:
                    logger.info("endpoint discovery answered again after %d failed rounds", failures)
                failures = 0
                wait = self._discovery_interval
            self.discovery_rounds += 1
            with contextlib.suppress(TimeoutError):
                await wait_within(self._wake_discovery.wait(), wait)
            # Woken early (most endpoints failing): still no sooner than a gap after this round.
            gap = REDISCOVERY_GAP - (loop.time() - started)
            if gap > 0 and not self._stop_discovery.is_set():
                with contextlib.suppress(TimeoutError):
                    await wait_within(self._stop_discovery.wait(), gap)

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
                f"no YDB endpoint answered at {self.endpoint} (database {self.database}) within {timeout}s"
                + (f"; last error: {cause}" if cause is not None else "")
            ) from cause


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


def _timed_out(
    method: str, bound: float | None, by_budget: bool, last: BaseException | None
) -> OperationTimeoutError:
    assert bound is not None
    budget = " (the retry policy's max_elapsed: pass timeout= to choose another bound)" if by_budget else ""
    return OperationTimeoutError(
        f"{method} did not complete within {bound:g}s{budget}"
        + (f" (last error: {last})" if last is not None else "")
    )
