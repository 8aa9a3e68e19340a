"""``YdbRouter``: subscribers and publishers registered apart from the broker, included with
``broker.include_router``; ``YdbRoute`` and ``YdbPublisher`` declare them up front."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from faststream._internal.broker.router import ArgsContainer, BrokerRouter, SubscriberRoute
from faststream._internal.constants import EMPTY
from faststream.middlewares import AckPolicy

from .. import TopicSelector
from ._config import YdbBrokerConfig
from ._registrator import YdbRegistrator

if TYPE_CHECKING:
    from fast_depends.dependencies import Dependant
    from faststream._internal.types import BrokerMiddleware, CustomCallable


class YdbPublisher(ArgsContainer):
    """A publisher to declare in a ``YdbRoute``: the arguments of ``broker.publisher``."""

    def __init__(self, topic: str, **kwargs: Any) -> None:
        super().__init__(topic, **kwargs)


class YdbRoute(SubscriberRoute):
    """A subscriber to declare in a ``YdbRouter(handlers=[...])``: its handler, the arguments of
    ``broker.subscriber``, and the ``YdbPublisher`` objects its return value goes to."""

    def __init__(
        self,
        call: Callable[..., Any] | Callable[..., Awaitable[Any]],
        *topics: str | TopicSelector,
        publishers: Iterable[YdbPublisher] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(call, *topics, publishers=publishers, **kwargs)


class YdbRouter(YdbRegistrator, BrokerRouter[Any, YdbBrokerConfig]):
    """Subscribers and publishers for ``broker.include_router(router)``; ``prefix`` goes before
    every topic path they name."""

    def __init__(
        self,
        prefix: str = "",
        handlers: Iterable[YdbRoute] = (),
        *,
        dependencies: Sequence[Dependant] = (),
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        routers: Iterable[YdbRegistrator] = (),
        parser: CustomCallable | None = None,
        decoder: CustomCallable | None = None,
        include_in_schema: bool | None = None,
        ack_policy: AckPolicy = EMPTY,
    ) -> None:
        super().__init__(
            handlers=handlers,
            config=YdbBrokerConfig(
                broker_middlewares=middlewares,
                broker_dependencies=dependencies,
                broker_parser=parser,
                broker_decoder=decoder,
                include_in_schema=include_in_schema,
                prefix=prefix,
                ack_policy=ack_policy,
            ),
            routers=routers,
        )
