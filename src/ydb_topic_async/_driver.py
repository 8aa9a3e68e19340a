"""The Driver: channels, YDB headers, endpoint discovery, authentication and unary calls."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import anyio
import grpc
import grpc.aio

from ._credentials import AnonymousCredentials, Credentials, StaticCredentials
from ._errors import (
    ClosedError,
    InvalidArgumentError,
    OperationTimeoutError,
    YdbTopicError,
    error_from_grpc,
    raise_for_status,
)
from ._proto import ydb_auth_pb2, ydb_discovery_pb2
from ._retry import DEFAULT_RETRY, RetryPolicy, retry_call
from ._version import __version__
from .observability.logging import register_secret, sdk_logger
from .observability.metrics import MetricsRecorder, NoopMetrics, active_recorder
from .observability.tracing import OpenTelemetryTracing, resolve_tracing

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from .query import QueryClient
    from .topic import TopicClient

logger = sdk_logger("driver")

M = TypeVar("M", bound="Message")

DEFAULT_MAX_MESSAGE_SIZE = 64 * 1024 * 1024
"""gRPC send/receive limit set on every channel; topic write requests stay below it."""

DEFAULT_KEEPALIVE_INTERVAL = 10.0
"""Seconds between HTTP/2 keepalive pings on a connection with open calls."""
DEFAULT_KEEPALIVE_TIMEOUT = 10.0
"""Seconds a keepalive ping may go unanswered before the connection counts as dead."""
MIN_SAFE_KEEPALIVE_INTERVAL = 10.0
"""Servers may refuse more frequent pings: gRPC's default server policy answers a client that
pings more often than it allows with GOAWAY "too_many_pings" (YDB's official SDK pings every 10 s)."""

_SDK_BUILD_INFO = f"ydb-topic-async/{__version__}"


def _keepalive_options(interval: float | None, timeout: float) -> dict[str, int]:
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


def parse_connection_string(value: str) -> tuple[Endpoint, str | None]:
    """Split ``grpc[s]://host:port/?database=/local`` (or ``grpc://host:port/local``) into parts.

    A bare ``host:port`` means plain ``grpc://``. The database is None when the string has none.
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError("endpoint must be a non-empty string like 'grpc://localhost:2136'")
    text = value.strip()
    if "://" not in text:
        text = "grpc://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("grpc", "grpcs"):
        raise InvalidArgumentError(f"unsupported endpoint scheme {parts.scheme!r} in {value!r}: use grpc:// or grpcs://")
    try:
        port = parts.port
    except ValueError as exc:
        raise InvalidArgumentError(f"bad port in endpoint {value!r}") from exc
    if not parts.hostname:
        raise InvalidArgumentError(f"endpoint {value!r} has no host")
    secure = parts.scheme == "grpcs"
    database: str | None = None
    query = parse_qs(parts.query)
    if "database" in query:
        database = query["database"][0]
    elif parts.path and parts.path != "/":
        database = parts.path
    return Endpoint(parts.hostname, port or (2135 if secure else 2136), secure), database


class Driver:
    """Connection to one YDB database. Open it with ``async with Driver(...) as driver``.

    ``endpoint`` is ``grpc://host:port`` or ``grpcs://host:port`` (TLS), optionally a whole
    connection string with ``?database=``. ``root_certificates`` (PEM bytes) replaces the
    system trust store for TLS. With ``discovery`` on, the driver asks the endpoint for the
    cluster's nodes (``ListEndpoints``) and spreads new streams across them; when discovery
    fails it keeps using the given endpoint. Unary idempotent calls are retried by ``retry``.
    ``channel_options`` are extra gRPC channel arguments; they override the driver's own.

    ``keepalive_interval`` (seconds, ``None`` to switch it off) is how often each connection
    sends an HTTP/2 ping while calls are open; a ping unanswered for ``keepalive_timeout``
    seconds fails the connection, so a server that vanished without closing the socket (a
    half-open TCP connection) breaks the streams with a retriable ``ConnectionLostError`` and
    writers and readers reconnect, instead of waiting forever for acks or data. Keep the
    interval at 10 seconds or more against a real cluster: gRPC servers may treat more frequent
    pings as abuse and close the connection with GOAWAY "too_many_pings". A shorter interval is
    accepted (tests against the local server use one) but logged as a WARNING.

    Observability: ``metrics`` (a ``MetricsRecorder``) receives the counters and latencies of
    every writer and reader made from this driver; ``tracing`` (``True`` or an
    ``OpenTelemetryTracing``) traces their writes and reads with OpenTelemetry.
    """

    def __init__(
        self,
        endpoint: str,
        database: str | None = None,
        credentials: Credentials | None = None,
        *,
        root_certificates: bytes | None = None,
        application_name: str | None = None,
        discovery: bool = True,
        discovery_interval: float = 60.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        channel_options: Sequence[tuple[str, Any]] = (),
        keepalive_interval: float | None = DEFAULT_KEEPALIVE_INTERVAL,
        keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
        metrics: MetricsRecorder | None = None,
        tracing: bool | OpenTelemetryTracing | None = None,
    ) -> None:
        self._endpoint, parsed_db = parse_connection_string(endpoint)
        database = database or parsed_db
        if not database:
            raise InvalidArgumentError(
                "database is required: pass database='/local' or use 'grpc://host:port/?database=/local'"
            )
        if not database.startswith("/"):
            raise InvalidArgumentError(f"database must be an absolute path starting with '/', got {database!r}")
        if credentials is not None and not isinstance(credentials, Credentials):
            raise InvalidArgumentError("credentials must have an async auth_token() method")
        if max_message_size < 1024:
            raise InvalidArgumentError("max_message_size is too small")
        if keepalive_interval is not None and not keepalive_interval > 0:
            raise InvalidArgumentError(
                f"keepalive_interval must be positive seconds or None, got {keepalive_interval!r}"
            )
        if not keepalive_timeout > 0:
            raise InvalidArgumentError(f"keepalive_timeout must be positive seconds, got {keepalive_timeout!r}")
        if keepalive_interval is not None and keepalive_interval < MIN_SAFE_KEEPALIVE_INTERVAL:
            logger.warning(
                "keepalive_interval=%ss is below %ss: a real YDB cluster may refuse pings this frequent"
                " (GOAWAY \"too_many_pings\") and close the connection",
                keepalive_interval, MIN_SAFE_KEEPALIVE_INTERVAL,
            )
        if metrics is not None and not isinstance(metrics, MetricsRecorder):
            raise InvalidArgumentError(
                "metrics must implement every MetricsRecorder method (subclass NoopMetrics to override only some)"
            )
        self.metrics: MetricsRecorder = metrics or NoopMetrics()
        """The metrics recorder given at construction (a ``NoopMetrics`` when none was)."""
        self._metrics = active_recorder(metrics)
        self.tracing = resolve_tracing(tracing)
        """The OpenTelemetry tracing of this driver's writers and readers, or None when off."""
        self._last_token: str | None = None
        self.database = database.rstrip("/") or "/"
        self.credentials: Credentials = credentials or AnonymousCredentials()
        if isinstance(self.credentials, StaticCredentials):
            self.credentials._bind(self)
        self.retry = retry
        self.max_message_size = max_message_size
        self._root_certificates = root_certificates
        self._application_name = application_name
        self._discovery = discovery
        self._discovery_interval = discovery_interval
        options: dict[str, Any] = {
            "grpc.max_send_message_length": max_message_size,
            "grpc.max_receive_message_length": max_message_size,
            # Connections belong to this driver alone: gRPC would otherwise share them process-wide,
            # and closing one driver could break, or keep alive, another's calls.
            "grpc.use_local_subchannel_pool": 1,
            **_keepalive_options(keepalive_interval, keepalive_timeout),
        }
        options.update(channel_options)
        self._channel_options = list(options.items())
        self._channels: dict[Endpoint, grpc.aio.Channel] = {}
        self._active: list[Endpoint] = [self._endpoint]
        self._node_endpoints: dict[int, Endpoint] = {}
        """Discovered endpoints by YDB node id, for calls that must reach one node."""
        self._round_robin = itertools.count()
        self._discovery_task: asyncio.Task[None] | None = None
        self._opened = False
        self._closing = False
        self._closed = False
        self._topic: TopicClient | None = None
        self._query: QueryClient | None = None

    # --- lifecycle ------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The endpoint given at construction."""
        return str(self._endpoint)

    @property
    def endpoints(self) -> list[str]:
        """The endpoints new streams are spread across (discovered, or the given one)."""
        return [str(e) for e in self._active]

    async def __aenter__(self) -> Driver:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Run the first discovery (errors are logged, not raised) and start periodic discovery."""
        if self._closed:
            raise ClosedError("driver is closed")
        if self._opened:
            return
        self._opened = True
        if self._discovery:
            with contextlib.suppress(YdbTopicError):
                await self._discover(timeout=5.0)
            self._discovery_task = asyncio.get_running_loop().create_task(
                self._discovery_loop(), name="ydb-topic-async discovery"
            )

    async def close(self) -> None:
        """Close the writers and readers made from this driver, then discovery and every channel.

        Writers are closed first, while the channels still work, so that they can flush (and
        reconnect for) what they accepted. If one of them fails, the rest are still closed and
        every channel is released before the first such error is raised. Transactions still
        open are rolled back and query sessions deleted before that. Closing ends with one
        garbage-collection pass (``gc.collect()``), so that no gRPC call outlives the event loop.
        """
        if self._closed or self._closing:
            return
        self._closing = True
        try:
            # Open transactions are rolled back first: that also stops their transactional writers.
            if self._query is not None:
                await self._query._close()
            if self._topic is not None:
                await self._topic._close()
        finally:
            self._closed = True
            discovery, self._discovery_task = self._discovery_task, None
            if discovery is not None:
                discovery.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await discovery
            del discovery  # the task keeps its CancelledError, whose traceback holds this frame
            # Channels must be freed while their event loop runs: one freed later by the garbage
            # collector (say, after asyncio.run returned) delivers its last gRPC events to a closed
            # loop. So no reference to them may outlive this call, not even in this frame.
            channels, self._channels = list(self._channels.values()), {}
            while channels:
                await channels.pop().close()
            # gRPC's completion queue hands each call's last events to the loop the call ran on:
            # a call freed only later, by the cyclic garbage collector (an exception's traceback
            # can keep one alive), would hand them to a loop that asyncio.run has closed by then.
            # Free such calls now, while this loop still runs and can take their events.
            gc.collect()
            await asyncio.sleep(0)

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed

    async def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait until the database answers; raise ``OperationTimeoutError`` when nothing does in time."""
        self._check_open()
        last: BaseException | None = None
        with anyio.move_on_after(timeout):
            while True:
                try:
                    await self._list_endpoints(timeout=max(0.5, min(timeout, 5.0)))
                    return
                except YdbTopicError as exc:
                    last = exc
                    if not exc.is_retriable(idempotent=True):
                        raise
                await anyio.sleep(0.1)
        raise OperationTimeoutError(
            f"no YDB endpoint answered at {self._endpoint} (database {self.database}) within {timeout}s"
            + (f"; last error: {last}" if last else "")
        )

    # --- clients --------------------------------------------------------------------

    @property
    def topic(self) -> TopicClient:
        """Topic administration, writers and readers."""
        if self._topic is None:
            from .topic import TopicClient

            self._topic = TopicClient(self)
        return self._topic

    @property
    def query(self) -> QueryClient:
        """Query sessions and transactions (no YQL execution)."""
        if self._query is None:
            from .query import QueryClient

            self._check_open()
            self._query = QueryClient(self)
        return self._query

    # --- plumbing used by the clients -------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("driver is closed")

    def _channel_for(self, endpoint: Endpoint) -> grpc.aio.Channel:
        channel = self._channels.get(endpoint)
        if channel is None:
            if endpoint.secure:
                creds = grpc.ssl_channel_credentials(root_certificates=self._root_certificates)
                channel = grpc.aio.secure_channel(endpoint.target, creds, options=self._channel_options)
            else:
                channel = grpc.aio.insecure_channel(endpoint.target, options=self._channel_options)
            self._channels[endpoint] = channel
        return channel

    def _channel(self) -> grpc.aio.Channel:
        """A channel for a new call, round-robin over the active endpoints."""
        self._check_open()
        active = self._active or [self._endpoint]
        return self._channel_for(active[next(self._round_robin) % len(active)])

    async def _metadata(self, *, with_token: bool = True) -> list[tuple[str, str]]:
        """The YDB headers for a new call."""
        md = [("x-ydb-database", self.database), ("x-ydb-sdk-build-info", _SDK_BUILD_INFO)]
        if self._application_name:
            md.append(("x-ydb-application-name", self._application_name))
        if with_token:
            token = await self._auth_token()
            if token:
                md.append(("x-ydb-auth-ticket", token))
        return md

    async def _auth_token(self) -> str | None:
        """The credentials' current token, masked from then on in the SDK's logs."""
        token = await self.credentials.auth_token()
        if token != self._last_token:
            self._last_token = token
            register_secret(token)
        return token

    async def _unary(
        self,
        path: str,
        request: Message,
        response_cls: type[Message],
        result_cls: type[M] | None,
        *,
        timeout: float | None = None,
        idempotent: bool = False,
        retry: RetryPolicy | None = None,
        with_token: bool = True,
        endpoint: Endpoint | None = None,
    ) -> M | None:
        """Call a unary ``Operation``-returning method; return its unpacked result.

        ``path`` is the full method path (``/Ydb.Topic.V1.TopicService/DescribeTopic``). A
        non-success status raises the matching ``ServerError``. The result's ``Any`` is parsed
        into ``result_cls`` whatever package its type URL names.
        """
        self._check_open()
        operation = path.rsplit("/", 1)[-1]

        def on_retry(error: BaseException, delay: float) -> None:
            logger.debug("retrying %s in %.3fs after %r", operation, delay, error)
            if self._metrics is not None:
                self._metrics.retry(operation, error)

        async def attempt() -> M | None:
            channel = self._channel_for(endpoint) if endpoint else self._channel()
            method = channel.unary_unary(
                path,
                request_serializer=type(request).SerializeToString,
                response_deserializer=response_cls.FromString,
            )
            metadata = await self._metadata(with_token=with_token)
            try:
                response: Any = await method(request, metadata=metadata, timeout=timeout)
            except grpc.aio.AioRpcError as exc:
                raise error_from_grpc(exc) from None
            operation = response.operation
            raise_for_status(operation.status, operation.issues)
            if result_cls is None:
                return None
            result: M = result_cls()
            result.ParseFromString(operation.result.value)
            return result

        return await retry_call(attempt, retry or self.retry, idempotent=idempotent, on_retry=on_retry)

    def _stream(
        self, path: str, request_cls: type[Message], response_cls: type[Message], node_id: int | None = None
    ) -> Any:
        """A stream-stream multicallable for ``path`` on the next channel (on node ``node_id``'s
        endpoint when discovery knows it); call it with metadata."""
        endpoint = self._node_endpoints.get(node_id) if node_id is not None else None
        channel = self._channel_for(endpoint) if endpoint is not None else self._channel()
        return channel.stream_stream(
            path,
            request_serializer=request_cls.SerializeToString,
            response_deserializer=response_cls.FromString,
        )

    async def _open_stream(
        self, path: str, request_cls: type[Message], response_cls: type[Message], *, node_id: int | None = None
    ) -> grpc.aio.StreamStreamCall[Any, Any]:
        """Start a bidirectional stream with the YDB headers; the caller writes, reads and cancels it.

        With ``node_id``, the stream goes to that node's discovered endpoint (any endpoint when
        the node is unknown: the cluster forwards it, only less efficiently)."""
        self._check_open()
        method = self._stream(path, request_cls, response_cls, node_id)
        call: grpc.aio.StreamStreamCall[Any, Any] = method(metadata=await self._metadata())
        return call

    async def _login(self, user: str, password: str) -> str:
        request = ydb_auth_pb2.LoginRequest(user=user, password=password)
        result = await self._unary(
            "/Ydb.Auth.V1.AuthService/Login",
            request,
            ydb_auth_pb2.LoginResponse,
            ydb_auth_pb2.LoginResult,
            idempotent=True,
            with_token=False,
            endpoint=self._endpoint,
            timeout=10.0,
        )
        assert result is not None
        register_secret(result.token)
        return result.token

    # --- discovery ----------------------------------------------------------------------

    async def _list_endpoints(self, timeout: float) -> ydb_discovery_pb2.ListEndpointsResult:
        result = await self._unary(
            "/Ydb.Discovery.V1.DiscoveryService/ListEndpoints",
            ydb_discovery_pb2.ListEndpointsRequest(database=self.database),
            ydb_discovery_pb2.ListEndpointsResponse,
            ydb_discovery_pb2.ListEndpointsResult,
            timeout=timeout,
            idempotent=True,
            retry=RetryPolicy.no_retries(),
            endpoint=self._endpoint,
        )
        assert result is not None
        return result

    async def _discover(self, timeout: float) -> None:
        result = await self._list_endpoints(timeout)
        found: list[Endpoint] = []
        by_node: dict[int, Endpoint] = {}
        for info in result.endpoints:
            if info.address and info.port and (
                not info.service or "topic_service" in info.service or "topic" in info.service
            ):
                endpoint = Endpoint(info.address, info.port, self._endpoint.secure or info.ssl)
                found.append(endpoint)
                if info.node_id:
                    by_node[info.node_id] = endpoint
        if found:
            self._active = found
            self._node_endpoints = by_node
            stale = [e for e in self._channels if e not in found and e != self._endpoint]
            for endpoint in stale:
                # In-flight calls on a dropped channel fail and are retried elsewhere.
                await self._channels.pop(endpoint).close()
        logger.debug("discovered endpoints: %s", ", ".join(map(str, self._active)))

    async def _discovery_loop(self) -> None:
        while True:
            await anyio.sleep(self._discovery_interval)
            try:
                await self._discover(timeout=10.0)
            except YdbTopicError as exc:
                logger.warning("endpoint discovery failed, keeping %s: %s", self.endpoints, exc)

    def __repr__(self) -> str:
        return f"Driver(endpoint={str(self._endpoint)!r}, database={self.database!r})"
