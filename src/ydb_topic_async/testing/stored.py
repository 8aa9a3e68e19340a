"""What the local server stores, as plain values: messages, topic settings, and the storage's refusal.

These types sit below everything else of the server's storage: the partition logs
(``storage``) keep ``StoredRow``s and hand out ``StoredMessage``s, the change log
(``change_log``, the durable ``journal``) records them, and every service answers a
``StorageError`` with its YDB status.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple, overload

DEFAULT_RETENTION = dt.timedelta(hours=24)
DEFAULT_WRITE_SPEED = 1_048_576
"""Bytes per second a partition accepts by default (and its default burst)."""

READ_MESSAGE_OVERHEAD = 32
READ_ITEM_OVERHEAD = 6
"""About what a message and a metadata item add to a ReadResponse besides their bytes: a read
fills the client's credit by serialized size, as YDB's partition reads count stored blob sizes."""

_AUTOPARTITIONING_OFF = (0, 1)  # AUTO_PARTITIONING_STRATEGY_UNSPECIFIED, _DISABLED


class StorageError(Exception):
    """A request the storage refuses; ``status`` is the YDB status name to answer with, and
    ``issue_code`` the code of its issue (0: none)."""

    def __init__(self, status: str, message: str, issue_code: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.issue_code = issue_code


def read_size(message: StoredMessage) -> int:
    """What ``message`` adds to a ReadResponse, about: its bytes plus field framing."""
    size = len(message.data) + len(message.message_group_id) + READ_MESSAGE_OVERHEAD
    for key, value in message.metadata:
        size += len(key) + len(value) + READ_ITEM_OVERHEAD
    return size


class StoredMessage(NamedTuple):
    """One message in a partition, as the writer sent it (data possibly compressed).

    Partitions keep their messages as plain tuples of these fields, in this order (``StoredRow``), and
    hand out ``StoredMessage``s when asked (``Partition.messages``, ``Partition.read``).
    """

    offset: int
    seq_no: int
    created_at_ns: int
    written_at_ns: int
    producer_id: str
    message_group_id: str
    codec: int
    data: bytes
    uncompressed_size: int
    metadata: tuple[tuple[str, bytes], ...] = ()
    write_session_meta: tuple[tuple[str, str], ...] = ()


StoredRow = tuple[
    int, int, int, int, str, str, int, bytes, int, tuple[tuple[str, bytes], ...], tuple[tuple[str, str], ...]
]
"""A stored message as the partition keeps it: ``StoredMessage``'s fields in a plain tuple.

Plain tuples of immutable values are what the garbage collector stops tracking after their
first collection; NamedTuple instances (like any subclass) stay tracked, and a server holding a
million messages would have every full collection walk all of them."""
message_of = StoredMessage._make
"""The ``StoredMessage`` of a ``StoredRow`` (made on demand; the log keeps rows)."""
ROW_OFFSET: Final = 0
"""Where a ``StoredRow`` keeps its offset, write time and data (read by index where speed counts)."""
ROW_WRITTEN_AT: Final = 3
ROW_DATA: Final = 7
assert StoredMessage._fields[ROW_OFFSET] == "offset" and StoredMessage._fields[ROW_WRITTEN_AT] == "written_at_ns"
assert StoredMessage._fields[ROW_DATA] == "data"


class StoredMessages(Sequence[StoredMessage]):
    """A read-only view of a partition's log: its rows as ``StoredMessage``s, made on access."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[StoredRow]) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> StoredMessage: ...
    @overload
    def __getitem__(self, index: slice) -> list[StoredMessage]: ...
    def __getitem__(self, index: int | slice) -> StoredMessage | list[StoredMessage]:
        if isinstance(index, slice):
            return [message_of(row) for row in self._rows[index]]
        return message_of(self._rows[index])

    def __iter__(self) -> Iterator[StoredMessage]:
        return map(message_of, self._rows)

    def __reversed__(self) -> Iterator[StoredMessage]:
        return map(message_of, reversed(self._rows))


@dataclass
class TopicSettings:
    """The settings a topic was created (or altered) with, defaults resolved as YDB resolves them."""

    min_active_partitions: int = 1
    max_active_partitions: int | None = None
    """The partition strategy's fields: None while nothing set them (describe then reports the
    tablet config's defaults); ``auto_partitioning_strategy`` 0 means no strategy is stored."""
    partition_count_limit: int = 0
    auto_partitioning_strategy: int = 0
    stabilization_window_s: float | None = None
    up_utilization_percent: int | None = None
    down_utilization_percent: int | None = None
    retention: dt.timedelta = DEFAULT_RETENTION
    retention_storage_mb: int = 0
    supported_codecs: list[int] = field(default_factory=list)
    partition_write_speed_bytes_per_second: int = DEFAULT_WRITE_SPEED
    partition_write_burst_bytes: int = DEFAULT_WRITE_SPEED
    attributes: dict[str, str] = field(default_factory=dict)
    metering_mode: int = 0
    metrics_level: int | None = None
    """The topic's metrics level, when one was set (YDB keeps it unset by default)."""

    @property
    def autopartitioned(self) -> bool:
        return self.auto_partitioning_strategy not in _AUTOPARTITIONING_OFF
