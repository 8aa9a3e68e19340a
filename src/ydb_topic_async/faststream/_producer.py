"""Publishing through pooled writers: one per (topic, producer id, partition), a keyed writer per
(topic, producer id) for keyed messages, all opened on first use and closed with the broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from faststream._internal.endpoint.utils import ParserComposition
from faststream._internal.parser import BatchCodecProto, DefaultCodec
from faststream._internal.producer import ProducerProto
from faststream.exceptions import FeatureNotSupportedException

from .. import (
    Driver,
    InvalidArgumentError,
    KeyedWriter,
    Message,
    TopicWriter,
    WriteResult,
    WriterOptions,
)
from ._message import KEY_METADATA, YdbParser
from ._response import YdbPublishCommand, YdbResponse

if TYPE_CHECKING:
    from fast_depends.library.serializer import SerializerProto
    from faststream._internal.parser import CodecProto
    from faststream._internal.types import AsyncCallable, CustomCallable

logger = logging.getLogger("ydb_topic_async.faststream")

EnsureTopic = Callable[[str], Awaitable[None]]

REQUEST_UNSUPPORTED = (
    "YdbBroker does not support `request` outside TestYdbBroker: a topic has no per-request reply"
    " queue. Publish with `reply_to=` a topic of your own and subscribe to it for the replies."
)


class _Pooled:
    """A pooled writer, and whether it numbers messages itself (``seq_no`` not given) or takes theirs."""

    __slots__ = ("auto_seqno", "writer")

    def __init__(self, writer: TopicWriter, auto_seqno: bool) -> None:
        self.writer = writer
        self.auto_seqno = auto_seqno


class _Item:
    """One message of a publish, as it goes to a writer."""

    __slots__ = ("key", "message")

    def __init__(self, message: Message, key: bytes | str | None) -> None:
        self.message = message
        self.key = key


def _key_bytes(key: object) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    raise InvalidArgumentError(f"a message key must be str or bytes, got {type(key).__name__}")


def _metadata(headers: Mapping[str, Any], key: bytes | str | None) -> list[tuple[str, bytes]]:
    items = [
        (str(name), value if isinstance(value, bytes) else str(value).encode())
        for name, value in headers.items()
        if value is not None and value != ""
    ]
    if key is not None:
        items.append((KEY_METADATA, _key_bytes(key)))
    return items


class YdbProducer(ProducerProto[YdbPublishCommand]):
    """The broker's writers: ``publish`` and ``publish_batch`` go through them.

    A message with a key and no partition goes to the keyed writer of its (topic, producer id),
    which places the key with the SDK's partitioner; any other goes to the writer of its
    (topic, producer id, partition) (``None``: the server picks the partition per producer id).
    A producer id's writer either numbers messages itself or takes the ``seq_no`` each message
    gives, as its first publish decides.
    """

    def __init__(self, parser: CustomCallable | None, decoder: CustomCallable | None) -> None:
        default = YdbParser()
        self._parser: AsyncCallable = ParserComposition(parser, default.parse_message)
        self._decoder: AsyncCallable = ParserComposition(decoder, default.decode_message)
        self.codec: CodecProto = DefaultCodec()
        self.serializer: SerializerProto | None = None
        self._driver: Driver | None = None
        self._writer_options: WriterOptions = {}
        self._ensure_topic: EnsureTopic | None = None
        self._ensured: set[str] = set()
        self._writers: dict[tuple[str, str | None, int | None], _Pooled] = {}
        self._keyed: dict[tuple[str, str | None], KeyedWriter] = {}

    def connect(
        self,
        driver: Driver,
        *,
        serializer: SerializerProto | None,
        codec: CodecProto | None,
        writer_options: WriterOptions,
        ensure_topic: EnsureTopic | None,
    ) -> None:
        self._driver = driver
        self.serializer = serializer
        self.codec = codec or DefaultCodec()
        self._writer_options = writer_options
        self._ensure_topic = ensure_topic
        self._ensured.clear()

    def __bool__(self) -> bool:
        return self._driver is not None

    @property
    def writers(self) -> int:
        """How many writers the pool holds (keyed writers count once)."""
        return len(self._writers) + len(self._keyed)

    async def disconnect(self, timeout: float | None) -> None:
        """Flush and close every pooled writer (each within ``timeout``); failures are logged."""
        writers: list[TopicWriter | KeyedWriter] = [p.writer for p in self._writers.values()]
        writers.extend(self._keyed.values())
        self._writers.clear()
        self._keyed.clear()
        self._driver = None
        for writer in writers:
            try:
                await writer.close(timeout)
            except Exception as exc:
                logger.error("closing the writer %r failed: %s", writer, exc)

    def _driver_or_fail(self) -> Driver:
        if self._driver is None:
            raise FeatureNotSupportedException("the broker is not connected: start it (or `async with broker`) first")
        return self._driver

    async def _prepare(self, topic: str) -> Driver:
        driver = self._driver_or_fail()
        if not topic:
            raise InvalidArgumentError("no topic to publish to: pass topic=...")
        if self._ensure_topic is not None and topic not in self._ensured:
            await self._ensure_topic(topic)
            self._ensured.add(topic)
        return driver

    def _plain_writer(
        self, driver: Driver, topic: str, producer_id: str | None, partition: int | None, auto_seqno: bool
    ) -> tuple[TopicWriter, TopicWriter | None]:
        """The pooled writer for these, and the failed writer it replaces (for the caller to close)."""
        pool_key = (topic, producer_id, partition)
        pooled = self._writers.get(pool_key)
        if pooled is None or pooled.writer.failure is not None:
            options: WriterOptions = {**self._writer_options, "auto_seqno": auto_seqno}
            if producer_id is not None:
                options["producer_id"] = producer_id
            if partition is not None:
                options["partition_id"] = partition
            failed = pooled.writer if pooled is not None else None
            pooled = self._writers[pool_key] = _Pooled(driver.topic.writer(topic, **options), auto_seqno)
            return pooled.writer, failed
        elif pooled.auto_seqno != auto_seqno:
            raise InvalidArgumentError(
                f"producer id {producer_id!r} publishes to {topic!r} "
                + ("with sequence numbers of its own: give seq_no with every message"
                   if not pooled.auto_seqno else "with automatic sequence numbers: seq_no cannot be given")
            )
        return pooled.writer, None

    @staticmethod
    async def _close_failed(writer: TopicWriter) -> None:
        """Close a writer that failed for good (its failure was raised to its publishers)."""
        logger.warning("the writer %r failed (%s); replaced it with a new one", writer, writer.failure)
        with contextlib.suppress(Exception):  # its failure, which its publishes already raised
            await writer.close(0)

    def _keyed_writer(self, driver: Driver, topic: str, producer_id: str | None) -> KeyedWriter:
        pool_key = (topic, producer_id)
        writer = self._keyed.get(pool_key)
        if writer is None:
            options: dict[str, Any] = {k: v for k, v in self._writer_options.items() if k not in _NOT_KEYED}
            writer = self._keyed[pool_key] = driver.topic.keyed_writer(topic, producer_id=producer_id, **options)
        return writer

    async def _items(self, cmd: YdbPublishCommand, bodies: Sequence[Any]) -> list[_Item]:
        shared = cmd.headers_to_publish()
        plain: list[Any] = []
        overrides: list[YdbResponse | None] = []
        for body in bodies:
            if isinstance(body, YdbResponse):
                plain.append(body.body)
                overrides.append(body)
            else:
                plain.append(body)
                overrides.append(None)
        if isinstance(self.codec, BatchCodecProto) and len(plain) > 1:
            encoded = await self.codec.encode_batch(plain, self.serializer)
        else:
            encoded = [await self.codec.encode(body, self.serializer) for body in plain]
        items = []
        for (data, content_type), override in zip(encoded, overrides, strict=True):
            headers = {"content-type": content_type} if content_type else {}
            headers |= shared
            key, seq_no = cmd.key, cmd.seq_no
            if override is not None:
                headers |= override.headers
                if override.correlation_id:
                    headers["correlation_id"] = override.correlation_id
                key = override.key if override.key is not None else key
                seq_no = override.seq_no if override.seq_no is not None else seq_no
            items.append(_Item(Message(data, seq_no=seq_no, metadata=_metadata(headers, key)), key))
        return items

    async def _send(self, cmd: YdbPublishCommand, bodies: Sequence[Any]) -> list[asyncio.Future[WriteResult]]:
        driver = await self._prepare(cmd.destination)
        items = await self._items(cmd, bodies)
        futures: list[asyncio.Future[WriteResult]] = []
        # Consecutive messages for one writer go in one call; the writers keep their order.
        run: list[_Item] = []
        target: TopicWriter | KeyedWriter | None = None
        run_key: bytes | str | None = None
        for item in items:
            keyed = item.key is not None and cmd.partition is None
            if keyed:
                if item.message.seq_no is not None:
                    raise InvalidArgumentError(
                        "seq_no cannot be given with a key: a keyed writer numbers the messages of each"
                        " partition itself (give partition= to publish with your own sequence numbers)"
                    )
                writer: TopicWriter | KeyedWriter = self._keyed_writer(driver, cmd.destination, cmd.producer_id)
            else:
                writer, failed = self._plain_writer(
                    driver, cmd.destination, cmd.producer_id, cmd.partition, item.message.seq_no is None
                )
                if failed is not None:
                    await self._close_failed(failed)
            if run and (writer is not target or (keyed and item.key != run_key)):
                futures.extend(await self._write(target, run, run_key))
                run = []
            target, run_key = writer, item.key if keyed else None
            run.append(item)
        if run:
            futures.extend(await self._write(target, run, run_key))
        return futures

    @staticmethod
    async def _write(
        writer: TopicWriter | KeyedWriter | None, run: list[_Item], key: bytes | str | None
    ) -> list[asyncio.Future[WriteResult]]:
        messages = [item.message for item in run]
        if isinstance(writer, KeyedWriter):
            assert key is not None
            return await writer.write_with_ack_future(messages, key=key)
        assert writer is not None
        return await writer.write_with_ack_future(messages)

    async def publish(self, cmd: YdbPublishCommand) -> WriteResult | asyncio.Future[WriteResult]:
        """Write one message; wait for the server's acknowledgement unless ``cmd.no_confirm``."""
        (future,) = await self._send(cmd, (cmd.body,))
        if cmd.no_confirm:
            return future
        return await future

    async def publish_batch(
        self, cmd: YdbPublishCommand
    ) -> list[WriteResult] | list[asyncio.Future[WriteResult]]:
        """Write several messages, in order; wait for every acknowledgement unless ``cmd.no_confirm``."""
        futures = await self._send(cmd, cmd.batch_bodies)
        if cmd.no_confirm:
            return futures
        return list(await asyncio.gather(*futures))

    async def request(self, cmd: YdbPublishCommand) -> Any:
        raise FeatureNotSupportedException(REQUEST_UNSUPPORTED)


_NOT_KEYED = frozenset(("producer_id", "partition_id", "message_group_id", "auto_seqno"))
"""Writer options a keyed writer sets itself or does not take."""
