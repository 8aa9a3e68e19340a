"""What a subscriber hands to its handlers: ``YdbMessage``, and the parsers that build it.

A message's headers are its metadata items (decoded as UTF-8); the key a publisher gave travels
in the metadata item ``__key``. Acknowledging maps onto YDB's commits through a ``Settlement``
that the subscriber provides: ``ack`` and ``reject`` commit, ``nack`` has the message (and what
follows it in its partition) delivered again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from faststream._internal.basic_types import DecodedMessage
from faststream.message import StreamMessage, decode_message

from .. import TopicMessage

KEY_METADATA = "__key"
"""The metadata item that carries a message's key (the partitioner adds ``__partition_key``)."""
PARTITION_KEY_METADATA = "__partition_key"
_NOT_HEADERS = frozenset((KEY_METADATA, PARTITION_KEY_METADATA))


class ReceivedMessage(Protocol):
    """What the parser reads of a received message: a ``TopicMessage``, or the in-memory test
    broker's ``InMemoryMessage``."""

    @property
    def data(self) -> bytes: ...
    @property
    def offset(self) -> int: ...
    @property
    def seq_no(self) -> int: ...
    @property
    def created_at(self) -> dt.datetime: ...
    @property
    def written_at(self) -> dt.datetime: ...
    @property
    def producer_id(self) -> str: ...
    @property
    def message_group_id(self) -> str: ...
    @property
    def metadata_items(self) -> Mapping[str, bytes]: ...
    @property
    def topic_path(self) -> str: ...
    @property
    def partition_id(self) -> int: ...


class Settlement(Protocol):
    """How a subscriber settles what its handlers acknowledge (a message or a batch)."""

    def commit(self, raw: Any) -> None:
        """Commit ``raw``'s offsets (``ack``, ``reject``)."""

    async def redeliver(self, raw: Any) -> None:
        """Leave ``raw`` uncommitted and have it, and what follows it in its partition, delivered
        again (``nack``)."""


class NoSettlement:
    """Settles nothing: the in-memory test broker's, where there is nothing to commit to."""

    def commit(self, raw: Any) -> None:
        pass

    async def redeliver(self, raw: Any) -> None:
        pass


NO_SETTLEMENT = NoSettlement()


class YdbMessage(StreamMessage[Any]):
    """A message read from a YDB topic (or, for a batch subscriber, a batch of one partition).

    ``ack()`` and ``reject()`` commit it; ``nack()`` leaves it uncommitted and has it delivered
    again, with the messages after it in its partition, while the other partitions go on (YDB
    commits contiguous offsets and has no per-message negative acknowledgement). For a batch,
    the fields describe its first message and ``raw_message`` is the batch.

    Attributes:
        key: The key it was published with (the ``__key`` metadata item), or None.
        topic: The topic's full path.
        partition_id: The partition it was read from.
        offset: Its offset in the partition.
        seq_no: The sequence number its writer gave it.
        producer_id: Its writer's producer id (empty when written without one).
        message_group_id: The message group its writer set (empty if none).
        created_at: When its producer created it (UTC).
        written_at: When the server stored it (UTC).
        metadata: Its metadata items as bytes (``headers`` holds them decoded).
    """

    def __init__(
        self,
        raw_message: Any,
        body: Any,
        *,
        headers: dict[str, str],
        reply_to: str,
        content_type: str | None,
        message_id: str,
        correlation_id: str | None,
        settlement: Settlement,
        first: ReceivedMessage,
        metadata: dict[str, bytes],
        batch_headers: list[dict[str, Any]] | None = None,
    ) -> None:
        # Built once per message: the arguments go on as they are, no packing on the way.
        StreamMessage.__init__(
            self,
            raw_message,
            body,
            headers=headers,
            reply_to=reply_to,
            batch_headers=batch_headers,
            content_type=content_type,
            correlation_id=correlation_id,
            message_id=message_id,
        )
        self._settlement = settlement
        self._first = first
        self.metadata = metadata

    # The fields below are read from the received message when asked for: building some of them
    # (times) costs more than most handlers need to pay per message.

    @property
    def key(self) -> bytes | None:
        return self.metadata.get(KEY_METADATA)

    @property
    def topic(self) -> str:
        return self._first.topic_path

    @property
    def partition_id(self) -> int:
        return self._first.partition_id

    @property
    def offset(self) -> int:
        return self._first.offset

    @property
    def seq_no(self) -> int:
        return self._first.seq_no

    @property
    def producer_id(self) -> str:
        return self._first.producer_id

    @property
    def message_group_id(self) -> str:
        return self._first.message_group_id

    @property
    def created_at(self) -> dt.datetime:
        return self._first.created_at

    @property
    def written_at(self) -> dt.datetime:
        return self._first.written_at

    async def ack(self) -> None:
        """Commit the message (and nothing before it that was not committed: commits are contiguous)."""
        if self.committed is None:
            self._settlement.commit(self.raw_message)
        await super().ack()

    async def reject(self) -> None:
        """Commit the message without handling it further: YDB keeps no dead letters, so it is skipped."""
        if self.committed is None:
            self._settlement.commit(self.raw_message)
        await super().reject()

    async def nack(self) -> None:
        """Leave the message uncommitted and have it, and what follows it in its partition,
        delivered again: a handler's subscriber reads the partition again from it after a
        backoff (the other partitions go on); ``get_one`` and ``async for`` get it next."""
        if self.committed is None:
            await self._settlement.redeliver(self.raw_message)
        await super().nack()


