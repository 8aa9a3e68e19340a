"""The nodes of a local server: where each one listens, its id and location, and whether it is up.

A ``LocalTopicServer`` is one node; a ``LocalTopicCluster`` is several, sharing one storage. Each
node is a gRPC server of its own. Discovery lists the live ones (``ListEndpoints`` names every
live node with its node id and location, and the location of the node that answered as
``self_location``), partitions are placed on them like YDB's tablets (``TopicStorage.place``),
and a node that stops takes its connections with it.
"""

from __future__ import annotations

from dataclasses import dataclass

LOCAL_LOCATION = "local"
"""The location a single ``LocalTopicServer`` reports for its one node."""


@dataclass(eq=False)
class ServerNode:
    """One node: a gRPC server on ``host:port`` with YDB's node id and location (data centre)."""

    node_id: int
    location: str
    host: str
    port: int
    """The port it listens on; the requested one (0: any free port) until it first started."""
    tls: bool = False
    alive: bool = False
    """Whether its gRPC server is serving now."""

    @property
    def endpoint(self) -> str:
        """``grpc://host:port`` (``grpcs://`` with TLS)."""
        return f"{'grpcs' if self.tls else 'grpc'}://{self.host}:{self.port}"

    def __repr__(self) -> str:
        state = "up" if self.alive else "down"
        return f"ServerNode({self.node_id}, {self.location!r}, {self.host}:{self.port}, {state})"
