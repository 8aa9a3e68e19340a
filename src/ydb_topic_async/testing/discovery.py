"""DiscoveryService and AuthService on the local server.

- ``DiscoveryService.ListEndpoints`` names every live node of the server (a ``LocalTopicServer``
  is one node, a ``LocalTopicCluster`` several) with its node id and location, and the location
  of the node that answered as ``self_location``, as YDB does; no TLS unless the server serves TLS.
- ``DiscoveryService.WhoAmI`` names the user of the call's token.
- ``AuthService.Login`` trades a user's password for a token (``auth``).
"""

from __future__ import annotations

from typing import Any

from .._proto import ydb_auth_pb2, ydb_discovery_pb2
from .auth import AUTH_HEADER
from .nodes import ServerNode
from .state import ServerState
from .stored import StorageError

ANONYMOUS = "root"
"""The user WhoAmI reports when authentication is off (a local YDB reports root@builtin)."""


class DiscoveryHandlers:
    """The unary handlers of DiscoveryService and AuthService."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.nodes: list[tuple[str, int, int]] = []
        """(host, port, node_id) of each node ``ListEndpoints`` names instead of the server's own live
        nodes; empty: the live nodes. Tests point these at proxies of a server to imitate more nodes
        (they get the answering node's location), or at proxies in front of a cluster's nodes (an
        entry whose node id is a stopped node of the cluster is left out, as the node is)."""

    def list_endpoints(self, request: Any, node: ServerNode) -> ydb_discovery_pb2.ListEndpointsResult:
        """The live nodes (or the ``nodes`` named instead), as seen from ``node``."""
        state = self.state
        if request.database and request.database.rstrip("/") != state.database:
            raise StorageError("SCHEME_ERROR", f"database {request.database} does not exist here ({state.database})")
        result = ydb_discovery_pb2.ListEndpointsResult(self_location=node.location)
        if self.nodes:
            stopped = {n.node_id for n in state.nodes if not n.alive}
            for host, port, node_id in self.nodes:
                if node_id in stopped:
                    continue
                result.endpoints.add(address=host, port=port, location=node.location, node_id=node_id, ssl=state.tls)
            return result
        for live in state.live_nodes():
            result.endpoints.add(
                address=live.host, port=live.port, location=live.location, node_id=live.node_id, ssl=state.tls
            )
        return result

    def who_am_i(self, request: Any, headers: dict[str, str]) -> ydb_discovery_pb2.WhoAmIResult:
        auth = self.state.auth
        user = auth.user_of(headers.get(AUTH_HEADER, "")) if auth.enabled else ANONYMOUS
        return ydb_discovery_pb2.WhoAmIResult(user=user or "")

    def login(self, request: Any) -> ydb_auth_pb2.LoginResult:
        token = self.state.auth.login(request.user, request.password)
        if token is None:
            raise StorageError("UNAUTHORIZED", f"invalid user or password for {request.user!r}")
        return ydb_auth_pb2.LoginResult(token=token)