def headers_of(metadata: Mapping[str, bytes]) -> dict[str, str]:
    """A message's metadata items as FastStream headers (UTF-8; the key items left out)."""
    return {
        name: value.decode("utf-8", "replace") for name, value in metadata.items() if name not in _NOT_HEADERS
    }


class YdbParser:
    """Builds a ``YdbMessage`` from one received message."""

    def __init__(self, settlement: Settlement = NO_SETTLEMENT) -> None:
        self.settlement = settlement

    async def parse_message(self, raw: ReceivedMessage) -> StreamMessage[Any]:
        # A TopicMessage builds a new dict; the in-memory broker's message holds its own.
        metadata = raw.metadata_items if type(raw) is TopicMessage else dict(raw.metadata_items)
        if metadata:
            headers = headers_of(metadata)
            reply_to = headers.get("reply_to", "")
            content_type = headers.get("content-type")
            correlation_id = headers.get("correlation_id")
        else:
            headers, reply_to, content_type, correlation_id = {}, "", None, None
        return YdbMessage(
            raw,
            raw.data,
            headers=headers,
            reply_to=reply_to,
            content_type=content_type,
            message_id=f"{raw.partition_id}-{raw.offset}",
            correlation_id=correlation_id,
            settlement=self.settlement,
            first=raw,
            metadata=metadata,
        )

    async def decode_message(self, msg: StreamMessage[Any]) -> DecodedMessage:
        return decode_message(msg)


class YdbBatchParser(YdbParser):
    """Builds one ``YdbMessage`` from a batch (messages of one partition, in offset order)."""

    async def parse_batch(self, raw: Sequence[ReceivedMessage]) -> StreamMessage[Any]:
        messages = list(raw)
        first_metadata = dict(messages[0].metadata_items)
        batch_headers = [headers_of(first_metadata), *(headers_of(m.metadata_items) for m in messages[1:])]
        headers = batch_headers[0] if batch_headers else {}
        first, last = messages[0], messages[-1]
        return YdbMessage(
            raw,
            [m.data for m in messages],
            headers=headers,
            batch_headers=batch_headers,
            reply_to=headers.get("reply_to", ""),
            content_type=headers.get("content-type"),
            message_id=f"{first.partition_id}-{first.offset}-{last.offset}",
            correlation_id=headers.get("correlation_id"),
            settlement=self.settlement,
            first=first,
            metadata=first_metadata,
        )

    async def decode_batch(self, msg: StreamMessage[Any]) -> DecodedMessage:
        """Each message's body decoded by its own content type (``batch_headers`` holds them)."""
        raws = list(msg.raw_message)
        headers = msg.batch_headers
        if len(headers) != len(raws):  # a parser of the user's own made the message
            headers = [headers_of(m.metadata_items) for m in raws]
        # ``decode_message`` reads the body and the content type only.
        return [
            decode_message(cast("StreamMessage[Any]", _Payload(m.data, h.get("content-type"))))
            for m, h in zip(raws, headers, strict=True)
        ]


class _Payload:
    """What FastStream's ``decode_message`` reads of a message, for one message of a batch
    (a whole ``YdbMessage`` per message would cost a correlation id each)."""

    __slots__ = ("body", "content_type")

    def __init__(self, body: bytes, content_type: str | None) -> None:
        self.body = body
        self.content_type = content_type
