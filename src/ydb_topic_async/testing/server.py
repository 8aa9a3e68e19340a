"""``LocalTopicServer``: YDB's topic, query (transactions), discovery and auth services on loopback, over real gRPC."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message

from .._proto import ydb_auth_pb2, ydb_discovery_pb2
from .._proto import ydb_topic_pb2 as pb
from ._replies import metadata, operation, rpc_handler, status_code
from .auth import AuthInterceptor, TokenValidator
from .control_plane import ControlPlane
from .direct_read import DirectReadService
from .discovery import DiscoveryHandlers
from .journal import close_journal, open_journal
from .nodes import LOCAL_LOCATION, ServerNode
from .query_service import QueryService
from .quotas import WriteQuotas
from .read_stream import ReadService
from .retention import Retention, expire_all
from .state import ServerState
from .stored import StorageError
from .write_stream import WriteService

logger = logging.getLogger("ydb_topic_async.testing")

MAX_MESSAGE_SIZE = 64_000_000
"""gRPC receive (and send) limit in bytes: YDB's own, which is a little under 64 MiB."""

Handler = Callable[[Any], Message]
HeaderHandler = Callable[[Any, dict[str, str]], Message]


class LocalTopicServer:
    """A YDB topic server for tests and examples: ``async with LocalTopicServer() as server``.

    ``storage`` holds every topic and message (for inspection), ``faults`` breaks streams and
    injects statuses on purpose, ``stats`` counts requests and messages, ``query`` holds the
    query sessions and transactions that topic writes and consumer offsets join;
    ``advance_time`` moves the server's clock (and runs retention at once).

    Parameters:
        host: The address to listen on.
        port: The port to listen on (0 picks a free one).
        database: The database served (an absolute path).
        users: Require a login: user name -> password (``AuthService.Login`` issues tokens).
        token_ttl: Seconds a login token stays valid (``None``: forever).
        graceful_stop_timeout: Seconds a reader has to confirm a graceful partition stop.
        tls: A (PEM private key, PEM certificate chain) pair: serve TLS instead of plaintext.
        client_ca: PEM roots: ask clients for a certificate issued by them (needs ``tls``).
        require_client_cert: Refuse connections without such a certificate (mutual TLS, as
            YDB's ``client_certificate_authorization``; needs ``client_ca``).
        tokens: Require a ticket, and accept these pre-shared tokens: token -> user.
        token_services: Require a ticket, and accept the tokens these testing services issue
            (``IamTokenService``, ``TokenExchangeService``, ``MetadataService``).
        data_dir: Keep everything acknowledged in this directory, so that a server started later
            on it (after a stop or a crash of the process) continues where this one stopped.
        write_quotas: Throttle writes to each partition's write speed and burst, as YDB does.
        retention_interval: Seconds between retention runs (deleting expired messages).
        direct_read: Offer direct read (``StreamDirectRead``, and read sessions asking for it),
            as YDB does. ``False`` serves as a YDB without it: read sessions ignore the flag (data on
            the read stream, no partition locations) and ``StreamDirectRead`` answers UNIMPLEMENTED.

    With ``users``, ``tokens`` or ``token_services``, every call but ``AuthService.Login`` needs
    a valid ticket; others are refused with the gRPC status ``UNAUTHENTICATED``, as YDB refuses
    them (see ``testing.auth``).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        database: str = "/local",
        *,
        users: dict[str, str] | None = None,
        token_ttl: float | None = None,
        graceful_stop_timeout: float = 10.0,
        tls: tuple[bytes, bytes] | None = None,
        client_ca: bytes | None = None,
        require_client_cert: bool = False,
        tokens: Mapping[str, str] | None = None,
        token_services: Sequence[TokenValidator] = (),
        data_dir: str | os.PathLike[str] | None = None,
        write_quotas: bool = False,
        retention_interval: float = 1.0,
        direct_read: bool = True,
    ) -> None:
        if not database.startswith("/"):
            raise ValueError("database must be an absolute path like '/local'")
        if not retention_interval > 0:
            raise ValueError("retention_interval must be positive")
        if (client_ca is not None or require_client_cert) and tls is None:
            raise ValueError("client certificates need TLS: pass tls=(key, certificate chain) too")
        if require_client_cert and client_ca is None:
            raise ValueError("require_client_cert needs client_ca: the PEM roots client certificates must chain to")
        self.state = state = ServerState(
            database.rstrip("/") or "/",
            self._make_nodes(host, port, tls is not None),
            tls=tls is not None,
            users=users,
            token_ttl=token_ttl,
            write_quotas=write_quotas,
            tokens=tokens,
            token_services=token_services,
        )
        """What the services share: storage, clock, faults, stats, auth, address (the attributes below)."""
        self.clock = state.clock
        self.storage = state.storage
        self.data_dir = data_dir
        self.retention = Retention(self.storage, retention_interval)
        self._journal_replayed = False
        self.faults = state.faults
        self.stats = state.stats
        """Requests and messages served so far (see ``ServerStats``)."""
        self.auth = state.auth
        self.gate = state.gate
        self.discovery = DiscoveryHandlers(state)
        self.control = ControlPlane(self.storage)
        self.query = QueryService(state)
        self.writes = WriteService(state, self.query)
        self.reads = ReadService(state, graceful_stop_timeout=graceful_stop_timeout, direct_read=direct_read)
        self.direct_reads = (
            DirectReadService(state, self.reads.direct_cache) if self.reads.direct_cache is not None else None
        )
        self._tls = tls
        self._client_ca = client_ca
        self._require_client_cert = require_client_cert
        self.interceptor = AuthInterceptor(state.auth)
        """Refuses calls without a valid ticket (``interceptor.refused`` counts them)."""
        self._started = False
        self._servers: dict[int, grpc.aio.Server] = {}
        """The gRPC server of each live node, by node id."""
        self._stopped: asyncio.Event | None = None
        """Set once a started server has stopped: what ``wait_closed`` waits on."""

    def _make_nodes(self, host: str, port: int, tls: bool) -> list[ServerNode]:
        """The server's nodes: one, node 1 (``LocalTopicCluster`` makes several)."""
        return [ServerNode(1, LOCAL_LOCATION, host, port, tls)]

    @property
    def host(self) -> str:
        """The address the server listens on (``127.0.0.1`` by default)."""
        return self.state.host

    @property
    def port(self) -> int:
        """The port the server listens on (0 until it started, unless one was asked for)."""
        return self.state.port

    @property
    def database(self) -> str:
        """The database the server serves (``/local`` by default)."""
        return self.state.database

    @property
    def quotas(self) -> WriteQuotas | None:
        """The partition write quotas, or None when writes are not throttled."""
        return self.state.quotas

    @quotas.setter
    def quotas(self, quotas: WriteQuotas | None) -> None:
        self.state.quotas = quotas

    @property
    def closing(self) -> bool:
        """True while ``stop`` runs: stream handlers stop waiting (for write quota) and end."""
        return self.state.closing

    @closing.setter
    def closing(self, closing: bool) -> None:
        self.state.closing = closing

    @property
    def endpoint(self) -> str:
        """``grpc://host:port`` (``grpcs://`` with TLS) of the running server."""
        return f"{'grpcs' if self._tls else 'grpc'}://{self.host}:{self.port}"

    @property
    def tls(self) -> bool:
        """Whether the server serves TLS."""
        return self._tls is not None

    @property
    def connection_string(self) -> str:
        """``grpc://host:port/?database=...``: what any YDB client accepts."""
        return f"{self.endpoint}/?database={self.database}"

    async def __aenter__(self) -> LocalTopicServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start listening (``async with`` does this); a second call does nothing."""
        if self._started:
            return
        open_journal(self.storage, self.data_dir, replay=not self._journal_replayed)
        self._journal_replayed = True
        try:
            for node in self.state.nodes:
                await self._start_node(node)
            self.state.nodes_changed()
        except BaseException:
            for server in self._servers.values():
                await server.stop(None)
            self._servers.clear()
            for node in self.state.nodes:
                node.alive = False
            close_journal(self.storage)
            raise
        self._started = True
        self._stopped = asyncio.Event()
        self.retention.start()
        logger.info("local topic server on %s, database %s", self.endpoint, self.database)

    async def _start_node(self, node: ServerNode) -> None:
        """Start ``node``'s gRPC server on its port (a free one the first time when 0); the caller
        then calls ``state.nodes_changed`` (once, when it starts several)."""
        server = grpc.aio.server(
            interceptors=[self.interceptor],
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_SIZE),
                ("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
                ("grpc.so_reuseport", 0),
                # Clients ping every few seconds (tests far more often) to detect dead connections:
                # accept any rate instead of answering GOAWAY "too_many_pings".
                ("grpc.http2.min_ping_interval_without_data_ms", 1),
                ("grpc.http2.max_ping_strikes", 0),
                ("grpc.keepalive_permit_without_calls", 1),
            ]
        )
        server.add_generic_rpc_handlers(self._handlers(node))
        address = f"{node.host}:{node.port}"
        if self._tls is not None:
            key, chain = self._tls
            credentials = grpc.ssl_server_credentials(
                [(key, chain)], root_certificates=self._client_ca, require_client_auth=self._require_client_cert
            )
            node.port = server.add_secure_port(address, credentials)
        else:
            node.port = server.add_insecure_port(address)
        await server.start()
        self._servers[node.node_id] = server
        node.alive = True

    async def _stop_node(self, node: ServerNode, grace: float | None) -> None:
        """Stop ``node``'s gRPC server: its calls are cancelled (the clients' connections reset) and
        its port refuses; its query sessions end and its partitions move to the live nodes."""
        server = self._servers.pop(node.node_id, None)
        if server is None:
            return
        node.alive = False
        try:
            await server.stop(grace)
        finally:
            self.query.end_node_sessions(node.node_id, f"node {node.node_id} stopped")
            self.state.nodes_changed()

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving; open streams are cancelled and query sessions end, aborting their transactions."""
        if not self._started:
            return
        self._started = False
        self.closing = True
        try:
            await self.retention.stop()
            self.query.shutdown()
            self.faults.wake_all()
            servers, self._servers = list(self._servers.values()), {}
            for node in self.state.nodes:
                node.alive = False
            await asyncio.gather(*(server.stop(grace) for server in servers))
        finally:
            self.closing = False
            close_journal(self.storage)
            if self._stopped is not None:
                self._stopped.set()

    def advance_time(self, seconds: float) -> None:
        """Move the server's clock forward by ``seconds`` and apply retention at once.

        Messages older than their topic's retention period (by the moved clock) are deleted
        now, as are the oldest messages of partitions over their size limit; write quotas
        refill as if that time had passed. Times the server reports (write times, lags) move too.
        """
        self.clock.advance(seconds)
        expire_all(self.storage)

    async def wait_closed(self) -> None:
        """Serve until stopped."""
        # Not gRPC's wait_for_termination: cancelling that (Ctrl-C in a script that serves
        # until interrupted) cancels the server's own shutdown future, and the stop that
        # follows then raises CancelledError without shutting down.
        if self._started and self._stopped is not None:
            await self._stopped.wait()

    # --- wiring ---------------------------------------------------------------------------

    def _unary(self, name: str, handler: HeaderHandler, response_cls: Any) -> Callable[[Any, Any], Awaitable[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            headers = metadata(context)
            refusal = self.state.admit(name, headers)
            if refusal is not None:
                status, message = refusal
                return response_cls(operation=operation(status=status, message=message))
            try:
                result = handler(request, headers)
            except StorageError as exc:
                return response_cls(operation=operation(status=status_code(exc.status), message=exc.message))
            return response_cls(operation=operation(result))

        return call

    def _handlers(self, node: ServerNode) -> list[grpc.GenericRpcHandler]:
        def unary(name: str, handler: Handler, request_cls: Any, response_cls: Any) -> Any:
            return unary_with_headers(name, lambda request, _headers: handler(request), request_cls, response_cls)

        def unary_with_headers(name: str, handler: HeaderHandler, request_cls: Any, response_cls: Any) -> Any:
            behaviour = self._unary(name, handler, response_cls)
            return rpc_handler(grpc.unary_unary_rpc_method_handler, behaviour, request_cls, response_cls)

        def stream(handler: Any, request_cls: Any, response_cls: Any) -> Any:
            return rpc_handler(grpc.stream_stream_rpc_method_handler, handler, request_cls, response_cls)

        control = self.control
        topic = {
            "StreamWrite": stream(
                functools.partial(self.writes.stream_write, node=node),
                pb.StreamWriteMessage.FromClient,
                pb.StreamWriteMessage.FromServer,
            ),
            "StreamRead": stream(
                functools.partial(self.reads.stream_read, node=node),
                pb.StreamReadMessage.FromClient,
                pb.StreamReadMessage.FromServer,
            ),
            "CreateTopic": unary("CreateTopic", control.create_topic, pb.CreateTopicRequest, pb.CreateTopicResponse),
            "DescribeTopic": unary(
                "DescribeTopic", control.describe_topic, pb.DescribeTopicRequest, pb.DescribeTopicResponse
            ),
            "DescribePartition": unary(
                "DescribePartition",
                control.describe_partition,
                pb.DescribePartitionRequest,
                pb.DescribePartitionResponse,
            ),
            "DescribeConsumer": unary(
                "DescribeConsumer",
                lambda req: control.describe_consumer(req, self.reads.read_sessions()),
                pb.DescribeConsumerRequest,
                pb.DescribeConsumerResponse,
            ),
            "AlterTopic": unary("AlterTopic", control.alter_topic, pb.AlterTopicRequest, pb.AlterTopicResponse),
            "DropTopic": unary("DropTopic", control.drop_topic, pb.DropTopicRequest, pb.DropTopicResponse),
            "CommitOffset": unary(
                "CommitOffset",
                lambda req: control.commit_offset(req, self.reads),
                pb.CommitOffsetRequest,
                pb.CommitOffsetResponse,
            ),
            "UpdateOffsetsInTransaction": unary(
                "UpdateOffsetsInTransaction",
                self._update_offsets_in_transaction,
                pb.UpdateOffsetsInTransactionRequest,
                pb.UpdateOffsetsInTransactionResponse,
            ),
        }
        if self.direct_reads is not None:
            topic["StreamDirectRead"] = stream(
                functools.partial(self.direct_reads.stream_direct_read, node=node),
                pb.StreamDirectReadMessage.FromClient,
                pb.StreamDirectReadMessage.FromServer,
            )
        discovery = {
            "ListEndpoints": unary(
                "ListEndpoints",
                functools.partial(self.discovery.list_endpoints, node=node),
                ydb_discovery_pb2.ListEndpointsRequest,
                ydb_discovery_pb2.ListEndpointsResponse,
            ),
            "WhoAmI": unary_with_headers(
                "WhoAmI", self.discovery.who_am_i, ydb_discovery_pb2.WhoAmIRequest, ydb_discovery_pb2.WhoAmIResponse
            ),
        }
        auth = {
            "Login": unary("Login", self.discovery.login, ydb_auth_pb2.LoginRequest, ydb_auth_pb2.LoginResponse),
        }
        return [
            grpc.method_handlers_generic_handler("Ydb.Topic.V1.TopicService", topic),
            self.query.handlers(node),
            grpc.method_handlers_generic_handler("Ydb.Discovery.V1.DiscoveryService", discovery),
            grpc.method_handlers_generic_handler("Ydb.Auth.V1.AuthService", auth),
        ]

    # --- small services -------------------------------------------------------------------

    def _update_offsets_in_transaction(self, request: Any) -> Message:
        self.query.update_offsets(request)
        return pb.UpdateOffsetsInTransactionResult()
