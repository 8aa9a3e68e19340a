"""What the reader hands out: messages, batches, partition sessions, and topic selectors.

A ``TopicMessage`` is built per message on the hot path: it holds its payload, offset and
sequence number, and reads its rarely used fields (creation time, message group, metadata) from
the response it came in only when they are asked for. A large message copies those few fields
instead, so that holding it does not hold the whole response (its payload a second time).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Any

from .._errors import InvalidArgumentError
from .bookkeeping import PartitionSessionState as PartitionSessionState  # public here, kept by the bookkeeping
from .bookkeeping import SessionBookkeeping
from .wire import (
    DETACH_SIZE,
    EPOCH,
    _DetachedInfo,
    _ServerBatchInfo,
    records_between,
    timestamp_to_datetime,
    timestamp_us,
)

_MICROSECOND = dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class TopicSelector:
    """What to read from one topic.

    ``partitions``: only these partition ids (default: all). ``read_from``: skip messages
    written before this time. ``max_lag``: skip messages older than this when read.
    ``start_offsets``: partition id -> first offset to read (mainly for readers without a
    consumer); its keys are the partitions to read when ``partitions`` is not given. With a
    consumer, YDB refuses a start below the consumer's committed offset (BadRequestError): move
    the committed offset back with ``TopicClient.commit_offset`` to read again.
    """

    path: str
    partitions: Sequence[int] | None = None
    read_from: dt.datetime | None = None
    max_lag: dt.timedelta | None = None
    start_offsets: Mapping[int, int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip("/"):
            raise InvalidArgumentError(f"selector path must be a non-empty string, got {self.path!r}")
        if isinstance(self.partitions, (str, bytes, int)):
            raise InvalidArgumentError("partitions must be a sequence of partition ids")
        for pid in self.partitions or ():
            _check_offset(pid, "partition id")
        for pid, offset in (self.start_offsets or {}).items():
            _check_offset(pid, "partition id")
            _check_offset(offset, f"start offset of partition {pid}")
        if self.read_from is not None and not isinstance(self.read_from, dt.datetime):
            raise InvalidArgumentError("read_from must be a datetime")
        lag = self.max_lag
        if lag is not None and (not isinstance(lag, dt.timedelta) or lag.total_seconds() < 0):
            raise InvalidArgumentError("max_lag must be a non-negative timedelta")

    @property
    def partition_ids(self) -> list[int]:
        """The partitions named explicitly (empty: all)."""
        if self.partitions is not None:
            return list(self.partitions)
        return sorted(self.start_offsets or ())


def _check_offset(value: object, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative int, got {value!r}")


@dataclass(frozen=True)
class StartOffsets:
    """What ``on_partition_start`` may return: where to start reading and what to mark committed."""

    read_offset: int | None = None
    commit_offset: int | None = None


@dataclass(frozen=True)
class PartitionStatus:
    """A partition session's status as the server reports it."""

    partition_start_offset: int
    partition_end_offset: int
    committed_offset: int
    read_offset: int
    write_time_high_watermark: dt.datetime


