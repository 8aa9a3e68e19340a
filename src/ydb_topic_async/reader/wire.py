"""The private view of what the read stream received: one server batch's shared fields and records.

A ``ReadResponse`` holds, per partition, server batches: one producer's run of messages with the
fields they share (producer id, codec, write time, session metadata) and a record per message.
The reader keeps those records as protobuf parsed them until a receive takes them; a
``TopicMessage`` then reads its rarely used fields (creation time, message group, metadata) from
its ``_ServerBatchInfo`` only when asked. A large message copies those few fields into a
``_DetachedInfo`` instead, so that holding it does not hold the whole response.

Nothing here is public: the public message types (``messages``) are built on top of it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def timestamp_to_datetime(ts: Any) -> dt.datetime:
    """A protobuf ``Timestamp`` as an aware UTC datetime (microsecond precision)."""
    return EPOCH + dt.timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


def timestamp_us(ts: Any) -> int:
    """A protobuf ``Timestamp`` in whole microseconds since the epoch."""
    return int(ts.seconds * 1_000_000 + ts.nanos // 1000)


DETACH_SIZE = 64 * 1024
"""A message with at least this many payload bytes keeps its own copy of its rarely used fields
instead of the response they came in (see ``TopicMessage``)."""


def records_between(records: Any, first: int, end: int) -> Iterator[Any]:
    """The records ``[first, end)`` of a server batch, one at a time.

    Neither a slice (it builds every record's wrapper at once, for the garbage collector to walk)
    nor ``islice`` from a later record (it walks every record before ``first``: taking a batch's
    messages a few at a time would cost the square of its size).
    """
    if first == 0:
        return islice(records, end)
    return map(records.__getitem__, range(first, min(end, len(records))))


class _ServerBatchInfo:
    """One server batch (one producer's run of messages in one response): the fields its messages
    share, its records (each message's rarely used fields are read from there), and the decoder of
    its codec (None for raw payloads)."""

    __slots__ = ("_session_metadata", "_written_at", "codec", "decoder", "external", "producer_id", "proto", "records")

    def __init__(
        self,
        proto: Any,
        decoder: Callable[[bytes], bytes] | None = None,
        external: dict[int, memoryview] | None = None,
    ) -> None:
        self.proto = proto
        self.records = proto.message_data
        self.producer_id: str = proto.producer_id
        self.codec: int = proto.codec
        self.decoder = decoder
        self.external = external
        """Payloads left in the received bytes (see ``parsing``), by offset; their records' ``data``
        is empty. Only batches with a decoder have them."""
        self._session_metadata: dict[str, str] | None = None
        self._written_at: dt.datetime | None = None

    def view(self, record: Any) -> memoryview | None:
        """``record``'s payload where it was left in the received bytes (None: in the record)."""
        external = self.external
        return None if external is None else external.get(record.offset)

    def forget_payloads(self, first: int, end: int) -> None:
        """The payloads of the records ``[first, end)`` were decoded or copied out (or passed
        over): drop their views, so that the received bytes are freed once no payload of the
        response is left in them, even while the batch that took them is held."""
        external = self.external
        if external:
            records = self.records
            for index in range(first, min(end, len(records))):
                external.pop(records[index].offset, None)

    def payload(self, record: Any) -> bytes:
        """``record``'s payload as received (not decoded)."""
        view = self.view(record)
        data: bytes = record.data if view is None else bytes(view)
        return data

    def decoded_size(self, record: Any) -> int:
        """The size of ``record``'s payload once decoded, as its writer declared it; its size as
        received when it declared none. (The one place a payload's size is judged: what a take
        hands out, what decoding it costs, what a part holds.)"""
        size: int = record.uncompressed_size
        if not size:
            view = self.view(record)
            size = len(record.data if view is None else view)
        return size

    def declared_bytes(self) -> int:
        """What the writers declared the batch's payloads decode to (0 for a payload whose writer
        declared nothing): what a compressed batch holds besides its bytes on the wire."""
        return sum(record.uncompressed_size for record in self.records)

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

    def record(self, index: int) -> Any:
        """The record of the batch's message at ``index``."""
        return self.records[index]


class _DetachedInfo:
    """What a large message keeps of its server batch and its own record: the same fields as
    ``_ServerBatchInfo`` offers, copied, so that nothing refers to the response any more."""

    __slots__ = ("_record", "codec", "producer_id", "session_metadata", "written_at")

    def __init__(self, info: _ServerBatchInfo, index: int) -> None:
        self.producer_id = info.producer_id
        self.codec = info.codec
        self.session_metadata = info.session_metadata
        self.written_at = info.written_at
        source = info.record(index)
        record = type(source)()
        record.seq_no = source.seq_no
        if source.HasField("created_at"):
            record.created_at.CopyFrom(source.created_at)
        record.message_group_id = source.message_group_id
        record.metadata_items.extend(source.metadata_items)
        self._record = record

    def record(self, index: int) -> Any:
        del index
        return self._record
