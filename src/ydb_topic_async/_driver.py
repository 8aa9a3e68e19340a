"""The Driver: the user's handle on one database. It owns a ``Transport``, the ``ClientContext``
made from it and the options, and the clients built on that context (``topic``, ``query``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from ._balancer import Endpoint
from ._context import ClientContext
from ._credentials import AnonymousCredentials, Credentials, connection_from_env, credentials_from_env
from ._errors import ClosedError, InvalidArgumentError
from ._limits import DEFAULT_MAX_MESSAGE_SIZE
from ._retry import DEFAULT_RETRY, RECONNECT_FOREVER, RetryPolicy
from ._topic_client import TopicClient
from ._transport import (
    DEFAULT_KEEPALIVE_INTERVAL,
    DEFAULT_KEEPALIVE_TIMEOUT,
    MIN_SAFE_KEEPALIVE_INTERVAL,
    Transport,
    parse_connection_string,
)
from ._validate import check_timeout
from .observability.logging import sdk_logger
from .observability.metrics import MetricsRecorder, NoopMetrics, active_recorder
from .observability.tracing import OpenTelemetryTracing, resolve_tracing
from .query import QueryClient

logger = sdk_logger("driver")

DEFAULT_CLOSE_TIMEOUT = 10.0
"""Seconds ``Driver.close`` (and leaving ``async with Driver``) gives writers and readers to
finish, by default, before their unacknowledged messages and commits fail: as the official
SDK's ``Driver.stop``, and well within the 30 seconds an orchestrator such as Kubernetes waits
after SIGTERM."""


class _DriverDefault:
    """The default of ``Driver.close(timeout)``: the driver's ``close_timeout``."""

    def __repr__(self) -> str:
        return "close_timeout"


_CLOSE_TIMEOUT = _DriverDefault()

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT",
    "DEFAULT_KEEPALIVE_INTERVAL",
    "DEFAULT_KEEPALIVE_TIMEOUT",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MIN_SAFE_KEEPALIVE_INTERVAL",
    "Driver",
    "Endpoint",
    "parse_connection_string",
]