class PartitionSession:
    """One partition read within one stream; offsets read in it can be committed only through it.

    A reader starts one when the server assigns it a partition, and hands it to
    ``on_partition_start`` and ``on_partition_stop``; each received message and batch names
    its own (``partition_session``), which ``seek``, ``partition_status`` and commits take. It
    shows the reader's view of the partition, read-only: the reader updates it as the server
    reports. It ends with its stream (a reconnect starts new ones) or when the server takes the
    partition away.
    """

    # Identity in slots of its own; what changes lives in the reader machinery's bookkeeping.
    __slots__ = ("_bookkeeping", "_id", "_partition_id", "_partition_start_offset", "_topic_path")

    def __init__(
        self,
        session_id: int,
        topic_path: str,
        partition_id: int,
        committed_offset: int,
        partition_start_offset: int,
        partition_end_offset: int,
    ) -> None:
        """A session as the server started it: a reader makes one for each partition it is
        assigned (build one yourself only to test your partition callbacks)."""
        self._id = session_id
        self._topic_path = topic_path
        self._partition_id = partition_id
        self._partition_start_offset = partition_start_offset
        self._bookkeeping = SessionBookkeeping(committed_offset, partition_end_offset)

    @property
    def id(self) -> int:
        """The server's id of the partition session (unique within its read stream)."""
        return self._id

    @property
    def topic_path(self) -> str:
        """The topic's full path."""
        return self._topic_path

    @property
    def partition_id(self) -> int:
        """The partition read."""
        return self._partition_id

    @property
    def committed_offset(self) -> int:
        """The latest committed offset the server reported (every offset below it is committed)."""
        return self._bookkeeping.committed_offset

    @property
    def partition_start_offset(self) -> int:
        """The partition's first stored offset when the session started."""
        return self._partition_start_offset

    @property
    def partition_end_offset(self) -> int:
        """The partition's end offset (one past its last message) as last reported: when the
        session started, or by a later ``TopicReader.partition_status``."""
        return self._bookkeeping.partition_end_offset

    @property
    def state(self) -> PartitionSessionState:
        """``ACTIVE``, ``STOPPING`` (the server asked for a graceful stop) or ``CLOSED``."""
        return self._bookkeeping.state

    @property
    def closed(self) -> bool:
        """True once the session ended: its offsets can no longer be committed."""
        return self._bookkeeping.state is PartitionSessionState.CLOSED

    @property
    def ended(self) -> bool:
        """True once an auto-partitioned topic's partition has no more data (it was split or
        merged): ``child_partition_ids`` then name its successors."""
        return self._bookkeeping.ended

    @property
    def child_partition_ids(self) -> tuple[int, ...]:
        """The partitions that continue this one once it ``ended`` (empty before)."""
        return self._bookkeeping.child_partition_ids

    def __repr__(self) -> str:
        return (
            f"PartitionSession(id={self._id}, topic={self._topic_path!r}, partition={self._partition_id}, "
            f"state={self.state.value}, committed={self.committed_offset})"
        )


@dataclass(frozen=True)
class CommitAck:
    """The server acknowledged a commit: ``partition_session``'s committed offset is now
    ``committed_offset`` (every offset below it is committed). Given to a reader's ``on_commit``."""

    partition_session: PartitionSession
    committed_offset: int

    @property
    def topic_path(self) -> str:
        """The topic's full path."""
        return self.partition_session.topic_path

    @property
    def partition_id(self) -> int:
        """The partition whose committed offset moved."""
        return self.partition_session.partition_id


@dataclass(frozen=True)
class SkippedOffsets:
    """The offsets ``[start, end)`` a forward ``TopicReader.seek`` passed over in one partition
    session. They stay uncommitted until this object is committed (``reader.commit(skipped)``):
    commits are contiguous, so until then the consumer's committed offset cannot move past
    ``start``."""

    partition_session: PartitionSession
    start: int
    end: int

    @property
    def commit_range(self) -> tuple[int, int]:
        """The offsets ``[start, end)`` committing this object marks processed."""
        return self.start, self.end


class TopicMessage:
    """One message read from a topic. ``data`` is decoded; other fields are as written."""

    # Slots: one is built per message handed out. The takes that build them swap ``_info`` for a
    # ``_DetachedInfo`` directly when a payload is large, so ``__init__`` stays the cheapest call it can be.
    __slots__ = ("_commit_start", "_index", "_info", "data", "offset", "partition_session")

    def __init__(
        self,
        data: bytes,
        offset: int,
        info: _ServerBatchInfo | _DetachedInfo,
        index: int,
        partition_session: PartitionSession,
        commit_start: int,
    ) -> None:
        self.data = data
        self.offset = offset
        self._info = info
        self._index = index
        """The message's position in its server batch (its record there holds the rarely used fields)."""
        self.partition_session = partition_session
        self._commit_start = commit_start

    @property
    def seq_no(self) -> int:
        """The sequence number the writer gave the message."""
        seq_no: int = self._info.record(self._index).seq_no
        return seq_no

    @property
    def created_at(self) -> dt.datetime:
        """When the producer created the message (UTC), as the writer set it."""
        return timestamp_to_datetime(self._info.record(self._index).created_at)

    @property
    def written_at(self) -> dt.datetime:
        """When the server stored the message (UTC)."""
        return self._info.written_at

    @property
    def created_at_us(self) -> int:
        """``created_at`` in microseconds since the epoch, without building a datetime (bulk conversion)."""
        return timestamp_us(self._info.record(self._index).created_at)

    @property
    def producer_id(self) -> str:
        """The writer's producer id (empty when it wrote without one)."""
        return self._info.producer_id

    @property
    def message_group_id(self) -> str:
        """The message group the writer set (empty if none)."""
        return str(self._info.record(self._index).message_group_id)

    @property
    def metadata_items(self) -> dict[str, bytes]:
        """The message's metadata, key to value."""
        items = self._info.record(self._index).metadata_items
        return {item.key: item.value for item in items} if items else {}

    @property
    def session_metadata(self) -> dict[str, str]:
        """The writer's session metadata (the same for every message of its write session)."""
        return self._info.session_metadata

    @property
    def codec(self) -> int:
        """The codec the payload was written with."""
        return self._info.codec

    @property
    def topic_path(self) -> str:
        """The topic's full path."""
        return self.partition_session.topic_path

    @property
    def partition_id(self) -> int:
        """The partition the message was read from."""
        return self.partition_session.partition_id

    @property
    def commit_range(self) -> tuple[int, int]:
        """The offsets ``[start, end)`` committing this message marks processed."""
        return self._commit_start, self.offset + 1

    def __repr__(self) -> str:
        return (
            f"TopicMessage(topic={self.topic_path!r}, partition={self.partition_id}, offset={self.offset}, "
            f"seq_no={self.seq_no}, size={len(self.data)})"
        )


