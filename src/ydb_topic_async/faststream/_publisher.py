"""Publishers: ``broker.publisher(topic, ...)`` objects and decorators (a handler's return value
is published through them)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from faststream._internal.configs import PublisherSpecificationConfig, PublisherUsecaseConfig
from faststream._internal.endpoint.publisher import PublisherSpecification, PublisherUsecase
from faststream.response.publish_type import PublishType
from faststream.specification.asyncapi.utils import resolve_payloads
from faststream.specification.schema import Message, Operation, PublisherSpec

from ._config import YdbBrokerConfig
from ._response import YdbPublishCommand

if TYPE_CHECKING:
    import asyncio

    from faststream._internal.types import PublisherMiddleware
    from faststream.response import PublishCommand

    from .. import WriteResult
    from ._message import YdbMessage


@dataclass(kw_only=True)
class YdbPublisherSpecificationConfig(PublisherSpecificationConfig):
    topic: str
    key: bytes | str | None = None
    partition: int | None = None
    producer_id: str | None = None


@dataclass(kw_only=True)
class YdbPublisherConfig(PublisherUsecaseConfig):
    _outer_config: YdbBrokerConfig = field(default_factory=YdbBrokerConfig)

    topic: str
    key: bytes | str | None = None
    partition: int | None = None
    producer_id: str | None = None
    headers: dict[str, Any] | None = None
    reply_to: str = ""
    no_confirm: bool = False


class YdbPublisherSpecification(PublisherSpecification[YdbBrokerConfig, YdbPublisherSpecificationConfig]):
    """A publisher in the AsyncAPI document: its topic's channel, whose description names the
    producer id and the partition (or the keyed placement) it writes with."""

    @property
    def topic(self) -> str:
        return f"{self._outer_config.prefix}{self.config.topic}"

    @property
    def name(self) -> str:
        return self.config.title_ or f"{self.topic}:Publisher"

    def _about(self) -> str:
        config = self.config
        producer = f"producer id `{config.producer_id}`" if config.producer_id else "a producer id of its own"
        if config.partition is not None:
            where = f"partition {config.partition}"
        elif config.key is not None:
            where = "partitions by key"
        else:
            where = "the partition the server picks for the producer id"
        return f"YDB topic `{self.topic}`, written with {producer} to {where}."

    def get_schema(self) -> dict[str, PublisherSpec]:
        payloads = self.get_payloads()
        description = "\n\n".join(filter(None, (self.config.description_, self._about())))
        return {
            self.name: PublisherSpec(
                address=self.topic,
                description=description,
                operation=Operation(
                    message=Message(title=f"{self.name}:Message", payload=resolve_payloads(payloads, "Publisher")),
                    bindings=None,
                ),
                bindings=None,
            ),
        }


class YdbDefaultPublisher(PublisherUsecase):
    """Publishes one message per call to its topic (``publish``), or a handler's return value."""

    _outer_config: YdbBrokerConfig

    def __init__(self, config: YdbPublisherConfig, specification: YdbPublisherSpecification) -> None:
        super().__init__(config, cast("PublisherSpecification", specification))
        self._topic = config.topic
        self.key = config.key
        self.partition = config.partition
        self.producer_id = config.producer_id
        self.headers = config.headers or {}
        self.reply_to = config.reply_to
        self.no_confirm = config.no_confirm

    @property
    def topic(self) -> str:
        """The topic, with the routers' prefix."""
        return f"{self._outer_config.prefix}{self._topic}"

    def _command(self, *messages: Any, publish_type: PublishType, **options: Any) -> YdbPublishCommand:
        partition = options.pop("partition", None)
        headers = options.pop("headers", None)
        return YdbPublishCommand(
            *messages,
            topic=options.pop("topic", None) or self.topic,
            key=options.pop("key", None) or self.key,
            partition=partition if partition is not None else self.partition,
            producer_id=options.pop("producer_id", None) or self.producer_id,
            headers=self.headers | (headers or {}),
            reply_to=options.pop("reply_to", None) or self.reply_to,
            correlation_id=options.pop("correlation_id", None) or self._outer_config.id_generator(),
            _publish_type=publish_type,
            **options,
        )

    def _fill(self, cmd: YdbPublishCommand) -> YdbPublishCommand:
        """A reply's command with this publisher's defaults where the reply gives none."""
        cmd.destination = self.topic
        cmd.add_headers(self.headers, override=False)
        cmd.reply_to = cmd.reply_to or self.reply_to
        cmd.partition = cmd.partition if cmd.partition is not None else self.partition
        cmd.key = cmd.key if cmd.key is not None else self.key
        cmd.producer_id = cmd.producer_id or self.producer_id
        cmd.no_confirm = cmd.no_confirm or self.no_confirm
        return cmd

    async def publish(
        self,
        message: Any,
        topic: str = "",
        *,
        key: bytes | str | None = None,
        partition: int | None = None,
        producer_id: str | None = None,
        seq_no: int | None = None,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str = "",
        no_confirm: bool | None = None,
    ) -> WriteResult | asyncio.Future[WriteResult]:
        """Publish ``message`` to this publisher's topic (or ``topic``); the arguments override
        the publisher's own (see ``YdbBroker.publish``)."""
        cmd = self._command(
            message,
            publish_type=PublishType.PUBLISH,
            topic=topic,
            key=key,
            partition=partition,
            producer_id=producer_id,
            seq_no=seq_no,
            headers=headers,
            correlation_id=correlation_id,
            reply_to=reply_to,
            no_confirm=self.no_confirm if no_confirm is None else no_confirm,
        )
        result: WriteResult | asyncio.Future[WriteResult] = await self._basic_publish(
            cmd, producer=self._outer_config.producer, _extra_middlewares=()
        )
        return result

    async def _publish(
        self, cmd: PublishCommand | YdbPublishCommand, *, _extra_middlewares: Iterable[PublisherMiddleware]
    ) -> None:
        await self._basic_publish(
            self._fill(YdbPublishCommand.from_cmd(cmd)),
            producer=self._outer_config.producer,
            _extra_middlewares=_extra_middlewares,
        )

    async def request(
        self,
        message: Any,
        topic: str = "",
        *,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        timeout: float = 0.5,
    ) -> YdbMessage:
        """Publish ``message`` and wait for the reply: in ``TestYdbBroker`` only (see ``YdbBroker.request``)."""
        cmd = self._command(
            message,
            publish_type=PublishType.REQUEST,
            topic=topic,
            key=key,
            partition=partition,
            headers=headers,
            correlation_id=correlation_id,
            timeout=timeout,
        )
        reply: YdbMessage = await self._basic_request(cmd, producer=self._outer_config.producer)
        return reply


