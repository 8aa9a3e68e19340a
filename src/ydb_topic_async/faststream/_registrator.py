"""What brokers and routers share: registering subscribers and publishers."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from faststream._internal.broker.registrator import Registrator
from faststream._internal.constants import EMPTY
from faststream._internal.endpoint.subscriber.call_item import CallsCollection
from faststream.exceptions import SetupError
from faststream.middlewares import AckPolicy

from .. import InvalidArgumentError, ReaderOptions, TopicMessage, TopicSelector
from ..integrations import Consumer
from ._config import YdbBrokerConfig
from ._publisher import (
    YdbBatchPublisher,
    YdbDefaultPublisher,
    YdbPublisherConfig,
    YdbPublisherSpecification,
    YdbPublisherSpecificationConfig,
)
from ._subscriber import (
    YdbBatchSubscriber,
    YdbSubscriber,
    YdbSubscriberConfig,
    YdbSubscriberSpecification,
    YdbSubscriberSpecificationConfig,
)

if TYPE_CHECKING:
    from fast_depends.dependencies import Dependant
    from faststream._internal.parser import CodecProto
    from faststream._internal.types import BrokerMiddleware, CustomCallable


async def _checked_only(message: TopicMessage) -> None:
    """The handler of a consumer made only to check a subscriber's options."""


