"""A stand-alone ``DiscoveryService`` for tests: a real gRPC server whose ``ListEndpoints`` names
the nodes a test chooses (with their locations), so that a driver seeded with it spreads its
calls over proxies in front of one local topic server as over the nodes of a cluster."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from google.protobuf import any_pb2

from ydb_topic_async._proto import ydb_discovery_pb2, ydb_operation_pb2, ydb_status_codes_pb2
from ydb_topic_async.testing.proxy import FlakyProxy, proxy_to


@dataclass
class ListedNode:
    host: str
    port: int
    node_id: int = 0
    location: str = ""


class DiscoveryServer:
    """Answers ``ListEndpoints`` with ``nodes`` (itself when empty) and ``self_location``,
    recording the headers of every call; ``status`` replaces SUCCESS."""

    def __init__(
        self, nodes: list[ListedNode] | None = None, status: ydb_status_codes_pb2.StatusIds.StatusCode | None = None
    ) -> None:
        self.calls: list[dict[str, str]] = []
        self.nodes: list[ListedNode] = list(nodes or [])
        self.self_location = ""
        self.status = status or ydb_status_codes_pb2.StatusIds.SUCCESS
        self.server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            "Ydb.Discovery.V1.DiscoveryService",
            {
                "ListEndpoints": grpc.unary_unary_rpc_method_handler(
                    self._list,
                    request_deserializer=ydb_discovery_pb2.ListEndpointsRequest.FromString,
                    response_serializer=ydb_discovery_pb2.ListEndpointsResponse.SerializeToString,
                )
            },
        )
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    async def _list(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        self.calls.append({k: v for k, v in context.invocation_metadata() or ()})
        result = ydb_discovery_pb2.ListEndpointsResult(self_location=self.self_location)
        for node in self.nodes or [ListedNode("127.0.0.1", self.port)]:
            result.endpoints.add(address=node.host, port=node.port, node_id=node.node_id, location=node.location)
        packed = any_pb2.Any()
        packed.Pack(result)
        return ydb_discovery_pb2.ListEndpointsResponse(
            operation=ydb_operation_pb2.Operation(ready=True, status=self.status, result=packed)
        )


@contextlib.asynccontextmanager
async def discovery_server(
    nodes: list[ListedNode] | None = None, status: ydb_status_codes_pb2.StatusIds.StatusCode | None = None
) -> AsyncIterator[DiscoveryServer]:
    srv = DiscoveryServer(nodes, status)
    await srv.server.start()
    try:
        yield srv
    finally:
        await srv.server.stop(None)


@contextlib.asynccontextmanager
async def proxied_nodes(
    target: Any, locations: list[str]
) -> AsyncIterator[tuple[DiscoveryServer, list[FlakyProxy]]]:
    """One proxy in front of ``target`` (a local topic server) per entry of ``locations``, as
    nodes 1, 2, ... in those locations, and a discovery server that lists them."""
    async with contextlib.AsyncExitStack() as stack:
        proxies = [await stack.enter_async_context(proxy_to(target)) for _ in locations]
        nodes = [
            ListedNode("127.0.0.1", proxy.port, node_id, location)
            for node_id, (proxy, location) in enumerate(zip(proxies, locations, strict=True), 1)
        ]
        discovery = await stack.enter_async_context(discovery_server(nodes))
        yield discovery, proxies