@dataclass(slots=True)
class MessageColumns:
    """The messages of a batch as one list per field, in offset order (see ``MessageBatch.columns``).

    Times are whole microseconds since the epoch (UTC). ``metadata`` is None when no message of
    the batch has metadata items.
    """

    offset: list[int]
    seq_no: list[int]
    producer_id: list[str]
    message_group_id: list[str]
    created_at_us: list[int]
    written_at_us: list[int]
    metadata: list[dict[str, bytes]] | None
    data: list[bytes]

    def __len__(self) -> int:
        return len(self.offset)


_OFFSET, _SEQ_NO, _DATA = attrgetter("offset"), attrgetter("seq_no"), attrgetter("data")
_GROUP, _CREATED_AT, _ITEMS = attrgetter("message_group_id"), attrgetter("created_at"), attrgetter("metadata_items")


def _columns_of(messages: list[TopicMessage]) -> MessageColumns:
    """``MessageColumns`` of messages already built."""
    metadata = [m.metadata_items for m in messages]
    return MessageColumns(
        offset=[m.offset for m in messages],
        seq_no=[m.seq_no for m in messages],
        producer_id=[m.producer_id for m in messages],
        message_group_id=[m.message_group_id for m in messages],
        created_at_us=[m.created_at_us for m in messages],
        written_at_us=[(m.written_at - EPOCH) // _MICROSECOND for m in messages],
        metadata=metadata if any(metadata) else None,
        data=[m.data for m in messages],
    )


Run = tuple[_ServerBatchInfo, int, int, "list[bytes] | None"]
"""Consecutive messages of one server batch in a ``MessageBatch``: the batch, the range of
their indexes in it, and their decoded payloads (None: the raw payloads of the records)."""


_RAW = repeat(None)
"""The decoded payloads of a raw run: none, its records hold them (endless: zip stops at the records)."""


class MessageBatch:
    """Messages of one partition session, in offset order.

    A batch from ``receive_batch`` builds each ``TopicMessage`` as an iteration reaches it, so a
    batch processed message by message holds one of them at a time rather than thousands for the
    garbage collector to walk. ``len``, indexing and ``messages`` (the list, built once, after
    which iteration yields the same objects) work as on a list.
    """

    __slots__ = ("_count", "_end", "_large", "_messages", "_runs", "_start", "partition_session")

    def __init__(self, messages: list[TopicMessage], partition_session: PartitionSession) -> None:
        self._messages: list[TopicMessage] | None = messages
        self._runs: list[Run] = []
        self._count = len(messages)
        self._start = messages[0]._commit_start if messages else 0
        self._end = messages[-1].offset + 1 if messages else 0
        self._large = False
        self.partition_session = partition_session

    @classmethod
    def of_runs(
        cls, runs: list[Run], count: int, partition_session: PartitionSession, start: int, end: int, large: bool
    ) -> MessageBatch:
        """A batch of ``count`` received messages, built as iterated; ``[start, end)`` is its
        commit range. ``large``: some payloads may be large enough to detach (``DETACH_SIZE``)."""
        batch = cls.__new__(cls)
        batch._messages = None
        batch._runs = runs
        batch._count = count
        batch._start = start
        batch._end = end
        batch._large = large
        batch.partition_session = partition_session
        return batch

    @classmethod
    def _joined(cls, batches: list[MessageBatch]) -> MessageBatch:
        """One batch of consecutive batches of one partition session (in offset order)."""
        if len(batches) == 1:
            return batches[0]
        first = batches[0]
        if all(batch._messages is None for batch in batches):
            runs = [run for batch in batches for run in batch._runs]
            count = sum(batch._count for batch in batches)
            large = any(batch._large for batch in batches)
            return cls.of_runs(runs, count, first.partition_session, first._start, batches[-1]._end, large)
        return cls([message for batch in batches for message in batch], first.partition_session)

    def _build(self) -> Iterator[TopicMessage]:
        # Runs once per message. Records are visited one at a time (see ``records_between``).
        session = self.partition_session
        start = self._start
        large = self._large
        for info, first, end, payloads in self._runs:
            records = records_between(info.records, first, end)
            for index, (record, decoded) in enumerate(zip(records, payloads or _RAW, strict=False), first):
                offset = record.offset
                data = record.data if decoded is None else decoded
                message = TopicMessage(data, offset, info, index, session, start)
                if large and len(data) >= DETACH_SIZE:
                    message._info = _DetachedInfo(info, index)
                yield message
                start = offset + 1

    def columns(self) -> MessageColumns:
        """The messages' fields as one list per field, for code that converts many messages at
        once (into Arrow or pandas columns): a batch that was not iterated yet builds no
        ``TopicMessage`` for this, and reads each field of its records in one pass."""
        if self._messages is not None:
            return _columns_of(self._messages)
        offset: list[int] = []
        seq_no: list[int] = []
        producer_id: list[str] = []
        group: list[str] = []
        created_at: list[int] = []
        written_at: list[int] = []
        items: list[Any] = []
        data: list[bytes] = []
        # map() over attribute getters runs each per-record loop in C.
        for info, first, end, payloads in self._runs:
            records = info.records[first:end]
            offset += map(_OFFSET, records)
            seq_no += map(_SEQ_NO, records)
            group += map(_GROUP, records)
            data += map(_DATA, records) if payloads is None else payloads
            items += map(_ITEMS, records)
            created_at += [ts.seconds * 1_000_000 + ts.nanos // 1000 for ts in map(_CREATED_AT, records)]
            producer_id += [info.producer_id] * len(records)
            written_at += [timestamp_us(info.proto.written_at)] * len(records)
        metadata = [{i.key: i.value for i in each} if each else {} for each in items] if any(items) else None
        return MessageColumns(offset, seq_no, producer_id, group, created_at, written_at, metadata, data)

    @property
    def messages(self) -> list[TopicMessage]:
        """The messages, as a list."""
        if self._messages is None:
            self._messages = list(self._build())
            self._runs = []
        return self._messages

    @property
    def topic_path(self) -> str:
        """The topic's full path."""
        return self.partition_session.topic_path

    @property
    def partition_id(self) -> int:
        """The partition the messages were read from."""
        return self.partition_session.partition_id

    @property
    def start_offset(self) -> int:
        """Where this batch's commit range starts (may precede the first message's offset)."""
        return self._start

    @property
    def end_offset(self) -> int:
        """One past the last message's offset: the committed offset after committing this batch."""
        return self._end

    @property
    def commit_range(self) -> tuple[int, int]:
        """The offsets ``[start, end)`` committing this batch marks processed."""
        return self._start, self._end

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[TopicMessage]:
        messages = self._messages
        return iter(messages) if messages is not None else self._build()

    def __getitem__(self, index: int) -> TopicMessage:
        return self.messages[index]

    def __repr__(self) -> str:
        if self._messages is not None:
            first = self._messages[0].offset if self._messages else self._start
        else:
            info, index, _, _ = self._runs[0]
            first = info.records[index].offset
        return (
            f"MessageBatch(topic={self.topic_path!r}, partition={self.partition_id}, "
            f"offsets={first}..{self._end - 1}, messages={self._count})"
        )
