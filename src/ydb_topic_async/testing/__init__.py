"""A local YDB topic server for tests and examples.

    async with LocalTopicServer() as server:
        async with Driver(server.endpoint, server.database) as driver:
            ...

It speaks YDB's gRPC protocol for topics, transactions, discovery and auth, so the official YDB SDKs work
against it too. ``server.storage`` exposes what it stores; ``server.faults`` breaks streams and
injects statuses. ``LocalTopicCluster(nodes=3)`` runs several nodes over one storage, to test
discovery, direct write and node loss. Run it standalone with ``python -m ydb_topic_async.testing
--port 2136`` (``--nodes 3`` for a cluster), ``ydb-topic-local-server`` or ``ydb-topic-async serve``,
which all take the options ``add_serve_arguments`` defines.

The token services (``IamTokenService``, ``TokenExchangeService``, ``MetadataService``) stand in
for the cloud's on loopback, so the cloud credentials can be tested offline; the server accepts
the tokens they issue (``LocalTopicServer(token_services=[...])``) or pre-shared ones
(``LocalTopicServer(tokens={token: user})``).
"""

from ._serve import (
    CannotServeError,
    add_serve_arguments,
    serve_until_signalled,
    serving_banner,
    start_serving,
    start_serving_from,
)
from .cluster import LocalTopicCluster
from .faults import Faults, HeldCommit
from .nodes import ServerNode
from .server import LocalTopicServer
from .storage import Partition, Topic, TopicStorage
from .stored import StorageError, StoredMessage
from .token_services import IamTokenService, MetadataService, TokenExchangeService, TokenService

FaultInjector = Faults
"""Alias: the type of ``LocalTopicServer.faults``."""

__all__ = [
    "CannotServeError",
    "FaultInjector",
    "Faults",
    "HeldCommit",
    "IamTokenService",
    "LocalTopicCluster",
    "LocalTopicServer",
    "MetadataService",
    "Partition",
    "ServerNode",
    "StorageError",
    "StoredMessage",
    "TokenExchangeService",
    "TokenService",
    "Topic",
    "TopicStorage",
    "add_serve_arguments",
    "serve_until_signalled",
    "serving_banner",
    "start_serving",
    "start_serving_from",
]
