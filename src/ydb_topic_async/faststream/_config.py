"""The broker's configuration, shared by its subscribers and publishers (and by routers'), and
its log format."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from faststream._internal.configs import BrokerConfig, UnderlyingDriverAnnotation, UnderlyingDriverAnnotations
from faststream._internal.logger import DefaultLoggerStorage, make_logger_state
from faststream._internal.logger.logging import get_broker_logger

from .. import AlreadyExistsError, Driver, SchemeError, TopicNotFoundError, WriterOptions
from ._annotations import YdbDriver, YdbMessage
from ._message import YdbMessage as _YdbMessage

if TYPE_CHECKING:
    from faststream._internal.basic_types import LoggerProto
    from faststream._internal.context import ContextRepo


def _context_annotations() -> UnderlyingDriverAnnotations:
    """The classes a handler must not take as message data, mapped to the annotations that inject them."""
    module = "ydb_topic_async.faststream.annotations"
    return {
        _YdbMessage: UnderlyingDriverAnnotation(type_hint=YdbMessage, module=module, name="YdbMessage"),
        Driver: UnderlyingDriverAnnotation(type_hint=YdbDriver, module=module, name="YdbDriver"),
    }


@dataclass(kw_only=True)
class YdbBrokerConfig(BrokerConfig):
    """What a ``YdbBroker`` shares with what is registered on it: the driver (once connected),
    the writer options of its publishers, and whether missing topics are created."""

    driver: Driver | None = None
    auto_create_topics: bool = False
    in_memory: bool = False
    """Set while ``TestYdbBroker`` runs the broker in memory: subscribers start without a reader."""
    writer_options: WriterOptions = field(default_factory=lambda: WriterOptions())
    default_driver_annotations: UnderlyingDriverAnnotations = field(default_factory=_context_annotations)

    def connected_driver(self) -> Driver:
        if self.driver is None:
            raise RuntimeError("the broker is not connected: start it (or `async with broker`) first")
        return self.driver

    async def ensure_topic(self, path: str, consumer: str | None = None) -> None:
        """Check that ``path`` exists, with ``consumer`` when one is given; with
        ``auto_create_topics`` create what is missing, else raise ``TopicNotFoundError`` (a
        missing topic) or ``SchemeError`` (a missing consumer) naming both. Any other
        ``SchemeError`` (a path that is not a topic, say) is raised as it is."""
        topic = self.connected_driver().topic
        reader = f" (read with consumer {consumer!r})" if consumer else ""
        try:
            description = await topic.describe_topic(path)
        except TopicNotFoundError as exc:
            if not self.auto_create_topics:
                raise TopicNotFoundError(
                    f"topic {path!r}{reader} does not exist: create it"
                    + (f" with the consumer {consumer!r}" if consumer else "")
                    + ", or pass auto_create_topics=True to YdbBroker (a development convenience)",
                    exc.issues,
                ) from exc
            await topic.create_topic(path, consumers=[consumer] if consumer else [], exists_ok=True)
            description = await topic.describe_topic(path)
        if consumer is None or description.consumer(consumer) is not None:
            return
        if not self.auto_create_topics:
            raise SchemeError(
                f"topic {path!r} has no consumer {consumer!r}: add it"
                f" (driver.topic.alter_topic({path!r}, add_consumers=[{consumer!r}])),"
                " or pass auto_create_topics=True to YdbBroker (a development convenience)"
            )
        try:
            await topic.alter_topic(path, add_consumers=[consumer])
        except (AlreadyExistsError, SchemeError):
            # Another subscriber added it meanwhile: that is what was wanted.
            if (await topic.describe_topic(path)).consumer(consumer) is None:
                raise


class YdbParamsStorage(DefaultLoggerStorage):
    """The access log's format: time, level, topic, consumer, message id, text."""

    __slots__ = ("_max_consumer_len", "_max_topic_len")

    def __init__(self) -> None:
        super().__init__()
        self._max_topic_len = 4
        self._max_consumer_len = 0

    def register_subscriber(self, params: dict[str, Any]) -> None:
        self._max_topic_len = max(self._max_topic_len, len(params.get("topic", "")))
        self._max_consumer_len = max(self._max_consumer_len, len(params.get("consumer", "")))

    def get_logger(self, *, context: ContextRepo) -> LoggerProto:
        logger = self._get_logger_ref()
        if logger is None:
            consumer = f"%(consumer)-{self._max_consumer_len}s | " if self._max_consumer_len else ""
            logger = get_broker_logger(
                name="ydb",
                default_context={"topic": "", "consumer": ""},
                message_id_ln=10,
                fmt=(
                    "%(asctime)s %(levelname)-8s - "
                    f"%(topic)-{self._max_topic_len}s | {consumer}%(message_id)-10s - %(message)s"
                ),
                context=context,
                log_level=self.logger_log_level,
            )
            self._logger_ref.add(logger)
        return logger


make_ydb_logger_state = partial(make_logger_state, default_storage_cls=YdbParamsStorage)

DEFAULT_LOG_LEVEL = logging.INFO
