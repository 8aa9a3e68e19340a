"""``TestYdbBroker``: the broker in memory (no server), publishes routed straight to the
subscribers, as FastStream's test brokers do; or, with ``with_real=True``, the real broker
against a server with its handlers' calls recorded."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import anyio
from faststream._internal.endpoint.utils import ParserComposition
from faststream._internal.parser import DefaultCodec
from faststream._internal.testing.broker import TestBroker, change_producer
from faststream.exceptions import SubscriberNotFound

from ._broker import YdbBroker
from ._message import YdbParser
from ._producer import YdbProducer
from ._publisher import YdbBatchPublisher, YdbDefaultPublisher
from ._response import YdbPublishCommand
from ._subscriber import YdbBatchSubscriber, YdbSubscriber

if TYPE_CHECKING:
    from faststream._internal.endpoint.subscriber import SubscriberUsecase

__all__ = ["InMemoryMessage", "TestYdbBroker"]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class InMemoryMessage:
    """What ``TestYdbBroker`` delivers in memory where a server delivers a ``TopicMessage``
    (the same fields; ``raw_message`` of the handler's message is one)."""

    data: bytes
    topic_path: str
    partition_id: int = 0
    offset: int = 0
    seq_no: int = 0
    producer_id: str = ""
    message_group_id: str = ""
    metadata_items: dict[str, bytes] = field(default_factory=dict)
    created_at: dt.datetime = field(default_factory=_now)
    written_at: dt.datetime = field(default_factory=_now)


class TestYdbBroker(TestBroker[YdbBroker, Any], broker=YdbBroker):
    """``async with TestYdbBroker(broker) as br``: the broker without a server; what is published
    reaches the subscribers of its topic at once (a consumer's subscribers share its messages,
    as on a server: the first one gets each). ``with_real=True`` starts the real broker instead,
    with the handlers' ``.mock`` recording calls."""

    __test__ = False

    def __init__(self, *brokers: YdbBroker, with_real: bool = False, connect_only: bool | None = None) -> None:
        super().__init__(*brokers, with_real=with_real, connect_only=connect_only)

    @contextmanager
    def _patch_producer(self, broker: YdbBroker) -> Generator[None, None, None]:
        config = broker.config.broker_config
        with change_producer(config, InMemoryProducer(broker, self.brokers)):
            config.in_memory = True
            try:
                yield
            finally:
                config.in_memory = False

    @staticmethod
    async def _fake_connect(broker: YdbBroker, *args: Any, **kwargs: Any) -> None:
        return None

    def create_publisher_fake_subscriber(
        self, broker: YdbBroker, publisher: YdbDefaultPublisher
    ) -> tuple[SubscriberUsecase[Any], bool]:
        for candidate in (s for b in self.brokers for s in b.subscribers):
            if isinstance(candidate, YdbSubscriber) and publisher.topic in candidate.topic_names:
                return candidate, True
        fake = broker.subscriber(publisher.topic, batch=isinstance(publisher, YdbBatchPublisher), persistent=False)
        return fake, False


class InMemoryProducer(YdbProducer):
    """Delivers each publish to the matching subscribers' handlers, in memory."""

    def __init__(self, broker: YdbBroker, brokers: Iterable[YdbBroker]) -> None:
        super().__init__(None, None)
        self.broker = broker
        self.brokers = tuple(brokers)
        default = YdbParser()
        self._parser = ParserComposition(broker._parser, default.parse_message)
        self._decoder = ParserComposition(broker._decoder, default.decode_message)
        self.codec = broker.config.broker_codec or DefaultCodec()
        self.serializer = broker.config.fd_config._serializer
        self._offsets: dict[tuple[str, int], Iterator[int]] = {}

    def __bool__(self) -> bool:
        return True

    def _subscribers(self, topic: str) -> list[YdbSubscriber]:
        """The subscribers a message to ``topic`` reaches: one per consumer, every consumer-less one."""
        found, consumers = [], set()
        for subscriber in (s for b in self.brokers for s in b.subscribers):
            if not isinstance(subscriber, YdbSubscriber) or topic not in subscriber.topic_names:
                continue
            consumer = subscriber.consumer_name
            if consumer is not None:
                if consumer in consumers:
                    continue
                consumers.add(consumer)
            found.append(subscriber)
        return found

    async def _messages(self, cmd: YdbPublishCommand, bodies: Iterable[Any]) -> list[InMemoryMessage]:
        partition = cmd.partition or 0
        offsets = self._offsets.setdefault((cmd.destination, partition), itertools.count())
        messages = []
        for item in await self._items(cmd, list(bodies)):
            metadata = dict(cast("list[tuple[str, bytes]]", item.message.metadata))
            data = item.message.data
            messages.append(
                InMemoryMessage(
                    data=data if isinstance(data, bytes) else data.encode(),
                    topic_path=cmd.destination,
                    partition_id=partition,
                    offset=next(offsets),
                    seq_no=item.message.seq_no or 0,
                    producer_id=cmd.producer_id or "",
                    metadata_items=metadata,
                )
            )
        return messages

    async def publish(self, cmd: YdbPublishCommand) -> None:  # type: ignore[override]
        (message,) = await self._messages(cmd, (cmd.body,))
        for subscriber in self._subscribers(cmd.destination):
            await subscriber.process_message((message,) if isinstance(subscriber, YdbBatchSubscriber) else message)

    async def publish_batch(self, cmd: YdbPublishCommand) -> None:  # type: ignore[override]
        messages = await self._messages(cmd, cmd.batch_bodies)
        for subscriber in self._subscribers(cmd.destination):
            if isinstance(subscriber, YdbBatchSubscriber):
                await subscriber.process_message(tuple(messages))
            else:
                for message in messages:
                    await subscriber.process_message(message)

    async def request(self, cmd: YdbPublishCommand) -> InMemoryMessage:
        (message,) = await self._messages(cmd, (cmd.body,))
        for subscriber in self._subscribers(cmd.destination):
            raw: Any = (message,) if isinstance(subscriber, YdbBatchSubscriber) else message
            with anyio.fail_after(cmd.timeout):
                response = await subscriber.process_message(raw)
            reply = YdbPublishCommand(
                response.body,
                topic=cmd.destination,
                headers=response.headers,
                correlation_id=response.correlation_id,
                _publish_type=cmd.publish_type,
            )
            (answer,) = await self._messages(reply, (reply.body,))
            return answer
        raise SubscriberNotFound


