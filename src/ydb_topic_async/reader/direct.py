"""Direct read: a partition's data read from the node that hosts it.

With direct read the read stream (the *control* stream: starts, stops, commits, credit) stays on
whatever node it was opened on, and the server sends it no data. Each partition session starts
with its partition's location (node id, tablet generation), and the data comes from that node,
on a StreamDirectRead opened there: one per node, shared by the node's partition sessions
(``NodeStream``). Each read there is numbered per partition session (1, 2, 3, ...), charged to
the control stream's credit by its ``bytes_size``, and acknowledged on the control stream
(DirectReadAck), in order.

``DirectReads`` keeps the node streams of one control stream and dies with it:

- a partition session is started on its node's stream with its generation and the id of the
  last read received (the server sends the reads after it again: nothing is lost when a direct
  stream breaks, nothing received is handed out twice);
- when its tablet moves (UpdatePartitionSession: node loss, a restarted tablet), it is started
  on the new node's stream with the new generation, from the last read received;
- a node stream reconnects under the reader's retry policy (BAD_REQUEST counts as OVERLOADED,
  as YDB's C++ SDK does: the cache may not know the session yet); when the policy gives up, the
  control stream ends with that error, and with it the reader's partition sessions;
- a node stream with no partition sessions left is closed.

When the first direct stream cannot be opened because the server does not offer it (gRPC
UNIMPLEMENTED, no answer to the handshake in time, or a node the client cannot reach answering
"Unknown session"), ``unsupported`` is called: the reader goes back to the ordinary path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from .._errors import (
    BadRequestError,
    DeadlineExceededError,
    InternalError,
    OverloadedError,
    UnimplementedError,
    YdbTopicError,
)
from .._proto import ydb_topic_pb2 as pb
from .._retry import RetryPolicy
from .._stream import BidiStream, StreamKeeper, refresh_tokens, tokens_may_change
from ..observability.logging import sdk_logger
from .parsing import DIRECT_READ, ExternalPayloads, ReadResponseParser

if TYPE_CHECKING:
    from .._transport import Transport

logger = sdk_logger("reader")

DirectStream = BidiStream[pb.StreamDirectReadMessage.FromClient, pb.StreamDirectReadMessage.FromServer]

Deliver = Callable[[int, int, int, Any, "ExternalPayloads | None"], Awaitable[None]]
"""``await deliver(partition session id, direct read id, bytes_size, partition data, external payloads)``."""

_UNKNOWN_SESSION = "Unknown session"


class DirectReads:
    """The direct read streams of one control stream, and where each partition session is read.

    ``deliver`` takes each new read (the caller acknowledges it on the control stream and buffers
    its data); ``unsupported(reason)`` is told once when the server turns out not to offer direct
    read.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        read_session_id: str,
        consumer: str | None,
        paths: Sequence[str],
        retry: RetryPolicy,
        init_timeout: float,
        token_refresh_interval: float,
        deliver: Deliver,
        unsupported: Callable[[str], None],
        log_fields: Callable[[], Mapping[str, Any]],
    ) -> None:
        self._transport = transport
        self.read_session_id = read_session_id
        self._consumer = consumer
        self._paths = tuple(paths)
        self._retry = retry
        self._init_timeout = init_timeout
        self._token_refresh_interval = token_refresh_interval
        self._deliver = deliver
        self._unsupported = unsupported
        self._log_fields = log_fields
        self.partitions: dict[int, DirectPartition] = {}
        self.nodes: dict[int, NodeStream] = {}
        self.answered = False
        """A direct stream's handshake was answered: the server offers direct read."""
        self.gave_up = False
        """The server does not offer direct read: nothing more is opened."""
        self._group: anyio.abc.TaskGroup | None = None
        self._failure: BaseException | None = None

    async def run(self) -> None:
        """Own the node streams until cancelled (with the control stream); a node stream that gives
        up raises its error here."""
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                for node in self.nodes.values():  # named before this task ran
                    self._spawn(node)
                await anyio.sleep_forever()
        finally:
            self._group = None
            self.nodes.clear()
        if self._failure is not None:
            raise self._failure

    def init_request(self) -> pb.StreamDirectReadMessage.FromClient:
        request = pb.StreamDirectReadMessage.FromClient()
        init = request.init_request
        init.session_id = self.read_session_id
        init.consumer = self._consumer or ""
        for path in self._paths:
            init.topics_read_settings.add(path=path)
        return request

    # --- partition sessions -------------------------------------------------------------------

    def add(self, partition_session_id: int, node_id: int, generation: int) -> None:
        """Read a started partition session from ``node_id`` (its tablet's ``generation``)."""
        partition = DirectPartition(partition_session_id, node_id, generation)
        self.partitions[partition_session_id] = partition
        self._place(partition)

    def move(self, partition_session_id: int, node_id: int, generation: int) -> None:
        """UpdatePartitionSession: the partition's tablet now runs on ``node_id``, at ``generation``."""
        partition = self.partitions.get(partition_session_id)
        if partition is None:
            return
        logger.debug(
            "topic reader: partition session %d moved to node %d (generation %d), reading on from direct read %d",
            partition_session_id, node_id, generation, partition.received, extra=self._log_fields(),
        )
        self._unplace(partition)
        partition.node_id, partition.generation = node_id, generation
        self._place(partition)

    def remove(self, partition_session_id: int) -> None:
        """The partition session ended: nothing more is asked for it."""
        partition = self.partitions.pop(partition_session_id, None)
        if partition is not None:
            self._unplace(partition)

    def received(self, partition_session_id: int) -> int:
        """The id of the last read received for the partition session (0: none, or not read directly)."""
        partition = self.partitions.get(partition_session_id)
        return 0 if partition is None else partition.received

    def _place(self, partition: DirectPartition) -> None:
        if self.gave_up:
            return
        node = self.nodes.get(partition.node_id)
        if node is None:
            node = self.nodes[partition.node_id] = NodeStream(self, partition.node_id)
            if self._group is not None:
                self._spawn(node)
        node.add(partition)

    def _spawn(self, node: NodeStream) -> None:
        assert self._group is not None
        self._group.start_soon(self._run_node, node, name=f"topic reader direct read node {node.node_id}")

    async def _run_node(self, node: NodeStream) -> None:
        try:
            await node.run()
        except Exception as exc:  # raised by ``run`` as it is, not in a group
            if self._failure is None:
                self._failure = exc
            if self._group is not None:
                self._group.cancel_scope.cancel()

    def _unplace(self, partition: DirectPartition) -> None:
        node = self.nodes.get(partition.node_id)
        if node is None:
            return
        node.partitions.pop(partition.partition_session_id, None)
        if not node.partitions:
            del self.nodes[partition.node_id]
            node.close()

    # --- what the node streams report -------------------------------------------------------------

    async def _on_read(self, response: Any, external: ExternalPayloads | None) -> None:
        read = response.direct_read_response
        psid = read.partition_session_id
        read_id = read.direct_read_id
        partition = self.partitions.get(psid)
        if partition is not None:
            if read_id <= partition.received:
                return  # sent again after a restart, and received before: handed out already
            if read_id != partition.received + 1:
                raise InternalError(
                    f"protocol violation: direct read {read_id} of partition session {psid} "
                    f"follows direct read {partition.received}"
                )
            partition.received = read_id
        # A partition session ended here may still be known to the server (a stop it has not
        # finished): its reads are acknowledged in order all the same.
        bytes_size = read.bytes_size or read.ByteSize()
        await self._deliver(psid, read_id, bytes_size, read.partition_data, external)

    def _give_up(self, reason: str) -> None:
        if self.gave_up:
            return
        self.gave_up = True
        for node in list(self.nodes.values()):
            node.close()
        self.nodes.clear()
        self._unsupported(reason)