class Driver:
    """Connection to one YDB database. Open it with ``async with Driver(...) as driver``.

    The driver owns the connections (one gRPC channel per endpoint), endpoint discovery, and
    the writers, readers and transactions made through ``driver.topic`` and ``driver.query``;
    closing it closes them all. Every option is checked here (``InvalidArgumentError``, or
    ``InvalidEndpointError`` for a malformed endpoint).

    Parameters:
        endpoint: ``grpc://host:port`` or ``grpcs://host:port`` (TLS), optionally a whole
            connection string with ``?database=``.
        database: The database path (``/local``); may instead come with the endpoint.
        credentials: ``AnonymousCredentials()`` (the default), ``AccessTokenCredentials``,
            ``TokenProviderCredentials``, ``StaticCredentials`` (user and password),
            ``ServiceAccountCredentials``, ``MetadataUrlCredentials`` or
            ``Oauth2TokenExchangeCredentials`` (see the authentication guide), or
            ``credentials_from_env()``.
        root_certificates: PEM bytes that replace the system trust store for TLS.
        certificate_chain: A client certificate (PEM bytes, the chain) for mutual TLS, with
            ``private_key``; only with a ``grpcs://`` endpoint.
        private_key: The client certificate's PEM private key.
        application_name: Sent to the server with every call (``x-ydb-application-name``).
        discovery: Ask the endpoint for the cluster's nodes (``ListEndpoints``) in the
            background and spread new calls and streams across them (default ``True``); until
            the first answer, and whenever discovery fails, the given endpoint is used. A node
            whose calls fail with transport errors (unreachable, connection refused or reset,
            no connection within a call's deadline) is left out of new calls and streams until
            the next discovery lists it or a call to it succeeds; when more than half of the
            nodes are left out, discovery runs again at once.
        discovery_interval: Seconds between discoveries (default 60).
        location: The client's own location (data centre), as discovery names the nodes'
            locations (``"dc1"``): new calls and streams go to the nodes there, and to the
            others only while none there is healthy. ``None`` (the default): no preference,
            every node takes turns.
        detect_location: Find the client's location at each discovery instead of giving it:
            the location whose node accepts a TCP connection first (up to 3 nodes of each
            location race, for at most 4 seconds), or the location the discovery answer
            reports for the client (``self_location``) when none connects. Default ``False``;
            not together with ``location``.
        retry: The retry policy of unary calls (topic administration, transactions), and of
            writers' and readers' reconnects. By default unary calls use ``RetryPolicy()`` (a
            60-second budget that bounds every call without a ``timeout``, never past a call's
            ``timeout``) and writers and readers reconnect for as long as they are open; a
            policy given here replaces both (``driver.retry``, ``driver.stream_retry``). Its
            backoff for transient failures also paces reconnecting: a channel whose server
            went away is replaced when a call fails on it, so the next attempt connects at
            once, and gRPC's own reconnect backoff is capped at the policy's.
        max_message_size: The largest gRPC message sent or received, in bytes (default
            64,000,000, YDB's own limit): writers refuse a message that cannot fit in one
            request under it with ``MessageTooLargeError`` at the call.
        channel_options: Extra gRPC channel arguments; they override the driver's own.
        keepalive_interval: Seconds between HTTP/2 pings on a connection with open calls
            (``None`` switches them off). A ping unanswered for ``keepalive_timeout`` seconds
            fails the connection, so a server that vanished without closing the socket breaks
            the streams with a retriable ``ConnectionLostError`` and writers and readers
            reconnect, instead of waiting forever. Keep it at 10 seconds or more against a real
            cluster: gRPC servers may answer more frequent pings with GOAWAY "too_many_pings"
            (a shorter interval is accepted, with a WARNING).
        keepalive_timeout: Seconds a keepalive ping may go unanswered (default 10).
        metrics: A ``MetricsRecorder`` that receives the counters and latencies of every
            writer and reader made from this driver.
        tracing: ``True`` or an ``OpenTelemetryTracing`` to trace writes and reads with
            OpenTelemetry.
        close_timeout: Seconds ``close()``, and leaving ``async with``, wait for writers and
            readers to deliver what they accepted and to have commits acknowledged, before
            failing what is left with ``OperationTimeoutError`` (default 10; ``None``: no bound).
    """

    def __init__(
        self,
        endpoint: str,
        database: str | None = None,
        credentials: Credentials | None = None,
        *,
        root_certificates: bytes | None = None,
        certificate_chain: bytes | None = None,
        private_key: bytes | None = None,
        application_name: str | None = None,
        discovery: bool = True,
        discovery_interval: float = 60.0,
        location: str | None = None,
        detect_location: bool = False,
        retry: RetryPolicy | None = None,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        channel_options: Sequence[tuple[str, Any]] = (),
        keepalive_interval: float | None = DEFAULT_KEEPALIVE_INTERVAL,
        keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
        metrics: MetricsRecorder | None = None,
        tracing: bool | OpenTelemetryTracing | None = None,
        close_timeout: float | None = DEFAULT_CLOSE_TIMEOUT,
    ) -> None:
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a RetryPolicy or None, got {retry!r}")
        if metrics is not None and not isinstance(metrics, MetricsRecorder):
            raise InvalidArgumentError(
                "metrics must implement every MetricsRecorder method (subclass NoopMetrics to override only some)"
            )
        self.close_timeout = check_timeout(close_timeout, "close_timeout")
        """How long ``close()`` and leaving ``async with`` wait for writers and readers to finish."""
        recorder = active_recorder(metrics)
        unary_retry = retry or DEFAULT_RETRY
        self._transport = Transport(
            endpoint,
            database,
            credentials or AnonymousCredentials(),
            root_certificates=root_certificates,
            certificate_chain=certificate_chain,
            private_key=private_key,
            application_name=application_name,
            discovery=discovery,
            discovery_interval=discovery_interval,
            retry=unary_retry,
            max_message_size=max_message_size,
            channel_options=channel_options,
            keepalive_interval=keepalive_interval,
            keepalive_timeout=keepalive_timeout,
            on_retry=recorder.retry if recorder is not None else None,
            location=location,
            detect_location=detect_location,
        )
        # Every client is built from this context; the driver's attributes below read it, so
        # what they show is what the clients use.
        self._context = ClientContext(
            transport=self._transport,
            retry=unary_retry,
            stream_retry=retry or RECONNECT_FOREVER,
            metrics=metrics or NoopMetrics(),
            tracing=resolve_tracing(tracing),
            max_message_size=max_message_size,
        )
        self._opened = False
        self._closing = False
        self._topic: TopicClient | None = None
        self._query: QueryClient | None = None

    @classmethod
    def from_env(
        cls,
        endpoint: str | None = None,
        database: str | None = None,
        credentials: Credentials | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        **options: Any,
    ) -> Driver:
        """A driver configured by environment variables (``os.environ``, or ``environ``), as
        YDB's SDKs and tools name them; what is passed here wins over them.

        - endpoint and database: ``YDB_CONNECTION_STRING`` (``grpcs://host:port/?database=/path``),
          else ``YDB_ENDPOINT``; the database from the endpoint, else ``YDB_DATABASE``;
        - credentials: ``credentials_from_env(environ)`` (the variables of YDB's SDKs, in their
          order; the metadata service when none is set);
        - TLS: ``YDB_SSL_ROOT_CERTIFICATES_FILE`` (or ``YDB_CA_FILE``) for the roots,
          ``YDB_CLIENT_CERT_FILE`` and ``YDB_CLIENT_CERT_KEY_FILE`` (with
          ``YDB_CLIENT_CERT_KEY_PASSWORD[_FILE]`` for an encrypted key) for mutual TLS.

        ``options`` are the other ``Driver`` options. ``InvalidArgumentError`` names the variable
        when one is missing or unusable.
        """
        settings = connection_from_env(environ)
        endpoint = endpoint or settings.endpoint
        if not endpoint:
            raise InvalidArgumentError(
                "no endpoint: set YDB_CONNECTION_STRING (e.g. grpcs://host:2135/?database=/path),"
                " or YDB_ENDPOINT and YDB_DATABASE"
            )
        if database is None and parse_connection_string(endpoint)[1] is None:
            database = settings.database
        for name in ("root_certificates", "certificate_chain", "private_key"):
            if options.get(name) is None:
                options[name] = getattr(settings, name)
        if credentials is None:
            credentials = credentials_from_env(environ)
        return cls(endpoint, database, credentials, **options)

    # --- lifecycle ------------------------------------------------------------------

    @property
    def transport(self) -> Transport:
        """The connection machinery (channels, discovery, auth, unary calls, streams) shared by
        this driver's clients; for adapters built on the SDK."""
        return self._transport

    @property
    def endpoint(self) -> str:
        """The endpoint given at construction."""
        return str(self._transport.endpoint)

    @property
    def database(self) -> str:
        """The database every path is relative to."""
        return self._transport.database

    @property
    def credentials(self) -> Credentials:
        """The credentials every call authenticates with."""
        return self._transport.credentials

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy of unary calls not given one."""
        return self._context.retry

    @property
    def stream_retry(self) -> RetryPolicy:
        """The reconnect policy of writers and readers not given one (the ``retry`` given at
        construction, else reconnecting for as long as they are open)."""
        return self._context.stream_retry

    @property
    def metrics(self) -> MetricsRecorder:
        """The metrics recorder given at construction (a ``NoopMetrics`` when none was)."""
        return self._context.metrics

    @property
    def tracing(self) -> OpenTelemetryTracing | None:
        """The OpenTelemetry tracing of this driver's writers and readers, or None when off."""
        return self._context.tracing

    @property
    def max_message_size(self) -> int:
        """The largest gRPC message the channels send or receive, in bytes."""
        return self._context.max_message_size

    @property
    def endpoints(self) -> list[str]:
        """The endpoints new calls and streams are spread across (discovered, or the given
        one), those that are failing included."""
        return [str(e) for e in self._transport.endpoints]

    @property
    def failing_endpoints(self) -> list[str]:
        """The endpoints left out of new calls and streams because their calls failed with
        transport errors (until the next discovery lists them, or a call to one succeeds)."""
        pessimized = self._transport.balancer.pessimized
        return [str(e) for e in self._transport.endpoints if e in pessimized]

    @property
    def location(self) -> str | None:
        """The location whose nodes new calls and streams prefer (given, or detected at the
        latest discovery), or None."""
        return self._transport.balancer.location

    async def __aenter__(self) -> Driver:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            await self.close()
            return
        # Leaving by an error: its failure is the one raised. Leaving by cancellation: the
        # caller is going away and does not wait for the server.
        try:
            await self.close(0 if isinstance(exc, asyncio.CancelledError) else self.close_timeout)
        except Exception:
            logger.warning("closing %r after an error also failed", self, exc_info=True)

    async def open(self) -> None:
        """Start endpoint discovery in the background; returns at once (``wait_ready`` waits for
        the database to answer)."""
        if self._transport.closed:
            raise ClosedError("driver is closed")
        if self._opened:
            return
        self._opened = True
        self._transport.start()

    async def close(self, timeout: float | _DriverDefault | None = _CLOSE_TIMEOUT) -> None:
        """Close the writers and readers made from this driver, then discovery and every channel.

        Writers are closed first, while the channels still work, so that they can flush (and
        reconnect for) what they accepted; readers wait for the acknowledgement of their commits.
        Transactions still open are rolled back and query sessions deleted before that.
        ``timeout`` (seconds, the driver's ``close_timeout`` unless given; ``None``: as long as
        it takes) bounds the whole close: what is still unacknowledged when it passes fails with
        ``OperationTimeoutError`` (the futures of those messages, and this call), and every
        channel is closed all the same. Leaving ``async with`` closes within ``close_timeout``,
        or at once when the block is cancelled; a failure to close is then raised only if the
        block itself raised nothing. If a writer or reader fails to close, the rest are still
        closed and every channel is released before the first such error is raised.
        """
        timeout = self.close_timeout if isinstance(timeout, _DriverDefault) else check_timeout(timeout)
        if self._transport.closed or self._closing:
            return
        self._closing = True
        ends = None if timeout is None else time.monotonic() + timeout
        try:
            # Open transactions are rolled back first: that also stops their transactional writers.
            if self._query is not None:
                await self._query._close(timeout)
            if self._topic is not None:
                await self._topic._close(None if ends is None else max(0.0, ends - time.monotonic()))
        finally:
            await self._transport.close()

    @property
    def closed(self) -> bool:
        """True once ``close`` has closed the connections."""
        return self._transport.closed

    async def wait_ready(self, timeout: float | None = 10.0, *, retry: RetryPolicy | None = None) -> None:
        """Wait until the database answers (and, with discovery, its endpoints are known).

        Failures that may pass (a refused connection, a server still starting) are retried by
        ``retry`` until ``timeout``; then ``OperationTimeoutError``. Pass
        ``retry=RetryPolicy.no_retries()`` to fail at the first refused connection instead.
        Other failures (bad credentials, say) are raised at once.
        """
        timeout = check_timeout(timeout)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a RetryPolicy or None, got {retry!r}")
        self._check_open()
        await self._transport.wait_ready(timeout, retry)

    # --- clients --------------------------------------------------------------------

    @property
    def topic(self) -> TopicClient:
        """Topic administration, writers and readers."""
        if self._topic is None:
            self._topic = TopicClient(self._context)
        return self._topic

    @property
    def query(self) -> QueryClient:
        """Query sessions and transactions (no YQL execution)."""
        if self._query is None:
            self._check_open()
            self._query = QueryClient(self._context)
        return self._query

    def _check_open(self) -> None:
        self._transport.check_open()

    def __repr__(self) -> str:
        return f"Driver(endpoint={self.endpoint!r}, database={self.database!r})"
