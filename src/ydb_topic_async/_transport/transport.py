"""The ``Transport``: one database's connection, made of its channels (``channels``), discovery
(``discovery``) and unary calls (``unary``), with the request headers and auth, and opening
streams."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import grpc.aio

from .._balancer import Balancer, Endpoint
from .._credentials import Credentials, bind_credentials, fetch_token, unbind_credentials
from .._errors import ClosedError, DeadlineExceededError, InvalidArgumentError, error_from_grpc
from .._futures import release_frames
from .._limits import DEFAULT_MAX_MESSAGE_SIZE
from .._proto import ydb_auth_pb2
from .._retry import DEFAULT_RETRY, RetryPolicy
from .._version import __version__
from ..observability.logging import register_secret
from .channels import Channels, Route
from .discovery import Discovery
from .endpoints import (
    DEFAULT_KEEPALIVE_INTERVAL,
    DEFAULT_KEEPALIVE_TIMEOUT,
    channel_arguments,
    check_application_name,
    check_tls,
    positive_seconds,
    resolve_endpoint,
)
from .unary import call_bound, call_within, operation_result

if TYPE_CHECKING:
    from google.protobuf.message import Message

R = TypeVar("R")
M = TypeVar("M", bound="Message")
Req = TypeVar("Req", bound="Message")
Resp = TypeVar("Resp", bound="Message")

LOGIN_TIMEOUT = 10.0
"""Bounds one ``AuthService.Login`` call (retries included)."""

_SDK_BUILD_INFO = f"ydb-topic-async/{__version__}"


class Transport:
    """Connection to one YDB database: channels, discovery, headers, unary calls and streams.

    Everything that talks to the network goes through one ``Transport`` (a ``Driver`` owns it):
    topic administration, writers and readers, query sessions and transactions, and the login of
    ``StaticCredentials``. Options are checked once, here, when it is made.

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
        self.endpoint, self.database = resolve_endpoint(endpoint, database)
        if not isinstance(credentials, Credentials):
            raise InvalidArgumentError("credentials must have an async auth_token() method")
        discovery_interval = positive_seconds(discovery_interval, "discovery_interval")
        check_tls(self.endpoint, root_certificates, certificate_chain, private_key)
        check_application_name(application_name)
        if location is not None and (not isinstance(location, str) or not location):
            raise InvalidArgumentError(f"location must be a non-empty string or None, got {location!r}")
        if not isinstance(detect_location, bool):
            raise InvalidArgumentError(f"detect_location must be True or False, got {detect_location!r}")
        if location is not None and detect_location:
            raise InvalidArgumentError("give location or detect_location=True, not both")
        options = channel_arguments(
            max_message_size=max_message_size,
            keepalive_interval=keepalive_interval,
            keepalive_timeout=keepalive_timeout,
            retry=retry,
            extra=channel_options,
        )
        self.credentials = credentials
        self.retry = retry
        self.max_message_size = max_message_size
        self._root_certificates = root_certificates
        self._application_name = application_name
        self._on_retry = on_retry
        self.balancer = Balancer(self.endpoint, location=location)
        """Which endpoint each new call and stream takes (discovered nodes, pessimization, locality)."""
        self._channels = Channels(
            self.endpoint,
            self.balancer,
            options,
            root_certificates=root_certificates,
            certificate_chain=certificate_chain,
            private_key=private_key,
        )
        self._discovery = Discovery(
            self.endpoint,
            self.database,
            self.balancer,
            self._channels,
            self.call_operation,
            enabled=bool(discovery),
            interval=discovery_interval,
            detect_location=detect_location,
        )
        self._last_token: str | None = None
        self._closed = False
        bind_credentials(credentials, self, self._login)

    # --- lifecycle --------------------------------------------------------------------------

    @property
    def channel_options(self) -> list[tuple[str, Any]]:
        """The gRPC arguments every channel is made with: the driver's own (message sizes,
        keepalive) with the ``channel_options`` it was given over them."""
        return list(self._channels.options)

    @property
    def endpoints(self) -> list[Endpoint]:
        """The endpoints new calls are spread across (discovered, or the given one); the
        pessimized ones among them are skipped while others are healthy."""
        return self.balancer.endpoints

    @property
    def discovers(self) -> bool:
        """Whether it asks the cluster for its nodes (discovery on), so that a node id can be reached."""
        return self._discovery.enabled

    @property
    def discovery_rounds(self) -> int:
        """Background discovery rounds finished so far, answered or not."""
        return self._discovery.rounds

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
        self._discovery.start()

    async def close(self) -> None:
        """Stop discovery and close every channel (their calls end); a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self._discovery.stop()
        await unbind_credentials(self.credentials, self)  # the credentials' background refresh for us ends
        await self._discovery.close()
        await self._channels.close()

    # --- routes and headers -----------------------------------------------------------------

    def _route(self, endpoint: Endpoint | None = None, node_id: int | None = None) -> Route:
        self.check_open()
        return self._channels.route(endpoint, node_id)

    def call_failed(self, route: Route, error: BaseException) -> None:
        """A call on ``route`` failed with ``error``: a transport failure that puts the node at
        fault pessimizes it, and a channel whose connection attempts failed is replaced (see
        ``Channels.call_failed``); when most nodes are failing, discovery runs at once."""
        if not self._closed and self._channels.call_failed(route, error):
            self._discovery.wake()

    def call_succeeded(self, route: Route) -> None:
        """A call on ``route`` succeeded (a unary answer, a stream's handshake): its endpoint
        is chosen again if it was pessimized."""
        self._channels.call_succeeded(route)

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
        policy = retry or self.retry
        bound, by_budget = call_bound(timeout, policy, self.retry)

        async def attempt(remaining: float | None, routes: list[Route]) -> Any:
            return await self._unary_attempt(path, request, response_cls, remaining, with_token, endpoint, routes)

        def timed_out_on(route: Route) -> None:
            self.call_failed(route, DeadlineExceededError("the call's deadline passed"))

        return await call_within(
            path.rsplit("/", 1)[-1],
            attempt,
            parse,
            bound=bound,
            by_budget=by_budget,
            policy=policy,
            idempotent=idempotent,
            timed_out_on=timed_out_on,
            on_retry=self._on_retry,
        )

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
        self._channels.started(route, call)
        try:
            response = await call
        except grpc.aio.AioRpcError as exc:
            error = self._channels.explained(error_from_grpc(exc))
        except asyncio.CancelledError as exc:
            release_frames(exc)
            raise
        else:
            self.call_succeeded(route)
            return response
        self.call_failed(route, error)
        raise error  # outside the except block: the gRPC error (and its call) is not kept as context

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
        self._channels.started(route, call)
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
        self._channels.started(route, call)
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
        await self._discovery.discover(timeout=timeout, retry=retry, endpoint=endpoint)

    async def wait_ready(self, timeout: float | None, retry: RetryPolicy | None = None) -> None:
        """Wait until the database answers (and, with discovery, its endpoints are known).

        Retriable failures (a refused connection, a server starting) are retried by ``retry``
        (for the whole ``timeout`` by default); ``OperationTimeoutError`` when nothing answered
        in time, any other failure at once.
        """
        await self._discovery.wait_ready(timeout, retry)