class DirectPartition:
    """One partition session read directly: where, and how far."""

    __slots__ = ("generation", "node_id", "partition_session_id", "received")

    def __init__(self, partition_session_id: int, node_id: int, generation: int) -> None:
        self.partition_session_id = partition_session_id
        self.node_id = node_id
        self.generation = generation
        self.received = 0
        """The id of the last read received."""


class NodeStream:
    """The direct read stream to one node, reopened as long as the node has partition sessions."""

    def __init__(self, owner: DirectReads, node_id: int) -> None:
        self._owner = owner
        self.node_id = node_id
        self.partitions: dict[int, DirectPartition] = {}
        self._outbox: list[pb.StreamDirectReadMessage.FromClient] = []
        self._wake = asyncio.Event()
        self._closed = False
        self._scope: anyio.CancelScope | None = None
        self._keeper = StreamKeeper(
            self._describe,
            owner._retry,
            logger=logger,
            log_fields=owner._log_fields,
            on_reconnect=lambda error: None,
            closing=lambda: self._closed or owner.gave_up,
        )

    def _describe(self) -> str:
        return f"topic reader direct read (node {self.node_id}, session {self._owner.read_session_id})"

    def add(self, partition: DirectPartition) -> None:
        self.partitions[partition.partition_session_id] = partition
        self._send_start(partition)

    def close(self) -> None:
        self._closed = True
        if self._scope is not None:
            self._scope.cancel()

    def _send_start(self, partition: DirectPartition) -> None:
        self._outbox.append(pb.StreamDirectReadMessage.FromClient(
            start_direct_read_partition_session_request={
                "partition_session_id": partition.partition_session_id,
                "generation": partition.generation,
                "last_direct_read_id": partition.received,
            }
        ))
        self._wake.set()

    async def run(self) -> None:
        with anyio.CancelScope() as scope:
            self._scope = scope
            if self._closed:
                return
            await self._keeper.run(self._session)

    async def _session(self) -> None:
        owner = self._owner
        transport = owner._transport
        parser = ReadResponseParser(direct=True)
        if transport.discovers and transport.balancer.for_node(self.node_id) is None:
            # A node discovery has not named (yet: the reader started before the first round
            # answered, or the node is new): ask now. A failure shows at the stream's own open.
            with contextlib.suppress(YdbTopicError):
                await transport.discover(timeout=owner._init_timeout)
        routed = transport.balancer.for_node(self.node_id) is not None
        try:
            stream, _ = await BidiStream.open(
                transport,
                DIRECT_READ,
                owner.init_request(),
                expect="init_response",
                timeout=owner._init_timeout,
                node_id=self.node_id,
                deserializer=parser,
            )
        except (UnimplementedError, DeadlineExceededError) as exc:
            if not owner.answered:
                owner._give_up(f"the server did not open a direct read stream ({exc!r})")
            raise
        owner.answered = True
        self._keeper.connected(owner.read_session_id)
        try:
            self._outbox = []
            for partition in self.partitions.values():
                self._send_start(partition)
            failures: list[Exception] = []

            async def guarded(loop: Callable[[], Awaitable[None]]) -> None:
                try:
                    await loop()
                except Exception as exc:
                    failures.append(exc)
                    group.cancel_scope.cancel()

            async with anyio.create_task_group() as group:
                group.start_soon(guarded, lambda: self._receive_loop(stream, parser))
                group.start_soon(guarded, lambda: self._send_loop(stream))
                if owner._token_refresh_interval > 0 and tokens_may_change(transport):
                    group.start_soon(guarded, self._token_loop)
            if failures:
                raise failures[0]
        except BadRequestError as exc:
            if not routed and _UNKNOWN_SESSION in str(exc):
                # The node could not be reached by its id (discovery does not name it): the
                # stream went to another node, which does not hold the partitions.
                owner._give_up(f"node {self.node_id} cannot be reached directly ({exc})")
            # As YDB's C++ SDK: retried as an overload (the cache may not know the session yet).
            raise OverloadedError(exc.message, exc.issues) from exc
        finally:
            stream.close()

    async def _receive_loop(self, stream: DirectStream, parser: ReadResponseParser) -> None:
        owner = self._owner
        keeper = self._keeper
        while True:
            message = await stream.read()
            kind = message.WhichOneof("server_message")
            if kind == "direct_read_response":
                await owner._on_read(message, parser.payloads_of(message))
                keeper.progressed()
            elif kind == "start_direct_read_partition_session_response":
                pass  # the reads follow
            elif kind == "stop_direct_read_partition_session":
                stop = message.stop_direct_read_partition_session
                # The control stream says what happens next: a new location, or the session's end.
                logger.debug(
                    "topic reader: node %d stopped direct reads of partition session %d: %s %s",
                    self.node_id, stop.partition_session_id, stop.status,
                    "; ".join(issue.message for issue in stop.issues), extra=owner._log_fields(),
                )
            elif kind == "update_token_response":
                pass
            else:
                logger.debug("topic reader: ignoring direct read message %s", kind, extra=owner._log_fields())

    async def _send_loop(self, stream: DirectStream) -> None:
        wake = self._wake
        while True:
            await wake.wait()
            wake.clear()
            outbox, self._outbox = self._outbox, []
            for message in outbox:
                await stream.write(message)

    async def _token_loop(self) -> None:
        owner = self._owner

        def send(token: str) -> None:
            self._outbox.append(pb.StreamDirectReadMessage.FromClient(update_token_request={"token": token}))
            self._wake.set()

        await refresh_tokens(
            owner._transport,
            owner._token_refresh_interval,
            send,
            describe=self._describe,
            logger=logger,
            log_fields=owner._log_fields,
        )
