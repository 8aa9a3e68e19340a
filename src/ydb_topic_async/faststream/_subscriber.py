"""Subscribers: a supervised ``integrations.Consumer`` per subscriber, whose lanes hand each
partition's messages to FastStream's handler pipeline in order; commits follow the ack policy."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from faststream._internal.configs import SubscriberSpecificationConfig, SubscriberUsecaseConfig
from faststream._internal.constants import EMPTY
from faststream._internal.endpoint.publisher.fake import FakePublisher
from faststream._internal.endpoint.subscriber import SubscriberSpecification, SubscriberUsecase
from faststream._internal.endpoint.utils import process_msg
from faststream.middlewares import AckPolicy
from faststream.specification.asyncapi.utils import resolve_payloads
from faststream.specification.schema import Message, Operation, SubscriberSpec

from .. import (
    MessageBatch,
    OperationTimeoutError,
    PartitionSession,
    PartitionSessionClosedError,
    ReaderOptions,
    TopicMessage,
    TopicReader,
    TopicSelector,
)
from ..integrations import Consumer
from ._config import YdbBrokerConfig
from ._message import YdbBatchParser, YdbMessage, YdbParser
from ._response import YdbPublishCommand

if TYPE_CHECKING:
    from faststream._internal.endpoint.publisher import PublisherProto
    from faststream._internal.endpoint.subscriber.call_item import CallsCollection
    from faststream._internal.producer import ProducerProto
    from faststream.message import StreamMessage
    from faststream.response import PublishCommand

DEFAULT_ACK_POLICY = AckPolicy.NACK_ON_ERROR
"""Commit after the handler returns; a handler's exception leaves the message to be delivered again."""
DEFAULT_GRACEFUL_TIMEOUT = 15.0

_HANDLING: contextvars.ContextVar[object] = contextvars.ContextVar("ydb_faststream_handling", default=None)
"""The subscriber whose handler the current task runs (so that ``stop`` from a handler does not wait for itself)."""


@dataclass(kw_only=True)
class YdbSubscriberSpecificationConfig(SubscriberSpecificationConfig):
    topics: Sequence[str | TopicSelector] = ()
    consumer: str | None = None


@dataclass(kw_only=True)
class YdbSubscriberConfig(SubscriberUsecaseConfig):
    _outer_config: YdbBrokerConfig = field(default_factory=YdbBrokerConfig)

    topics: Sequence[str | TopicSelector] = ()
    consumer: str | None = None
    max_workers: int = 1
    max_messages: int | None = None
    max_bytes: int | None = None
    max_wait: float | None = None
    max_in_flight_bytes: int = 8 * 1024 * 1024
    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    reader_options: ReaderOptions = field(default_factory=lambda: ReaderOptions())

    @property
    def ack_policy(self) -> AckPolicy:
        if self._ack_policy is not EMPTY:
            return self._ack_policy
        if self._outer_config.ack_policy is not EMPTY:
            return self._outer_config.ack_policy
        return DEFAULT_ACK_POLICY


def prefixed(topic: str | TopicSelector, prefix: str) -> str | TopicSelector:
    """``topic`` with a router's ``prefix`` before its path."""
    if not prefix:
        return topic
    if isinstance(topic, TopicSelector):
        return dataclasses.replace(topic, path=f"{prefix}{topic.path}")
    return f"{prefix}{topic}"


def path_of(topic: str | TopicSelector) -> str:
    return topic.path if isinstance(topic, TopicSelector) else topic


