"""A local YDB topic server for tests and examples.

    async with LocalTopicServer() as server:
        async with Driver(server.endpoint, server.database) as driver:
            ...

It speaks YDB's gRPC protocol for topics, transactions, discovery and auth, so the official YDB SDKs work
against it too. ``server.storage`` exposes what it stores; ``server.faults`` breaks streams and
injects statuses. Run it standalone with ``python -m ydb_topic_async.testing --port 2136``.
"""

from ._serve import CannotServeError, serve_until_signalled, start_serving
from .faults import Faults
from .partition_log import Partition, Topic, TopicStorage
from .server import LocalTopicServer
from .stored import StorageError, StoredMessage

FaultInjector = Faults
"""Alias: the type of ``LocalTopicServer.faults``."""

__all__ = [
    "CannotServeError",
    "FaultInjector",
    "Faults",
    "LocalTopicServer",
    "Partition",
    "StorageError",
    "StoredMessage",
    "Topic",
    "TopicStorage",
    "serve_until_signalled",
    "start_serving",
]
