"""FastStream's broker for YDB topics (the ``faststream`` extra).

    from faststream import FastStream
    from ydb_topic_async.faststream import YdbBroker

    broker = YdbBroker("grpc://localhost:2136", database="/local")

    @broker.subscriber("orders", consumer="billing")
    async def bill(order: dict) -> None: ...

    app = FastStream(broker)

``TestYdbBroker`` runs it in memory for tests; ``.fastapi.YdbRouter`` plugs it into FastAPI;
``.opentelemetry`` and ``.prometheus`` hold FastStream's telemetry middlewares for it.
"""

from importlib.util import find_spec

from ..extras import missing_dependency

try:
    from faststream import TestApp

    from ._annotations import YdbDriver, YdbMessage
    from ._broker import YdbBroker
    from ._message import KEY_METADATA
    from ._message import YdbMessage as YdbStreamMessage
    from ._producer import YdbProducer
    from ._publisher import YdbBatchPublisher, YdbDefaultPublisher
    from ._registrator import YdbRegistrator
    from ._response import YdbPublishCommand, YdbPublishMessage, YdbResponse
    from ._router import YdbPublisher, YdbRoute, YdbRouter
    from ._subscriber import DEFAULT_ACK_POLICY, YdbBatchSubscriber, YdbSubscriber
    from ._testing import InMemoryMessage, TestYdbBroker
except ImportError as exc:
    if find_spec("faststream") is None:  # the extra is missing, rather than something inside it
        raise missing_dependency(exc, __name__, "FastStream", "faststream") from exc
    raise

__all__ = [
    "DEFAULT_ACK_POLICY",
    "KEY_METADATA",
    "InMemoryMessage",
    "TestApp",
    "TestYdbBroker",
    "YdbBatchPublisher",
    "YdbBatchSubscriber",
    "YdbBroker",
    "YdbDefaultPublisher",
    "YdbDriver",
    "YdbMessage",
    "YdbProducer",
    "YdbPublishCommand",
    "YdbPublishMessage",
    "YdbPublisher",
    "YdbRegistrator",
    "YdbResponse",
    "YdbRoute",
    "YdbRouter",
    "YdbStreamMessage",
    "YdbSubscriber",
]
