"""What the reader hands out: messages, batches, partition sessions, and topic selectors.

A ``TopicMessage`` is built per message on the hot path, so it keeps the protobuf record and
converts rarely used fields (timestamps, metadata) only when they are read.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import InvalidArgumentError

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def timestamp_to_datetime(ts: Any) -> dt.datetime:
    """A protobuf ``Timestamp`` as an aware UTC datetime (microsecond precision)."""
    return _EPOCH + dt.timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


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


class PartitionSessionState(enum.Enum):
    ACTIVE = "active"
    STOPPING = "stopping"  # graceful stop requested: buffered data is still delivered
    CLOSED = "closed"


class PartitionSession:
    """One partition read within one stream; offsets read in it can be committed only through it.

    ``committed_offset`` is the latest committed offset the server reported. ``ended`` is set
    when an auto-partitioned topic's partition has no more data (``child_partition_ids`` then
    name its successors).
    """

    __slots__ = (
        "_ack_waiters",
        "_buffered",
        "_delivered_end",
        "_next_commit_start",
        "_recorded",
        "_stop_deadline",
        "child_partition_ids",
        "committed_offset",
        "ended",
        "id",
        "partition_end_offset",
        "partition_id",
        "partition_start_offset",
        "state",
        "topic_path",
    )

    def __init__(
        self,
        session_id: int,
        topic_path: str,
        partition_id: int,
        committed_offset: int,
        partition_start_offset: int,
        partition_end_offset: int,
    ) -> None:
        self.id = session_id
        self.topic_path = topic_path
        self.partition_id = partition_id
        self.committed_offset = committed_offset
        self.partition_start_offset = partition_start_offset
        self.partition_end_offset = partition_end_offset
        self.state = PartitionSessionState.ACTIVE
        self.ended = False
        self.child_partition_ids: tuple[int, ...] = ()
        self._next_commit_start = committed_offset
        """Commit range start of the next message received: ranges cover gaps between offsets."""
        self._buffered = 0
        """Messages received in this session and not yet handed to the user."""
        self._delivered_end = committed_offset
        """End (offset + 1) of the last message handed to the user."""
        self._recorded: list[tuple[int, int]] = []
        """Commit ranges requested and not yet below the committed offset."""
        self._ack_waiters: list[tuple[int, Any]] = []
        self._stop_deadline: float | None = None

    @property
    def closed(self) -> bool:
        """True once the session ended: its offsets can no longer be committed."""
        return self.state is PartitionSessionState.CLOSED

    def __repr__(self) -> str:
        return (
            f"PartitionSession(id={self.id}, topic={self.topic_path!r}, partition={self.partition_id}, "
            f"state={self.state.value}, committed={self.committed_offset})"
        )


class _ServerBatchInfo:
    """Fields shared by every message of one server batch (one producer write session)."""

    __slots__ = ("_session_metadata", "_written_at", "codec", "producer_id", "proto")

    def __init__(self, proto: Any) -> None:
        self.proto = proto
        self.producer_id: str = proto.producer_id
        self.codec: int = proto.codec
        self._session_metadata: dict[str, str] | None = None
        self._written_at: dt.datetime | None = None

    @property
    def session_metadata(self) -> dict[str, str]:
        if self._session_metadata is None:
            self._session_metadata = dict(self.proto.write_session_meta)
        return self._session_metadata

    @property
    def written_at(self) -> dt.datetime:
        if self._written_at is None:
            self._written_at = timestamp_to_datetime(self.proto.written_at)
        return self._written_at


class TopicMessage:
    """One message read from a topic. ``data`` is decoded; other fields are as written."""

    __slots__ = ("_commit_start", "_info", "_proto", "data", "offset", "partition_session", "seq_no")

    def __init__(
        self,
        data: bytes,
        offset: int,
        seq_no: int,
        info: _ServerBatchInfo,
        proto: Any,
        partition_session: PartitionSession,
        commit_start: int,
    ) -> None:
        self.data = data
        self.offset = offset
        self.seq_no = seq_no
        self._info = info
        self._proto = proto
        self.partition_session = partition_session
        self._commit_start = commit_start

    @property
    def created_at(self) -> dt.datetime:
        """When the producer created the message (UTC), as the writer set it."""
        return timestamp_to_datetime(self._proto.created_at)

    @property
    def written_at(self) -> dt.datetime:
        """When the server stored the message (UTC)."""
        return self._info.written_at

    @property
    def created_at_us(self) -> int:
        """``created_at`` in microseconds since the epoch, without building a datetime (bulk conversion)."""
        ts = self._proto.created_at
        return int(ts.seconds * 1_000_000 + ts.nanos // 1000)

    @property
    def producer_id(self) -> str:
        """The writer's producer id (empty when it wrote without one)."""
        return self._info.producer_id

    @property
    def message_group_id(self) -> str:
        """The message group the writer set (empty if none)."""
        return str(self._proto.message_group_id)

    @property
    def metadata_items(self) -> dict[str, bytes]:
        """The message's metadata, key to value."""
        items = self._proto.metadata_items
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


class MessageBatch:
    """Messages of one partition session, in offset order."""

    __slots__ = ("messages", "partition_session")

    def __init__(self, messages: list[TopicMessage], partition_session: PartitionSession) -> None:
        self.messages = messages
        self.partition_session = partition_session

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
        return self.messages[0]._commit_start

    @property
    def end_offset(self) -> int:
        """One past the last message's offset: the committed offset after committing this batch."""
        return self.messages[-1].offset + 1

    @property
    def commit_range(self) -> tuple[int, int]:
        """The offsets ``[start, end)`` committing this batch marks processed."""
        return self.start_offset, self.end_offset

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[TopicMessage]:
        return iter(self.messages)

    def __getitem__(self, index: int) -> TopicMessage:
        return self.messages[index]

    def __repr__(self) -> str:
        return (
            f"MessageBatch(topic={self.topic_path!r}, partition={self.partition_id}, "
            f"offsets={self.messages[0].offset}..{self.messages[-1].offset}, messages={len(self.messages)})"
        )
