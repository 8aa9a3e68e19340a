"""Seeks: moving a partition session's position while the reader holds it.

YDB's read protocol has no seek: a partition session reads on from where it started, and only a
new partition session (a new ``StartPartitionSessionRequest``, answered with a ``read_offset``)
starts elsewhere. The server sends one for a partition only when it assigns the partition to a
stream, so restarting one partition would mean restarting the whole stream: every partition
session of the reader ends, buffered messages are dropped and read again, and in a consumer
group the partitions are balanced anew (the one sought may go to another reader, the seek with
it). A seek here leaves the stream and its partition sessions alone:

- Forward (to an offset at or after the position, the end of what the user was handed): the
  buffered messages below the offset are passed over and so are those below it that arrive
  later (``ReadBuffer.skip_to``, the session's bookkeeping's ``skip_to``). Cost: what the server sends
  below the offset still crosses the network.
- Backward (below the position, down to the committed offset): the messages from the offset up
  to the position are read again on a second stream without a consumer (``Replay``), one
  partition, from that offset; the session's own messages wait meanwhile (``hold``) and follow
  them. Cost: a short-lived stream and its handshake per backward seek.

Commits stay those of the one partition session: a message read again commits through it like
any other, and ranges sent before (a message committed before the seek and again after it) are
not sent twice (``CommitTracker.take_request``). A forward seek commits nothing: what it passed
over stays uncommitted until the user commits the ``SkippedOffsets`` the seek returns.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import anyio

from .. import _codecs
from .._errors import ConnectionLostError
from .._proto import ydb_topic_pb2 as pb
from .._stream import BidiStream
from .parsing import STREAM_READ, ReadResponseParser
from .parts import BufferedPart, server_batches

if TYPE_CHECKING:
    from .._transport import Transport
    from .flow_control import ReadBuffer
    from .messages import PartitionSession
    from .wire import _ServerBatchInfo

ReadStream = BidiStream[pb.StreamReadMessage.FromClient, pb.StreamReadMessage.FromServer]

REPLAY_WINDOW = 4 * 1024 * 1024
"""The most bytes a backward seek reads ahead at a time, counted as the reader's buffer counts
them (decoded; less with a smaller buffer)."""


class SideRead:
    """One partition read from ``start`` on a stream of its own, without a consumer (YDB lets a
    reader without one start anywhere): ``async with SideRead(...) as side: await side.next_part()``."""

    def __init__(
        self,
        transport: Transport,
        path: str,
        partition_id: int,
        start: int,
        *,
        window: int,
        decoders: Mapping[int, _codecs.Transform],
        reader_name: str,
        init_timeout: float,
        read_from: dt.datetime | None = None,
        max_lag: dt.timedelta | None = None,
    ) -> None:
        self._transport = transport
        self._path = path
        self._partition_id = partition_id
        self.start = start
        self._window = window
        self._decoders = decoders
        self._reader_name = reader_name
        self._init_timeout = init_timeout
        self._read_from = read_from
        self._max_lag = max_lag
        self._parser = ReadResponseParser()
        self._stream: ReadStream | None = None
        self._session_id: int | None = None
        self.credit = 0
        """Bytes the server may still send."""

    async def __aenter__(self) -> SideRead:
        request = pb.StreamReadMessage.FromClient()
        init = request.init_request
        init.reader_name = self._reader_name
        item = init.topics_read_settings.add(path=self._path, partition_ids=[self._partition_id])
        if self._read_from is not None:
            item.read_from.FromDatetime(self._read_from)
        if self._max_lag is not None:
            item.max_lag.FromTimedelta(self._max_lag)
        self._stream, _ = await BidiStream.open(
            self._transport,
            STREAM_READ,
            request,
            expect="init_response",
            timeout=self._init_timeout,
            deserializer=self._parser,
        )
        await self.grant(self._window)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._stream is not None:
            self._stream.close()

    async def grant(self, nbytes: int) -> None:
        """Let the server send ``nbytes`` more."""
        assert self._stream is not None
        if nbytes > 0:
            self.credit += nbytes
            await self._stream.write(pb.StreamReadMessage.FromClient(read_request={"bytes_size": nbytes}))

    async def next_part(self) -> tuple[list[_ServerBatchInfo], int, bool, int] | None:
        """The next received messages: their server batches, how many messages, whether some
        need decoding, and the response's size; None when the partition has no more (it ended).

        Raises:
            ConnectionLostError: The server stopped the partition session before its end.
        """
        stream = self._stream
        assert stream is not None
        while True:
            message = await stream.read()
            kind = message.WhichOneof("server_message")
            if kind == "start_partition_session_request":
                start = message.start_partition_session_request
                self._session_id = start.partition_session.partition_session_id
                answer = pb.StreamReadMessage.FromClient()
                response = answer.start_partition_session_response
                response.partition_session_id = self._session_id
                response.read_offset = self.start
                await stream.write(answer)
            elif kind == "read_response":
                read = message.read_response
                external = self._parser.payloads_of(message)
                self.credit -= read.bytes_size
                for index, part in enumerate(read.partition_data):
                    if part.partition_session_id != self._session_id:
                        continue
                    batches, count, compressed = server_batches(part, external, index, self._decoders)
                    if count:
                        return batches, count, compressed, read.bytes_size
                await self.grant(read.bytes_size)  # nothing in it: let the server go on
            elif kind == "end_partition_session":
                return None  # the partition was split or merged and read to its end
            elif kind == "stop_partition_session_request":
                # The server may stop a partition session at any time, with the range not read
                # yet: taking that for the end would pass over it. The replay fails instead and
                # the reader reads everything uncommitted again.
                raise ConnectionLostError(
                    f"the server stopped reading {self._path} partition {self._partition_id} again"
                    f" from offset {self.start} before its end (a StopPartitionSessionRequest)"
                )


class Replay:
    """A backward seek being served: ``session``'s messages from ``start`` up to ``resume`` (where
    its own stream's messages continue), read again by a ``SideRead`` and put in the buffer
    ahead of them. ``open_side(start)`` makes the side read; ``failed(error)`` is told when it
    breaks (the reader then reads everything uncommitted again on a new stream)."""

    def __init__(
        self,
        session: PartitionSession,
        start: int,
        resume: int,
        *,
        buffer: ReadBuffer,
        window: int,
        open_side: Callable[[PartitionSession, int], SideRead],
        failed: Callable[[Replay, BaseException], None],
    ) -> None:
        self.session = session
        self.start = start
        self.resume = resume
        self._buffer = buffer
        self._window = window
        self._open_side = open_side
        self._failed = failed
        self.fetching = True
        self._parts = 0
        """Parts put in the buffer and not taken in full yet."""
        self._held = 0
        """Bytes put in the buffer and not taken yet."""
        self._room = asyncio.Event()
        self._scope: anyio.CancelScope | None = None
        self._ended = False

    def __repr__(self) -> str:
        return f"Replay({self.session!r}, {self.start}..{self.resume})"

    async def run(self) -> None:
        """Read the messages again into the buffer, then let the session's own follow them."""
        with anyio.CancelScope() as scope:
            self._scope = scope
            if self._ended:
                return
            # ``cancel`` may come while the side read awaits gRPC, which ends a cancelled call
            # with a CancelledError of its own: in this task, the scope would not take it for
            # its cancellation and would let it end the whole read stream. The reading runs as a
            # child task; what reaches the scope is then anyio's own cancellation.
            async with anyio.create_task_group() as group:
                group.start_soon(self._read_or_fail)

    async def _read_or_fail(self) -> None:
        try:
            await self._read()
        except Exception as exc:
            self.fetching = False
            self._failed(self, exc)

    async def _read(self) -> None:
        session = self.session
        buffer = self._buffer
        commit_start = self.start
        async with self._open_side(session, self.start) as side:
            while True:
                got = await side.next_part()
                if got is None:
                    self._finish(max(commit_start, self.resume))
                    return
                batches, count, compressed, nbytes = got
                part = BufferedPart(session, batches, count, nbytes, commit_start, compressed)
                part.replay = self
                buffer.measured(nbytes, part.charge, part.share)
                commit_start = batches[-1].records[-1].offset + 1
                self._parts += 1
                self._held += part.bytes_left
                buffer.push(part)
                if commit_start >= self.resume:
                    self._finish(commit_start)
                    return
                # The next response once most of what was read again was taken.
                while self._held > self._window // 2:
                    self._room.clear()
                    await self._room.wait()
                # ``_held`` counts decoded bytes: so does the window; the credit is on the wire.
                await side.grant(int((self._window - self._held) / buffer.ratio) - side.credit)

    def taken(self, nbytes: int, part_done: bool) -> None:
        """``nbytes`` of this replay's parts were handed out (``part_done``: a part's last)."""
        self._held -= nbytes
        if part_done:
            self._parts -= 1
        self._room.set()
        if not self.fetching and not self._parts:
            self._end()

    def _finish(self, end: int) -> None:
        """Read up to ``end`` (at or past ``resume``): the session's own messages go on from there."""
        self.fetching = False
        session = self.session
        self._buffer.skip_to(session, end)
        books = session._bookkeeping
        if end > books.next_commit_start:
            books.skip_to = end
            books.next_commit_start = end
        if not self._parts:
            self._end()

    def cancel(self) -> None:
        """Stop (a new seek, or the session ended): what was read again and not taken is dropped."""
        self.fetching = False
        if self._scope is not None:
            self._scope.cancel()
        self._buffer.drop_replay(self)
        self._parts = 0
        self._end()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        session = self.session
        books = session._bookkeeping
        if books.replay is self:
            books.replay = None
            books.hold = False
            self._buffer.paused_changed(session)
            self._buffer.drained(session)


def position_of(session: PartitionSession) -> int:
    """Where ``session``'s own stream continues for the user: the end of what was handed out,
    or, while a backward seek is read again, where that seek will hand over."""
    books = session._bookkeeping
    replay = books.replay
    return replay.resume if replay is not None else books.delivered_end