class YdbRegistrator(Registrator[Any, YdbBrokerConfig]):
    """Registers subscribers and publishers on a ``YdbBroker`` or a ``YdbRouter``."""

    def subscriber(  # type: ignore[override]
        self,
        *topics: str | TopicSelector,
        consumer: str | None = None,
        batch: bool = False,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        max_wait: float | None = None,
        max_workers: int = 1,
        max_in_flight_bytes: int = 8 * 1024 * 1024,
        reader_options: ReaderOptions | None = None,
        initial_backoff: float = 0.5,
        max_backoff: float = 30.0,
        # broker args
        persistent: bool = True,
        dependencies: Sequence[Dependant] = (),
        parser: CustomCallable | None = None,
        decoder: CustomCallable | None = None,
        codec: CodecProto | None = None,
        ack_policy: AckPolicy = EMPTY,
        no_reply: bool = False,
        # AsyncAPI args
        title: str | None = None,
        description: str | None = None,
        include_in_schema: bool = True,
    ) -> YdbSubscriber:
        """A subscriber of ``topics``, and the decorator of its handler:
        ``@broker.subscriber("orders", consumer="billing")``.

        Parameters:
            topics: Topic paths, or ``TopicSelector`` objects (partitions, ``read_from``,
                ``start_offsets``...).
            consumer: The YDB consumer whose committed offsets the subscriber starts from and
                moves. ``None`` reads without one: the selectors' partitions from their
                ``start_offsets``, or every partition from its end (messages published after
                the start), and commits nothing.
            batch: Hand the handler a list of bodies: messages of one partition, in offset order.
            max_messages: A batch's most messages.
            max_bytes: A batch's most payload bytes (its first message may exceed it).
            max_wait: Seconds a batch is filled for once its first message is there.
            max_workers: Handler calls running at once, each partition handled by one call at a
                time, in offset order (the default 1: one call at a time for the subscriber).
            max_in_flight_bytes: The most payload bytes received and not yet handled.
            reader_options: The keyword arguments of ``driver.topic.reader`` (buffer size,
                decoders, partition callbacks...).
            initial_backoff: Seconds before the subscriber's reader restarts after a failure,
                and before a nacked message's partition is read again from it, doubling up to
                ``max_backoff`` while nothing is handled in between (in that partition, for a
                nack).
            max_backoff: See ``initial_backoff``.
            persistent: Keep the subscriber registered while nothing else refers to it.
            dependencies: Dependencies of every handler of the subscriber.
            parser: Builds the FastStream message from the received one.
            decoder: Decodes the body.
            codec: Decodes the body (instead of ``decoder``).
            ack_policy: When and how a message is committed: ``NACK_ON_ERROR`` by default
                (commit after the handler returns; an exception has the message delivered
                again), ``ACK`` (commit after the handler, even when it raised), ``REJECT_ON_ERROR``
                (the same: YDB keeps no dead letters), ``ACK_FIRST`` (commit before the handler)
                or ``MANUAL`` (the handler calls ``ack``/``nack``/``reject``).
            no_reply: Do not publish the handler's return value to the message's ``reply_to``.
            title: The AsyncAPI title of the subscriber.
            description: The AsyncAPI description (the handler's docstring by default).
            include_in_schema: Show the subscriber in the AsyncAPI document.
        """
        if not topics:
            raise SetupError("give the subscriber at least one topic")
        for topic in topics:
            if not isinstance(topic, (str, TopicSelector)) or not (topic if isinstance(topic, str) else topic.path):
                raise SetupError(f"a topic must be a non-empty str or a TopicSelector, got {topic!r}")
        if consumer is not None and (not isinstance(consumer, str) or not consumer):
            raise SetupError(f"consumer must be a non-empty str or None, got {consumer!r}")
        if not isinstance(max_workers, int) or isinstance(max_workers, bool) or max_workers < 1:
            raise InvalidArgumentError(f"max_workers must be a positive int, got {max_workers!r}")
        if batch and max_workers > 1:
            warnings.warn(
                "a batch subscriber handles one batch at a time per partition; max_workers bounds the"
                " partitions handled at once",
                RuntimeWarning,
                stacklevel=2,
            )
        if not batch and (max_messages is not None or max_bytes is not None or max_wait is not None):
            raise SetupError("max_messages, max_bytes and max_wait shape batches: pass batch=True")
        for limit, what in ((max_messages, "max_messages"), (max_bytes, "max_bytes")):
            if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
                raise InvalidArgumentError(f"{what} must be a positive int or None, got {limit!r}")
        if max_wait is not None and (
            not isinstance(max_wait, (int, float)) or isinstance(max_wait, bool) or max_wait < 0
        ):
            raise InvalidArgumentError(f"max_wait must be None or a number of seconds >= 0, got {max_wait!r}")
        # The subscriber makes its consumer when it starts; the consumer's checks of the other
        # options (and of reader_options: a misspelt one is a TypeError) run here, at this call.
        Consumer(
            list(topics),
            consumer,
            _checked_only,
            auto_commit=False,
            max_in_flight_bytes=max_in_flight_bytes,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
            **(reader_options or {}),
        )
        config = cast("YdbBrokerConfig", self.config)
        subscriber_config = YdbSubscriberConfig(
            topics=list(topics),
            consumer=consumer,
            max_workers=max_workers,
            max_messages=max_messages,
            max_bytes=max_bytes,
            max_wait=max_wait,
            max_in_flight_bytes=max_in_flight_bytes,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
            reader_options=ReaderOptions(**(reader_options or {})),
            no_reply=no_reply,
            _outer_config=config,
            _ack_policy=ack_policy,
        )
        calls = CallsCollection[Any]()
        specification = YdbSubscriberSpecification(
            config,
            YdbSubscriberSpecificationConfig(
                topics=list(topics),
                consumer=consumer,
                title_=title,
                description_=description,
                include_in_schema=include_in_schema,
            ),
            calls,
        )
        cls = YdbBatchSubscriber if batch else YdbSubscriber
        subscriber = cls(subscriber_config, specification, calls)
        super().subscriber(subscriber, persistent=persistent)
        subscriber.add_call(parser_=parser, decoder_=decoder, codec_=codec, dependencies_=dependencies)
        return subscriber

    def publisher(  # type: ignore[override]
        self,
        topic: str,
        *,
        key: bytes | str | None = None,
        partition: int | None = None,
        producer_id: str | None = None,
        headers: dict[str, Any] | None = None,
        reply_to: str = "",
        batch: bool = False,
        no_confirm: bool = False,
        # AsyncAPI args
        title: str | None = None,
        description: str | None = None,
        schema: Any | None = None,
        include_in_schema: bool = True,
        persistent: bool = True,
    ) -> YdbDefaultPublisher:
        """A publisher to ``topic``: an object (``await publisher.publish(...)``) and a decorator
        that publishes its handler's return value.

        Parameters:
            topic: The topic path.
            key: The messages' key: the SDK's partitioner places them by it (unless
                ``partition`` is given), and it travels in the ``__key`` metadata item.
            partition: The partition to write to.
            producer_id: The producer id of the writer; writes with it are deduplicated by the
                server (exactly-once with ``seq_no``).
            headers: Headers every message carries (as metadata items).
            reply_to: The topic replies to these messages go to.
            batch: Publish several messages per call (a handler's list as one batch).
            no_confirm: Return once the messages are buffered, with futures of their
                acknowledgements, instead of waiting for the server's.
            title: The AsyncAPI title.
            description: The AsyncAPI description.
            schema: The AsyncAPI message type.
            include_in_schema: Show the publisher in the AsyncAPI document.
            persistent: Keep the publisher registered while nothing else refers to it.
        """
        if not isinstance(topic, str) or not topic:
            raise SetupError(f"a publisher needs a topic, got {topic!r}")
        config = cast("YdbBrokerConfig", self.config)
        publisher_config = YdbPublisherConfig(
            topic=topic,
            key=key,
            partition=partition,
            producer_id=producer_id,
            headers=headers,
            reply_to=reply_to,
            no_confirm=no_confirm,
            _outer_config=config,
        )
        specification = YdbPublisherSpecification(
            config,
            YdbPublisherSpecificationConfig(
                topic=topic,
                key=key,
                partition=partition,
                producer_id=producer_id,
                schema_=schema,
                title_=title,
                description_=description,
                include_in_schema=include_in_schema,
            ),
        )
        cls = YdbBatchPublisher if batch else YdbDefaultPublisher
        publisher = cls(publisher_config, specification)
        super().publisher(publisher, persistent=persistent)
        return publisher

    def include_router(
        self,
        router: Registrator[Any, Any],
        *,
        prefix: str = "",
        dependencies: Sequence[Dependant] = (),
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        include_in_schema: bool | None = None,
    ) -> None:
        if not isinstance(router, YdbRegistrator):
            raise SetupError(f"a YDB broker includes YDB routers, not {type(router).__name__}")
        super().include_router(
            router, prefix=prefix, dependencies=dependencies, middlewares=middlewares,
            include_in_schema=include_in_schema,
        )
