"""``YdbRouter`` for FastAPI: a ``YdbBroker`` whose handlers take FastAPI's dependencies, started
and stopped with the application (the ``faststream`` and ``fastapi`` extras).

    router = YdbRouter("grpc://localhost:2136", database="/local")

    @router.subscriber("orders", consumer="api")
    async def on_order(order: Order, db: Session = Depends(get_db)) -> None: ...

    app = FastAPI()
    app.include_router(router)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from faststream._internal.constants import EMPTY
from faststream.middlewares import AckPolicy

from ..extras import raise_for_missing_extra

try:
    from fastapi.datastructures import Default
    from faststream._internal.fastapi.context import Context, ContextRepo, Logger
    from faststream._internal.fastapi.router import StreamRouter
except ImportError as exc:
    raise_for_missing_extra(exc, __name__, "FastAPI", "fastapi", ("fastapi", "starlette", "pydantic"))
    raise

from .. import Credentials, ReaderOptions, TopicSelector, WriterOptions
from ._broker import DEFAULT_CONNECT_TIMEOUT, DEFAULT_ENDPOINT, YdbBroker
from ._publisher import YdbDefaultPublisher
from ._subscriber import YdbSubscriber

if TYPE_CHECKING:
    from fastapi import params
    from fastapi.types import IncEx
    from faststream._internal.basic_types import LoggerProto
    from faststream._internal.types import BrokerMiddleware, CustomCallable
    from faststream.security import BaseSecurity
    from faststream.specification.schema.extra import Tag, TagDict

__all__ = ["Context", "ContextRepo", "Logger", "YdbRouter"]

_NO_RESPONSE_MODEL = Default(None)
"""FastAPI's marker of a response model left to it."""


class YdbRouter(StreamRouter[Any]):
    """A FastAPI router with a ``YdbBroker`` inside (``router.broker``): include it in the
    application and the broker starts and stops with it; its AsyncAPI page is served at
    ``schema_url``.

    The broker's parameters are ``YdbBroker``'s; ``fastapi_options`` are those of FastAPI's
    ``APIRouter`` (``prefix``, ``tags``, ``dependencies``, ``lifespan``...).
    """

    broker_class = YdbBroker
    broker: YdbBroker

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
        graceful_timeout: float | None = 15.0,
        ack_policy: AckPolicy = EMPTY,
        decoder: CustomCallable | None = None,
        parser: CustomCallable | None = None,
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        security: BaseSecurity | None = None,
        specification_url: str | Iterable[str] | None = None,
        protocol: str | None = None,
        protocol_version: str | None = None,
        description: str | None = None,
        specification_tags: Iterable[Tag | TagDict] = (),
        logger: LoggerProto | None = EMPTY,
        log_level: int = logging.INFO,
        context: ContextRepo | None = None,
        schema_url: str | None = "/asyncapi",
        setup_state: bool = True,
        **fastapi_options: Any,
    ) -> None:
        super().__init__(
            endpoint,
            database=database,
            credentials=credentials,
            auto_create_topics=auto_create_topics,
            connect_timeout=connect_timeout,
            driver_options=driver_options,
            writer_options=writer_options,
            graceful_timeout=graceful_timeout,
            ack_policy=ack_policy,
            decoder=decoder,
            parser=parser,
            middlewares=middlewares,
            security=security,
            specification_url=specification_url,
            protocol=protocol,
            protocol_version=protocol_version,
            description=description,
            specification_tags=specification_tags,
            logger=logger,
            log_level=log_level,
            context=context,
            schema_url=schema_url,
            setup_state=setup_state,
            **fastapi_options,
        )

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
        dependencies: Iterable[params.Depends] = (),
        parser: CustomCallable | None = None,
        decoder: CustomCallable | None = None,
        ack_policy: AckPolicy = EMPTY,
        no_reply: bool = False,
        title: str | None = None,
        description: str | None = None,
        include_in_schema: bool = True,
        response_model: Any = _NO_RESPONSE_MODEL,
        response_model_include: IncEx | None = None,
        response_model_exclude: IncEx | None = None,
        response_model_by_alias: bool = True,
        response_model_exclude_unset: bool = False,
        response_model_exclude_defaults: bool = False,
        response_model_exclude_none: bool = False,
    ) -> YdbSubscriber:
        """``YdbBroker.subscriber``, with FastAPI's dependencies and response model options."""
        subscriber = super().subscriber(
            *topics,  # type: ignore[arg-type]  # the broker takes selectors too
            consumer=consumer,
            batch=batch,
            max_messages=max_messages,
            max_bytes=max_bytes,
            max_wait=max_wait,
            max_workers=max_workers,
            max_in_flight_bytes=max_in_flight_bytes,
            reader_options=reader_options,
            dependencies=dependencies,
            parser=parser,
            decoder=decoder,
            ack_policy=ack_policy,
            no_reply=no_reply,
            title=title,
            description=description,
            include_in_schema=include_in_schema,
            response_model=response_model,
            response_model_include=response_model_include,
            response_model_exclude=response_model_exclude,
            response_model_by_alias=response_model_by_alias,
            response_model_exclude_unset=response_model_exclude_unset,
            response_model_exclude_defaults=response_model_exclude_defaults,
            response_model_exclude_none=response_model_exclude_none,
        )
        assert isinstance(subscriber, YdbSubscriber)
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
        title: str | None = None,
        description: str | None = None,
        schema: Any | None = None,
        include_in_schema: bool = True,
    ) -> YdbDefaultPublisher:
        """``YdbBroker.publisher``."""
        return self.broker.publisher(
            topic,
            key=key,
            partition=partition,
            producer_id=producer_id,
            headers=headers,
            reply_to=reply_to,
            batch=batch,
            no_confirm=no_confirm,
            title=title,
            description=description,
            schema=schema,
            include_in_schema=include_in_schema,
        )
