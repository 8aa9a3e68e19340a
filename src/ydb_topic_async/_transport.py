"""The transport: channels and endpoint discovery, request headers and auth, unary calls with a
total deadline across retries, and opening streams.

Everything that talks to the network goes through one ``Transport`` (a ``Driver`` owns it):
topic administration, writers and readers, query sessions and transactions, and the login of
``StaticCredentials``. Options are checked once, here, when it is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import grpc
import grpc.aio

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
from ._retry import DEFAULT_RETRY, RetryPolicy, retry_call
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

_SDK_BUILD_INFO = f"ydb-topic-async/{__version__}"
_TLS_CLOSED = "Socket closed"
_MTLS_HINT = (
    " (the server closed the TLS connection: if it requires a client certificate, pass the driver"
    " certificate_chain and private_key, or set YDB_CLIENT_CERT_FILE and YDB_CLIENT_CERT_KEY_FILE)"
)


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
        register_secret(key.decode("ascii", "replace"))


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

    ``retry`` is the policy of unary calls that are not given one. ``on_retry(method, error)``
    is told about every unary retry (for metrics).
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
        }
        options.update(dict(channel_options))
        self._channel_options = list(options.items())
        self._channels: dict[Endpoint, grpc.aio.Channel] = {}
        self._active: list[Endpoint] = [self.endpoint]
        self._node_endpoints: dict[int, Endpoint] = {}
        """Discovered endpoints by YDB node id, for calls that must reach one node."""
        self._round_robin = itertools.count()
        self._discovery_task: asyncio.Task[None] | None = None
        self._stop_discovery = asyncio.Event()
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
        """The endpoints new calls are spread across (discovered, or the given one)."""
        return list(self._active)

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
            if not await run_within(asyncio.shield(task), DISCOVERY_CLOSE_GRACE):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # Channels must be closed while their event loop runs: a call freed later (after
        # asyncio.run returned) would hand its last gRPC events to a closed loop.
        channels, self._channels = list(self._channels.values()), {}
        while channels:
            await channels.pop().close()
        await settle_cancelled_calls()

    # --- channels and headers -------------------------------------------------------------

    def _channel_for(self, endpoint: Endpoint) -> grpc.aio.Channel:
        channel = self._channels.get(endpoint)
        if channel is None:
            if endpoint.secure:
                creds = grpc.ssl_channel_credentials(
                    root_certificates=self._root_certificates,
                    private_key=self._private_key,
                    certificate_chain=self._certificate_chain,
                )
                channel = grpc.aio.secure_channel(endpoint.target, creds, options=self._channel_options)
            else:
                channel = grpc.aio.insecure_channel(endpoint.target, options=self._channel_options)
            self._channels[endpoint] = channel
        return channel

    def _channel(self, endpoint: Endpoint | None = None, node_id: int | None = None) -> grpc.aio.Channel:
        """The channel of ``endpoint``, of node ``node_id`` when discovery knows it, or the next
        active endpoint's (round robin)."""
        self.check_open()
        if endpoint is None and node_id is not None:
            endpoint = self._node_endpoints.get(node_id)
        if endpoint is None:
            active = self._active or [self.endpoint]
            endpoint = active[next(self._round_robin) % len(active)]
        return self._channel_for(endpoint)

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
        ``OperationTimeoutError`` (naming the last failure, if any).
        """
        self.check_open()
        method = path.rsplit("/", 1)[-1]
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        last: BaseException | None = None

        async def attempt() -> R:
            remaining = None if deadline is None else deadline - loop.time()
            try:
                if remaining is not None and remaining <= 0:
                    raise TimeoutError
                response = await wait_within(
                    self._unary_attempt(path, request, response_cls, remaining, with_token, endpoint), remaining
                )
                return parse(response)
            except DeadlineExceededError as exc:
                if remaining is not None:
                    raise _timed_out(method, timeout, exc) from exc  # gRPC applied our deadline
                raise
            except YdbTopicError:
                raise
            except TimeoutError:  # wait_within's: the deadline passed during an attempt
                raise _timed_out(method, timeout, last) from last

        def before_retry(error: BaseException, delay: float) -> None:
            nonlocal last
            if deadline is not None and loop.time() + delay >= deadline:
                raise _timed_out(method, timeout, error) from error
            last = error
            logger.debug("retrying %s in %.3fs after %r", method, delay, error)
            if self._on_retry is not None:
                self._on_retry(method, error)

        return await retry_call(attempt, retry or self.retry, idempotent=idempotent, on_retry=before_retry)

    async def _unary_attempt(
        self,
        path: str,
        request: Message,
        response_cls: type[Message],
        timeout: float | None,
        with_token: bool,
        endpoint: Endpoint | None,
    ) -> Any:
        metadata = await self.metadata(with_token=with_token)
        method = self._channel(endpoint).unary_unary(
            path,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_cls.FromString,
        )
        try:
            return await method(request, metadata=metadata, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            error = self._explained(error_from_grpc(exc))
        except asyncio.CancelledError as exc:
            release_frames(exc)
            raise
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
    ) -> grpc.aio.StreamStreamCall[Req, Resp]:
        """Start a bidirectional stream with the YDB headers (see ``BidiStream``, which wraps it).

        With ``node_id``, the stream goes to that node's discovered endpoint (any endpoint when
        the node is unknown: the cluster forwards it, only less efficiently). ``deserializer``
        parses each response instead of ``response_cls.FromString``.
        """
        self.check_open()
        metadata = await self.metadata()
        method = self._channel(node_id=node_id).stream_stream(
            path,
            request_serializer=request_cls.SerializeToString,
            response_deserializer=deserializer or response_cls.FromString,
        )
        call: grpc.aio.StreamStreamCall[Req, Resp] = method(metadata=metadata)
        return call

    async def open_server_stream(
        self, path: str, request: Message, response_cls: type[Message]
    ) -> grpc.aio.UnaryStreamCall[Any, Any]:
        """Start a server-streaming call with the YDB headers; the caller reads and cancels it."""
        self.check_open()
        metadata = await self.metadata()
        method = self._channel().unary_stream(
            path,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_cls.FromString,
        )
        call: grpc.aio.UnaryStreamCall[Any, Any] = method(request, metadata=metadata)
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
            endpoint=self.endpoint,
            timeout=LOGIN_TIMEOUT,
        )
        assert result is not None
        register_secret(result.token)
        return result.token

    async def discover(self, *, timeout: float | None, retry: RetryPolicy | None = None) -> None:
        """Ask the given endpoint for the cluster's nodes and use them for new calls (with
        discovery off, only check that it answers)."""
        result = await self.call_operation(
            "/Ydb.Discovery.V1.DiscoveryService/ListEndpoints",
            ydb_discovery_pb2.ListEndpointsRequest(database=self.database),
            ydb_discovery_pb2.ListEndpointsResponse,
            ydb_discovery_pb2.ListEndpointsResult,
            timeout=timeout,
            idempotent=True,
            retry=retry or RetryPolicy.no_retries(),
            endpoint=self.endpoint,
        )
        assert result is not None
        if self._discovery:
            await self._use_endpoints(result)

    async def _use_endpoints(self, result: ydb_discovery_pb2.ListEndpointsResult) -> None:
        found: list[Endpoint] = []
        by_node: dict[int, Endpoint] = {}
        for info in result.endpoints:
            if info.address and info.port and (
                not info.service or "topic_service" in info.service or "topic" in info.service
            ):
                endpoint = Endpoint(info.address, info.port, self.endpoint.secure or info.ssl)
                found.append(endpoint)
                if info.node_id:
                    by_node[info.node_id] = endpoint
        if not found or self._closed:
            return
        self._active = found
        self._node_endpoints = by_node
        stale = [e for e in self._channels if e not in found and e != self.endpoint]
        for endpoint in stale:
            # In-flight calls on a dropped channel fail and are retried elsewhere.
            await self._channels.pop(endpoint).close()
        logger.debug("discovered endpoints: %s", ", ".join(map(str, self._active)))

    async def _discovery_loop(self) -> None:
        while not self._stop_discovery.is_set():
            try:
                await self.discover(timeout=DISCOVERY_TIMEOUT)
            except YdbTopicError as exc:
                if self._closed:
                    return
                logger.warning(
                    "endpoint discovery failed, keeping %s: %s", ", ".join(map(str, self._active)), exc
                )
            with contextlib.suppress(TimeoutError):
                await wait_within(self._stop_discovery.wait(), self._discovery_interval)

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


def _timed_out(method: str, timeout: float | None, last: BaseException | None) -> OperationTimeoutError:
    return OperationTimeoutError(
        f"{method} did not complete within {timeout}s" + (f" (last error: {last})" if last is not None else "")
    )