class YdbBatchPublisher(YdbDefaultPublisher):
    """Publishes several messages per call (``publish(*messages)``), or a handler's returned
    list as one batch."""

    async def publish(  # type: ignore[override]
        self,
        *messages: Any,
        topic: str = "",
        key: bytes | str | None = None,
        partition: int | None = None,
        producer_id: str | None = None,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str = "",
        no_confirm: bool | None = None,
    ) -> Any:
        """Publish ``messages`` in order; a ``YdbPublishMessage`` among them carries its own key,
        headers and ``seq_no``."""
        cmd = self._command(
            *messages,
            publish_type=PublishType.PUBLISH,
            topic=topic,
            key=key,
            partition=partition,
            producer_id=producer_id,
            headers=headers,
            correlation_id=correlation_id,
            reply_to=reply_to,
            no_confirm=self.no_confirm if no_confirm is None else no_confirm,
        )
        return await self._basic_publish_batch(cmd, producer=self._outer_config.producer, _extra_middlewares=())

    async def _publish(
        self, cmd: PublishCommand | YdbPublishCommand, *, _extra_middlewares: Iterable[PublisherMiddleware]
    ) -> None:
        batch = self._fill(YdbPublishCommand.from_cmd(cmd, batch=True))
        if not batch.batch_bodies:
            batch.batch_bodies = (b"",)
        await self._basic_publish_batch(
            batch, producer=self._outer_config.producer, _extra_middlewares=_extra_middlewares
        )
