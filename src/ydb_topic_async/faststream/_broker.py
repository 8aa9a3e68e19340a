"""``YdbBroker``: FastStream's broker for YDB topics, over one ``Driver``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from fast_depends import dependency_provider
from faststream._internal.broker import BrokerUsecase
from faststream._internal.constants import EMPTY
from faststream._internal.context.repository import ContextRepo
from faststream._internal.di import FastDependsConfig
from faststream.message import gen_cor_id
from faststream.middlewares import AckPolicy
from faststream.response.publish_type import PublishType
from faststream.security import BaseSecurity, SASLPlaintext
from faststream.specification.schema import BrokerSpec

from .. import Credentials, Driver, InvalidArgumentError, StaticCredentials, WriteResult, WriterOptions
from ._config import YdbBrokerConfig, make_ydb_logger_state
from ._producer import YdbProducer
from ._registrator import YdbRegistrator
from ._response import YdbPublishCommand

if TYPE_CHECKING:
    from fast_depends import Provider
    from fast_depends.dependencies import Dependant
    from fast_depends.library.serializer import SerializerProto
    from faststream._internal.basic_types import LoggerProto, SendableMessage
    from faststream._internal.parser import CodecProto
    from faststream._internal.types import BrokerMiddleware, CustomCallable, IdGenerator
    from faststream.specification.schema.extra import Tag, TagDict

    from ._message import YdbMessage

DEFAULT_ENDPOINT = "grpc://localhost:2136"
DEFAULT_CONNECT_TIMEOUT = 10.0


def _credentials_of(
    security: BaseSecurity | None, credentials: Credentials | None, endpoint: str
) -> Credentials | None:
    """The credentials FastStream's ``security`` stands for: a user and password (``SASLPlaintext``)."""
    if security is None:
        return credentials
    if credentials is not None:
        raise InvalidArgumentError("give credentials or security, not both")
    if security.use_ssl and not endpoint.startswith("grpcs://"):
        raise InvalidArgumentError(f"security asks for TLS: use a grpcs:// endpoint, not {endpoint!r}")
    if isinstance(security, SASLPlaintext):
        return StaticCredentials(security.username, security.password)
    if type(security) is BaseSecurity:
        return None
    raise InvalidArgumentError(
        f"{type(security).__name__} has no YDB counterpart: pass credentials= (a YDB Credentials object)"
    )


def _server_url(endpoint: str, database: str | None) -> tuple[str, str]:
    """The AsyncAPI server URL (``grpc://host:port/database``) and protocol of an endpoint."""
    parts = urlsplit(endpoint if "://" in endpoint else f"grpc://{endpoint}")
    path = database or parse_qs(parts.query).get("database", [""])[0] or parts.path
    protocol = "ydb-secure" if parts.scheme == "grpcs" else "ydb"
    return f"{parts.scheme}://{parts.netloc}/{path.strip('/')}", protocol