class YdbSubscriberSpecification(SubscriberSpecification[YdbBrokerConfig, YdbSubscriberSpecificationConfig]):
    """A subscriber in the AsyncAPI document: a channel per topic, whose description names the
    consumer and the partitions it reads."""

    @property
    def topics(self) -> list[str]:
        prefix = self._outer_config.prefix
        return list(dict.fromkeys(path_of(prefixed(t, prefix)) for t in self.config.topics))

    @property
    def channel_labels(self) -> list[str]:
        return self.topics

    def _about(self, topic: str | TopicSelector) -> str:
        consumer = self.config.consumer
        reader = f"read by consumer `{consumer}`" if consumer else "read without a consumer"
        partitions = topic.partition_ids if isinstance(topic, TopicSelector) else []
        which = "partitions " + ", ".join(map(str, partitions)) if partitions else "all partitions"
        return f"YDB topic `{path_of(topic)}`, {reader}, {which}."

    def get_schema(self) -> dict[str, SubscriberSpec]:
        payloads = self.get_payloads()
        prefix = self._outer_config.prefix
        topics = {path_of(prefixed(t, prefix)): prefixed(t, prefix) for t in self.config.topics}
        split = len(topics) > 1
        channels = {}
        for path, topic in topics.items():
            key = self._channel_key(path, split=split)
            description = "\n\n".join(filter(None, (self.description, self._about(topic))))
            channels[key] = SubscriberSpec(
                address=path,
                description=description,
                operation=Operation(
                    message=Message(title=f"{key}:Message", payload=resolve_payloads(payloads)), bindings=None
                ),
                bindings=None,
            )
        return channels


class _ReaderSettlement:
    """Commits through the reader that delivered a message; a nack rewinds its partition."""

    def __init__(self, subscriber: YdbSubscriber) -> None:
        self._subscriber = subscriber
        self._nacked: set[int] = set()
        """Without a consumer: the messages (batches) nacked, by ``id``, until ``take_nack``."""

    def commit(self, raw: Any) -> None:
        subscriber = self._subscriber
        if subscriber._config.consumer is None:
            return  # read without a consumer: nothing to commit to
        consumer = subscriber._consumer
        reader = consumer.reader if consumer is not None else subscriber._reader
        if reader is not None and isinstance(raw, (TopicMessage, MessageBatch)):
            reader.commit(raw)

    async def redeliver(self, raw: Any) -> None:
        if not isinstance(raw, (TopicMessage, MessageBatch)):
            return
        subscriber = self._subscriber
        consumer = subscriber.consumer
        if consumer is not None:
            # Its lane passes over what follows it and reads the partition again from it, after
            # a backoff; the other lanes go on.
            consumer.redeliver(raw)
            if subscriber.consumer_name is None:
                self._nacked.add(id(raw))
            return
        reader = subscriber.reader
        if reader is not None:  # get_one / async for: the next receive of its partition is it again
            first = raw if isinstance(raw, TopicMessage) else raw.messages[0]
            with contextlib.suppress(PartitionSessionClosedError):  # taken away: read again by its next owner
                await reader.seek(raw.partition_session, first.offset)

    def take_nack(self, raw: Any) -> bool:
        """Whether ``raw`` was nacked (forgotten once asked); only without a consumer."""
        if not self._nacked:
            return False
        found = id(raw) in self._nacked
        self._nacked.discard(id(raw))
        return found


class YdbFakePublisher(FakePublisher):
    """Publishes a handler's reply to the topic its message named in ``reply_to``."""

    def __init__(self, producer: ProducerProto[Any], topic: str) -> None:
        super().__init__(producer=producer)
        self.topic = topic

    def patch_command(self, cmd: PublishCommand | YdbPublishCommand) -> YdbPublishCommand:
        cmd = super().patch_command(cmd)
        real = YdbPublishCommand.from_cmd(cmd)
        real.destination = self.topic
        return real


