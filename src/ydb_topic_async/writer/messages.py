"""What users hand to a writer (``Message``) and what they get back (results, init info, statistics)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .._errors import InvalidArgumentError
from .._limits import MAX_METADATA_BYTES, MAX_METADATA_ITEMS
from .._validate import check_utf8

MetadataValue = bytes | str
MetadataInput = Mapping[str, MetadataValue] | Iterable[tuple[str, MetadataValue]]


class Message:
    """One topic message.

    ``data`` is the payload (``str`` is sent as UTF-8). ``seq_no`` is the deduplication number
    (only with ``auto_seqno=False``); ``created_at`` overrides the creation time (only with
    ``auto_created_at=False``, naive datetimes are taken as UTC); ``metadata`` is a mapping or a
    list of ``(key, value)`` pairs with unique keys, sent uncompressed next to the payload.
    """

    __slots__ = ("created_at", "data", "metadata", "seq_no")

    def __init__(
        self,
        data: bytes | str,
        *,
        seq_no: int | None = None,
        created_at: dt.datetime | None = None,
        metadata: MetadataInput | None = None,
    ) -> None:
        self.data = data
        self.seq_no = seq_no
        self.created_at = created_at
        self.metadata = metadata

    def __repr__(self) -> str:
        size = len(self.data)
        return f"Message(<{size} {'chars' if isinstance(self.data, str) else 'bytes'}>, seq_no={self.seq_no!r})"


def payload_bytes(data: object, what: str = "Message.data") -> bytes:
    """A message's payload as the bytes to send: ``str`` as UTF-8 (refused when it holds a lone
    surrogate), any bytes-like object as ``bytes``."""
    if isinstance(data, str):
        return check_utf8(data, what)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidArgumentError(f"{what} must be bytes or str, not {type(data).__name__}")


@dataclass(frozen=True, slots=True)
class Written:
    """The server stored the message at ``offset`` of ``partition_id``."""

    partition_id: int
    offset: int
    seq_no: int


@dataclass(frozen=True, slots=True)
class Skipped:
    """The server already had a message with this (or a later) ``seq_no`` from this producer."""

    partition_id: int
    seq_no: int


@dataclass(frozen=True, slots=True)
class WrittenInTx:
    """The message was written inside a transaction; its offset is assigned at commit."""

    partition_id: int
    seq_no: int


WriteResult = Written | Skipped | WrittenInTx


@dataclass(frozen=True, slots=True)
class InitInfo:
    """What the server answered to the writer's first handshake."""

    last_seq_no: int
    """The last sequence number stored for this producer (0 for a new producer)."""
    partition_id: int
    supported_codecs: tuple[int, ...]
    """Codecs the topic accepts; empty means any."""
    session_id: str


@dataclass(frozen=True, slots=True)
class WriteStatistics:
    """Server-side timings reported with the latest acknowledgement batch."""

    partition_id: int
    messages: int
    """How many acknowledgements that batch carried."""
    persisting_time: dt.timedelta
    min_queue_wait_time: dt.timedelta
    max_queue_wait_time: dt.timedelta
    partition_quota_wait_time: dt.timedelta
    topic_quota_wait_time: dt.timedelta


def check_metadata(metadata: MetadataInput) -> tuple[list[tuple[str, bytes]], int]:
    """Validate metadata items; return them as (key, bytes) pairs and their size in bytes (keys
    in UTF-8 plus values), which ``MAX_METADATA_BYTES`` bounds."""
    try:
        pairs = iter(metadata.items() if isinstance(metadata, Mapping) else metadata)
    except TypeError:
        raise InvalidArgumentError(
            f"metadata must be a mapping or an iterable of (key, value) pairs, not {type(metadata).__name__}"
        ) from None
    items: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    nbytes = 0
    for pair in pairs:
        try:
            key, value = pair
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"metadata items must be (key, value) pairs, got {pair!r}") from None
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(f"metadata keys must be non-empty strings, got {key!r}")
        key_bytes = check_utf8(key, "a metadata key")
        if key in seen:
            raise InvalidArgumentError(f"duplicate metadata key {key!r}")
        seen.add(key)
        if isinstance(value, str):
            value = check_utf8(value, f"metadata value for {key!r}")
        elif isinstance(value, (bytes, bytearray)):
            value = bytes(value)
        else:
            raise InvalidArgumentError(f"metadata value for {key!r} must be bytes or str, not {type(value).__name__}")
        nbytes += len(key_bytes) + len(value)
        items.append((key, value))
    # YDB counts the limit in bytes (UTF-8 for text), so a non-ASCII key or value counts more.
    if nbytes > MAX_METADATA_BYTES:
        raise InvalidArgumentError(
            f"message metadata has {nbytes} bytes in keys and values (UTF-8); the limit is {MAX_METADATA_BYTES}"
        )
    if len(items) > MAX_METADATA_ITEMS:
        raise InvalidArgumentError(f"a message may carry at most {MAX_METADATA_ITEMS} metadata items")
    return items, nbytes