class YdbBroker(YdbRegistrator, BrokerUsecase[Any, Driver, YdbBrokerConfig]):
    """A FastStream broker for YDB topics.

        broker = YdbBroker("grpc://localhost:2136", database="/local")

        @broker.subscriber("orders", consumer="billing")
        @broker.publisher("invoices")
        async def bill(order: Order) -> Invoice: ...

        app = FastStream(broker)

    The broker owns one ``Driver`` (opened by ``start``/``connect``, closed by ``stop``), its
    subscribers' readers and its publishers' pooled writers.

    Parameters:
        endpoint: ``grpc://host:port`` or ``grpcs://host:port``, or a connection string with
            ``?database=``.
        database: The database path (``/local``), unless the endpoint carries it.
        credentials: The SDK's credentials (``StaticCredentials``, ``AccessTokenCredentials``...).
        auto_create_topics: Create a missing topic (with the subscriber's consumer), or add a
            missing consumer, on first subscribe or publish: a development convenience, off by
            default. Without it a subscriber of a missing topic or consumer fails ``start``.
        connect_timeout: Seconds ``start`` (and ``connect``) wait for the database to answer
            before raising the SDK's ``OperationTimeoutError``.
        driver_options: Other ``Driver`` options (``retry``, ``metrics``, ``tracing``...).
        writer_options: Options of the publishers' writers (``codec``, ``max_buffer_bytes``...).
        graceful_timeout: Seconds ``stop`` lets the handler calls in progress finish and their
            commits be acknowledged.
        ack_policy: The subscribers' default ack policy (see ``subscriber``).
        id_generator: Makes correlation ids.
        decoder: Decodes message bodies.
        codec: Encodes and decodes message bodies (instead of ``decoder``).
        parser: Builds FastStream messages from received ones.
        dependencies: Dependencies of every handler.
        middlewares: Middlewares of every message consumed and published.
        routers: Routers to include.
        security: FastStream's security: ``SASLPlaintext`` becomes ``StaticCredentials``; TLS
            needs a ``grpcs://`` endpoint.
        specification_url: The server URL the AsyncAPI document shows (the endpoint by default).
        protocol: The AsyncAPI server protocol (``ydb``, or ``ydb-secure`` for TLS, by default).
        protocol_version: The AsyncAPI protocol version.
        description: The AsyncAPI server description.
        tags: The AsyncAPI server tags.
        logger: The access logger (None: no logging).
        log_level: The access log's level.
        apply_types: Validate and cast handler arguments by their annotations.
        serializer: FastDepends' serializer.
        provider: FastDepends' dependency provider.
        context: FastStream's context repository.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        database: str | None = None,
        credentials: Credentials | None = None,
        auto_create_topics: bool = False,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        driver_options: Mapping[str, Any] | None = None,
        writer_options: WriterOptions | None = None,
        # broker base args
        graceful_timeout: float | None = 15.0,
        ack_policy: AckPolicy = EMPTY,
        id_generator: IdGenerator = gen_cor_id,
        decoder: CustomCallable | None = None,
        codec: CodecProto | None = None,
        parser: CustomCallable | None = None,
        dependencies: Sequence[Dependant] = (),
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        routers: Iterable[YdbRegistrator] = (),
        # AsyncAPI args
        security: BaseSecurity | None = None,
        specification_url: str | Iterable[str] | None = None,
        protocol: str | None = None,
        protocol_version: str | None = None,
        description: str | None = None,
        tags: Iterable[Tag | TagDict] = (),
        # logging args
        logger: LoggerProto | None = EMPTY,
        log_level: int = logging.INFO,
        # FastDepends args
        apply_types: bool = True,
        serializer: SerializerProto | None = EMPTY,
        provider: Provider | None = None,
        context: ContextRepo | None = None,
    ) -> None:
        if not isinstance(auto_create_topics, bool):
            raise InvalidArgumentError(f"auto_create_topics must be a bool, got {auto_create_topics!r}")
        if not isinstance(connect_timeout, (int, float)) or isinstance(connect_timeout, bool) or connect_timeout <= 0:
            raise InvalidArgumentError(f"connect_timeout must be a positive number of seconds, got {connect_timeout!r}")
        self.endpoint = endpoint
        self.database = database
        self.connect_timeout = float(connect_timeout)
        self._credentials = _credentials_of(security, credentials, endpoint)
        self._driver_options = dict(driver_options or {})
        url, default_protocol = _server_url(endpoint, database)
        if specification_url is None:
            urls = [url]
        elif isinstance(specification_url, str):
            urls = [specification_url]
        else:
            urls = list(specification_url)
        super().__init__(
            routers=routers,
            config=YdbBrokerConfig(
                auto_create_topics=auto_create_topics,
                writer_options=WriterOptions(**(writer_options or {})),
                producer=YdbProducer(parser=parser, decoder=decoder),
                broker_decoder=decoder,
                broker_codec=codec,
                broker_parser=parser,
                broker_middlewares=middlewares,
                logger=make_ydb_logger_state(logger=logger, log_level=log_level),
                fd_config=FastDependsConfig(
                    use_fastdepends=apply_types,
                    serializer=serializer,
                    provider=provider or dependency_provider,
                    context=context or ContextRepo(),
                ),
                graceful_timeout=graceful_timeout,
                ack_policy=ack_policy,
                id_generator=id_generator,
                broker_dependencies=dependencies,
                extra_context={"broker": self},
            ),
            specification=BrokerSpec(
                description=description,
                url=urls,
                protocol=protocol or default_protocol,
                protocol_version=protocol_version,
                security=security,
                tags=tags,
            ),
        )

    @property
    def driver(self) -> Driver:
        """The broker's driver (``RuntimeError`` before ``start``/``connect`` and after ``stop``):
        for topic administration or anything else the SDK offers."""
        return self.config.broker_config.connected_driver()

    async def _connect(self) -> Driver:
        driver = Driver(self.endpoint, self.database, self._credentials, **self._driver_options)
        await driver.open()
        try:
            await driver.wait_ready(self.connect_timeout)
        except BaseException:
            await driver.close(0)
            raise
        config = self.config.broker_config
        config.driver = driver
        producer = config.producer
        assert isinstance(producer, YdbProducer)
        producer.connect(
            driver,
            serializer=config.fd_config._serializer,
            codec=config.broker_codec,
            writer_options=config.writer_options,
            ensure_topic=config.ensure_topic if config.auto_create_topics else None,
        )
        return driver

    async def start(self) -> None:
        """Connect (within ``connect_timeout``) and start every subscriber; a subscriber of a
        missing topic or consumer fails it (unless ``auto_create_topics``)."""
        await self.connect()
        try:
            await super().start()
        except BaseException:
            await self.stop()
            raise

    async def stop(
        self,
        exc_type: type[BaseException] | None = None,
        exc_val: BaseException | None = None,
        exc_tb: TracebackType | None = None,
    ) -> None:
        """Stop the subscribers (the handler calls in progress finish and their commits are
        acknowledged, within ``graceful_timeout``), flush and close the writers, close the driver."""
        try:
            await super().stop(exc_type, exc_val, exc_tb)
        finally:
            config = self.config.broker_config
            producer = config.producer
            timeout = config.graceful_timeout
            if isinstance(producer, YdbProducer):
                await producer.disconnect(timeout)
            driver, config.driver = config.driver, None
            self._connection = None
            if driver is not None:
                await driver.close(timeout)

    async def ping(self, timeout: float | None) -> bool:
        """Whether the database answers within ``timeout`` seconds (False when not connected)."""
        driver = self.config.broker_config.driver
        if driver is None:
            return False
        try:
            await driver.wait_ready(timeout if timeout is not None else self.connect_timeout)
        except Exception:
            return False
        return True

    def _command(self, *messages: Any, publish_type: PublishType, **options: Any) -> YdbPublishCommand:
        correlation_id = options.pop("correlation_id", None) or self.config.id_generator()
        return YdbPublishCommand(
            *messages, correlation_id=correlation_id, _publish_type=publish_type, **options
        )

    async def publish(
        self,
        message: SendableMessage,
        topic: str = "",
        *,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        producer_id: str | None = None,
        seq_no: int | None = None,
        no_confirm: bool = False,
    ) -> WriteResult | asyncio.Future[WriteResult]:
        """Publish one message to ``topic``.

        Parameters:
            message: The body (bytes as they are, str as UTF-8, anything else as JSON).
            topic: The topic path.
            key: The message's key: the SDK's partitioner places it (unless ``partition`` is
                given) and it travels in the ``__key`` metadata item.
            partition: The partition to write to.
            headers: Headers, sent as metadata items.
            correlation_id: The correlation id (a new one by default).
            reply_to: The topic a subscriber publishes its reply to.
            producer_id: The writer's producer id: the server deduplicates what it writes.
                With ``seq_no`` (and ``partition`` or no key) a publish repeated after a crash
                or a lost acknowledgement is stored once: exactly-once.
            seq_no: The message's sequence number for the producer id (increasing).
            no_confirm: Return once the message is buffered, with a future of its
                acknowledgement, instead of waiting for the server's.

        Returns:
            The server's acknowledgement (``Written`` with its partition and offset, or
            ``Skipped`` for a duplicate), or its future with ``no_confirm``.
        """
        cmd = self._command(
            message,
            topic=topic,
            key=key,
            partition=partition,
            headers=headers,
            correlation_id=correlation_id,
            reply_to=reply_to or "",
            producer_id=producer_id,
            seq_no=seq_no,
            no_confirm=no_confirm,
            publish_type=PublishType.PUBLISH,
        )
        result: WriteResult | asyncio.Future[WriteResult] = await self._basic_publish(
            cmd, producer=self.config.producer
        )
        return result

    async def publish_batch(  # type: ignore[override]
        self,
        *messages: SendableMessage,
        topic: str = "",
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        producer_id: str | None = None,
        no_confirm: bool = False,
    ) -> Any:
        """Publish ``messages`` to ``topic`` in order, waiting for every acknowledgement unless
        ``no_confirm``; a ``YdbPublishMessage`` among them carries its own key, headers and
        ``seq_no``. Returns the acknowledgements (or their futures), in order."""
        cmd = self._command(
            *messages,
            topic=topic,
            key=key,
            partition=partition,
            headers=headers,
            correlation_id=correlation_id,
            reply_to=reply_to or "",
            producer_id=producer_id,
            no_confirm=no_confirm,
            publish_type=PublishType.PUBLISH,
        )
        return await self._basic_publish_batch(cmd, producer=self.config.producer)

    async def request(  # type: ignore[override]
        self,
        message: SendableMessage,
        topic: str,
        *,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        timeout: float = 0.5,
    ) -> YdbMessage:
        """Publish and wait for the handler's reply: in ``TestYdbBroker`` only, as with
        FastStream's Kafka broker (a topic has no per-request reply queue; publish with
        ``reply_to=`` a topic you subscribe to instead)."""
        cmd = self._command(
            message,
            topic=topic,
            key=key,
            partition=partition,
            headers=headers,
            correlation_id=correlation_id,
            timeout=timeout,
            publish_type=PublishType.REQUEST,
        )
        reply: YdbMessage = await self._basic_request(cmd, producer=self.config.producer)
        return reply