class YdbSubscriber(SubscriberUsecase[Any]):
    """Reads its topics as its consumer and hands each message to its handlers, partitions
    concurrently up to ``max_workers``, each partition in offset order."""

    _outer_config: YdbBrokerConfig
    batch = False

    def __init__(
        self,
        config: YdbSubscriberConfig,
        specification: SubscriberSpecification[Any, Any],
        calls: CallsCollection[Any],
    ) -> None:
        self._settlement = _ReaderSettlement(self)
        self.parser = self._make_parser()
        if isinstance(self.parser, YdbBatchParser):
            config.parser = self.parser.parse_batch
            config.decoder = self.parser.decode_batch
        else:
            config.parser = self.parser.parse_message
            config.decoder = self.parser.decode_message
        super().__init__(config, specification, calls)
        self._config = config
        self._consumer: Consumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Task[None] | None = None
        self._reader: TopicReader | None = None
        self._next_offsets: dict[tuple[str, int], int] = {}
        """Without a consumer: (topic, partition) -> the offset after the last message handled,
        where a restarted reader goes on."""

    def _make_parser(self) -> YdbParser:
        return YdbParser(self._settlement)

    @property
    def consumer_name(self) -> str | None:
        """The consumer this subscriber reads as (None: without one)."""
        return self._config.consumer

    @property
    def topics(self) -> list[str | TopicSelector]:
        """The topics (or selectors) this subscriber reads, with its routers' prefix."""
        prefix = self._outer_config.prefix
        return [prefixed(t, prefix) for t in self._config.topics]

    @property
    def topic_names(self) -> list[str]:
        return [path_of(t) for t in self.topics]

    @property
    def consumer(self) -> Consumer | None:
        """The supervised consumer behind this subscriber while it runs (``restarts``,
        ``last_error`` and ``handled`` tell how it fares)."""
        return self._consumer

    @property
    def reader(self) -> TopicReader | None:
        """The reader now delivering this subscriber's messages (None while not reading)."""
        if self._consumer is not None:
            return self._consumer.reader
        return self._reader

    async def _selectors(self) -> list[str | TopicSelector]:
        """The topics to read; without a consumer, each with its partitions and start offsets
        (every partition from its end when the subscriber names none)."""
        config = self._outer_config
        selectors = self.topics
        for topic in selectors:
            await config.ensure_topic(path_of(topic), self.consumer_name)
        if self.consumer_name is not None:
            return selectors
        driver = config.connected_driver()
        resolved: list[str | TopicSelector] = []
        for topic in selectors:
            if isinstance(topic, TopicSelector) and (topic.partitions is not None or topic.start_offsets):
                resolved.append(topic)
                continue
            ends = await driver.topic.end_offsets(path_of(topic))
            base = topic if isinstance(topic, TopicSelector) else TopicSelector(topic)
            resolved.append(dataclasses.replace(base, partitions=sorted(ends), start_offsets=ends))
        return resolved

    def _reader_options(self) -> ReaderOptions:
        options: ReaderOptions = {**self._config.reader_options}
        if self.consumer_name is None:
            given = options.get("on_partition_start")

            async def resume(session: PartitionSession) -> Any:
                offset = self._next_offsets.get((session.topic_path, session.partition_id))
                if offset is not None:
                    return offset
                if given is not None:
                    result = given(session)
                    return await result if asyncio.iscoroutine(result) else result
                return None

            options["on_partition_start"] = resume
        return options

    async def start(self) -> None:
        await super().start()
        if self._outer_config.in_memory:
            self._post_start()  # TestYdbBroker delivers to it directly
            return
        selectors = await self._selectors()
        if self.calls:
            config = self._config
            handlers: dict[str, Any] = (
                {"batch_handler": self._on_batch} if self.batch else {"handler": self._on_message}
            )
            self._consumer = Consumer(
                selectors,
                self.consumer_name,
                **handlers,
                concurrency=config.max_workers,
                auto_commit=False,
                max_in_flight_bytes=config.max_in_flight_bytes,
                max_batch_messages=config.max_messages if self.batch else None,
                max_batch_bytes=config.max_bytes if self.batch else None,
                batch_window=config.max_wait if self.batch else None,
                initial_backoff=config.initial_backoff,
                max_backoff=config.max_backoff,
                name=f"{self.consumer_name or '(no consumer)'}@{','.join(self.topic_names)}",
                **self._reader_options(),
            )
            driver = self._outer_config.connected_driver()
            self._task = asyncio.get_running_loop().create_task(
                self._consumer.run(driver), name=f"ydb-topic faststream subscriber {self._consumer.name}"
            )
        else:
            # No handler: ``get_one`` and ``async for`` read through a reader of their own.
            driver = self._outer_config.connected_driver()
            self._reader = driver.topic.reader(selectors, consumer=self.consumer_name, **self._reader_options())
            await self._reader.open()
        self._post_start()

    async def stop(self) -> None:
        task, consumer = self._task, self._consumer
        if task is not None and consumer is not None:
            timeout = self._outer_config.graceful_timeout or DEFAULT_GRACEFUL_TIMEOUT
            if _HANDLING.get() is self:
                # Stopped from one of its own handlers (StopConsume): that call must end before
                # the consumer can, so the consumer stops on a task of its own, awaited by the
                # broker's stop.
                self.running = False
                if self._stopping is None:
                    self._stopping = asyncio.get_running_loop().create_task(consumer.stop(task, timeout))
                return
            self._task = None
            stopping, self._stopping = self._stopping, None
            if stopping is not None:
                await stopping
            else:
                await consumer.stop(task, timeout)
            self._consumer = None
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()
        await super().stop()

    # The consumer's lanes call these, one task per lane, each running this subscriber's handler
    # only: ``_HANDLING`` is set once in each, not around every call.

    async def _on_message(self, message: TopicMessage) -> None:
        if _HANDLING.get() is not self:
            _HANDLING.set(self)
        await self.consume(message)
        if self.consumer_name is None:
            self._handled(message, message.offset)

    async def _on_batch(self, batch: MessageBatch) -> None:
        if _HANDLING.get() is not self:
            _HANDLING.set(self)
        await self.consume(batch)
        if self.consumer_name is None:
            self._handled(batch, batch.messages[-1].offset)

    def _handled(self, raw: TopicMessage | MessageBatch, offset: int) -> None:
        """Without a consumer: where a restarted reader goes on in ``raw``'s partition (not past a
        nacked message, which its lane reads again)."""
        if not self._settlement.take_nack(raw):
            session = raw.partition_session
            self._next_offsets[(session.topic_path, session.partition_id)] = offset + 1

    def _make_response_publisher(self, message: StreamMessage[Any]) -> Iterable[PublisherProto]:
        return (YdbFakePublisher(self._outer_config.producer, topic=message.reply_to),)

    async def _receive(self, timeout: float | None) -> Any:
        reader = self._reader
        assert reader is not None, "start the subscriber first"
        return await reader.receive_message(timeout=timeout)

    async def get_one(self, *, timeout: float = 5.0) -> YdbMessage | None:
        """The next message (None when none arrives within ``timeout``); only for a subscriber
        without handlers. Its ``ack()`` commits it."""
        assert not self.calls, "`get_one` is for a subscriber without handlers"
        try:
            raw = await self._receive(timeout)
        except OperationTimeoutError:
            return None
        return await self._parse(raw)

    async def _parse(self, raw: Any) -> YdbMessage:
        parser, decoder = self._get_parser_and_decoder()
        context = self._outer_config.context
        message: YdbMessage = await process_msg(  # type: ignore[assignment]
            msg=raw,
            middlewares=(m(raw, context=context) for m in self._broker_middlewares),
            parser=parser,
            decoder=decoder,
        )
        return message

    async def __aiter__(self) -> AsyncIterator[YdbMessage]:
        assert not self.calls, "`async for` is for a subscriber without handlers"
        while True:
            yield await self._parse(await self._receive(None))

    def get_log_context(self, message: StreamMessage[Any] | None) -> dict[str, str]:
        # Called for every message, logged or not.
        if isinstance(message, YdbMessage):
            return {"topic": message.topic, "consumer": self._config.consumer or "", "message_id": message.message_id}
        return {
            "topic": ",".join(self.topic_names),
            "consumer": self.consumer_name or "",
            "message_id": getattr(message, "message_id", ""),
        }


class YdbBatchSubscriber(YdbSubscriber):
    """Hands its handlers batches: a list of bodies, the messages of one partition in offset
    order (``max_messages``, ``max_bytes`` and ``max_wait`` shape them); a batch is committed
    as a whole."""

    batch = True

    def _make_parser(self) -> YdbParser:
        return YdbBatchParser(self._settlement)

    async def _receive(self, timeout: float | None) -> Any:
        reader = self._reader
        assert reader is not None, "start the subscriber first"
        config = self._config
        return await reader.receive_batch(config.max_messages, config.max_bytes, timeout=timeout,
                                          max_wait=config.max_wait)


def describe_topics(topics: Sequence[str | TopicSelector]) -> Mapping[str, str | TopicSelector]:
    return {path_of(t): t for t in topics}
