"""Glue for web frameworks: one driver and long-lived writers per process, supervised consumers.

``TopicRuntime``, ``WriterSpec``, ``Consumer`` and ``TransactionalConsumer`` need no framework; the FastAPI and aiohttp
adapters live in ``ydb_topic_async.integrations.fastapi`` and ``...aiohttp`` (optional extras).
"""

from ._runtime import SupervisedConsumer, TopicRuntime, WriterSpec
from ._supervisor import BatchHandler, Consumer, Handler
from ._transactional import TransactionalConsumer, TxHandler

__all__ = [
    "BatchHandler",
    "Consumer",
    "Handler",
    "SupervisedConsumer",
    "TopicRuntime",
    "TransactionalConsumer",
    "TxHandler",
    "WriterSpec",
]
