"""``LocalTopicCluster``: several local server nodes over one storage, for node loss and balancing.

Each node is a real gRPC server on its own loopback port; all of them serve the same database,
storage, clock, fault hooks and query sessions. What a client meets is what a YDB cluster shows:

- discovery (``ListEndpoints``, on any node) names every live node with its node id and location,
  and the answering node's location as ``self_location``;
- each partition's tablet runs on one node (``describe_topic(include_location=True)`` and
  ``describe_partition`` report its node id and generation), spread across the nodes;
- ``stop_node(i)`` stops node ``i``'s gRPC server: the streams it served break, its port refuses
  connections, the query sessions living on it end (their transactions abort), and its
  partitions move to live nodes with a new generation. Write sessions of a moved partition end
  with UNAVAILABLE on every node ("pipe to partition's tablet is dead"), and a direct write
  (``partition_with_generation``) naming the old generation, or sent to a node that does not
  hold the partition, is refused the same way, so the writer locates the partition again. Read
  sessions served by other nodes keep their partitions: YDB's read proxy reconnects to a moved
  tablet itself;
- ``stop_node_during_commit(held, apply=...)`` stops the node holding a transaction's query
  session while its commit is in flight (held by ``faults.hold_next_commit``), having applied
  the commit first or not: the client's call ends without an answer, as when a node dies after
  (or before) its commit took effect;
- ``start_node(i)`` brings the node back on the same port. Partitions stay where they moved
  (YDB does not move tablets back when a node returns); partitions created later, and those
  whose node stops, are placed on it again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from .auth import TokenValidator
from .faults import HeldCommit
from .nodes import ServerNode
from .server import LocalTopicServer

DEFAULT_LOCATIONS = ("dc-1", "dc-2", "dc-3")
"""Node ``i`` is in ``DEFAULT_LOCATIONS[i % 3]`` unless ``locations`` says otherwise."""


class LocalTopicCluster(LocalTopicServer):
    """A local YDB topic cluster of ``nodes`` nodes on loopback: ``async with LocalTopicCluster(3) as cluster``.

    Everything a ``LocalTopicServer`` offers (``storage``, ``faults``, ``stats``, ``query``,
    ``advance_time``, the options) applies to the whole cluster. ``endpoint`` is the first node's
    endpoint; a driver given it discovers the others.

    Parameters:
        nodes: How many nodes (gRPC servers) the cluster runs, at least 1. Their node ids are 1 .. ``nodes``.
        host: The address every node listens on.
        database: The database the cluster serves.

    Keyword Args:
        ports (Sequence[int] | None): Each node's port (0, or no list: a free one). A restarted
            node keeps its port.
        locations (Sequence[str] | None): Each node's location (data centre name), as discovery
            reports it; by default ``dc-1``, ``dc-2``, ``dc-3``, ``dc-1``, ...
        users (dict[str, str] | None): Require a login: user name -> password.
        token_ttl (float | None): Seconds a login token stays valid (None: forever).
        graceful_stop_timeout (float): Seconds a reader has to confirm a graceful partition stop.
        tls (tuple[bytes, bytes] | None): A (PEM private key, PEM certificate chain) pair: every node serves TLS.
        client_ca (bytes | None): As for ``LocalTopicServer``: ask clients for a certificate.
        require_client_cert (bool): As for ``LocalTopicServer``: mutual TLS.
        tokens (Mapping[str, str] | None): As for ``LocalTopicServer``: pre-shared tokens.
        token_services (Sequence[TokenValidator]): As for ``LocalTopicServer``: the testing token services.
        data_dir (str | os.PathLike[str] | None): Keep everything acknowledged in this directory
            (see ``LocalTopicServer``).
        write_quotas (bool): Throttle writes to each partition's write speed, as YDB does.
        retention_interval (float): Seconds between retention runs.
        direct_read (bool): Offer direct read (see ``LocalTopicServer``); ``False``: as a YDB without it.

    Raises:
        ValueError: ``nodes`` is below 1, or ``ports`` / ``locations`` do not name one per node.
    """

    def __init__(
        self,
        nodes: int = 3,
        host: str = "127.0.0.1",
        database: str = "/local",
        *,
        ports: Sequence[int] | None = None,
        locations: Sequence[str] | None = None,
        users: dict[str, str] | None = None,
        token_ttl: float | None = None,
        graceful_stop_timeout: float = 10.0,
        tls: tuple[bytes, bytes] | None = None,
        client_ca: bytes | None = None,
        require_client_cert: bool = False,
        tokens: Mapping[str, str] | None = None,
        token_services: Sequence[TokenValidator] = (),
        data_dir: str | os.PathLike[str] | None = None,
        write_quotas: bool = False,
        retention_interval: float = 1.0,
        direct_read: bool = True,
    ) -> None:
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise ValueError(f"nodes must be a positive int, got {nodes!r}")
        if ports is not None and len(ports) != nodes:
            raise ValueError(f"ports must name one port per node ({nodes}), got {len(ports)}")
        if locations is not None and len(locations) != nodes:
            raise ValueError(f"locations must name one location per node ({nodes}), got {len(locations)}")
        self._node_count = nodes
        self._ports = list(ports) if ports is not None else [0] * nodes
        self._locations = (
            list(locations) if locations is not None else [DEFAULT_LOCATIONS[i % 3] for i in range(nodes)]
        )
        super().__init__(
            host,
            self._ports[0],
            database,
            users=users,
            token_ttl=token_ttl,
            graceful_stop_timeout=graceful_stop_timeout,
            tls=tls,
            client_ca=client_ca,
            require_client_cert=require_client_cert,
            tokens=tokens,
            token_services=token_services,
            data_dir=data_dir,
            write_quotas=write_quotas,
            retention_interval=retention_interval,
            direct_read=direct_read,
        )

    def _make_nodes(self, host: str, port: int, tls: bool) -> list[ServerNode]:
        return [
            ServerNode(index + 1, self._locations[index], host, self._ports[index], tls)
            for index in range(self._node_count)
        ]

    async def __aenter__(self) -> LocalTopicCluster:
        await self.start()
        return self

    @property
    def nodes(self) -> list[ServerNode]:
        """Every node, live or stopped: ``nodes[i].node_id`` (``i + 1``), ``.location``,
        ``.endpoint``, ``.alive``."""
        return list(self.state.nodes)

    @property
    def endpoints(self) -> list[str]:
        """The endpoints of the live nodes."""
        return [node.endpoint for node in self.state.live_nodes()]

    def node_of(self, path: str, partition_id: int) -> ServerNode:
        """The node a partition's tablet runs on now."""
        node_id = self.storage.topic(path).partition(partition_id).node_id
        return next(node for node in self.state.nodes if node.node_id == node_id)

    async def stop_node(self, index: int, grace: float | None = None) -> None:
        """Stop node ``index`` (0 .. ``nodes`` - 1): its gRPC server stops (its calls are cancelled,
        its port refuses), its query sessions end, its partitions move to the live nodes with a
        new generation. ``grace``: seconds its calls get to finish first (None: none). Stopping
        a stopped node does nothing."""
        await self._stop_node(self._node(index), grace)

    async def stop_node_during_commit(self, held: HeldCommit, *, apply: bool, timeout: float = 10.0) -> ServerNode:
        """Stop the node holding a transaction's query session while its commit is in flight.

        ``held`` comes from ``faults.hold_next_commit()`` (arm it before the client commits).
        Once the commit arrives (``TimeoutError`` after ``timeout`` seconds), it is applied
        when ``apply`` is True (its messages stored, its consumer offsets moved) and left
        unapplied otherwise; then the node its session lives on stops, which cancels the call
        (a client sends a session's calls to its node) and ends the session, aborting the
        transaction if it was not applied. Returns the stopped node.

        Raises:
            RuntimeError: ``apply`` was asked and the commit could not apply (its transaction
                was already gone or conflicts).
        """
        try:
            await held.wait_arrived(timeout)
        except TimeoutError:
            held.release()
            raise
        if apply and not self.query.apply_held(held):
            held.release()
            raise RuntimeError(f"the held commit of {held.tx_id} could not be applied")
        node = next((n for n in self.state.nodes if n.node_id == held.node_id), None)
        if node is None:
            held.release()
            raise RuntimeError(f"the session of the held commit {held.tx_id} was not found")
        try:
            await self._stop_node(node, None)
        finally:
            held.release()  # a call served by another node answers UNDETERMINED
        return node

    async def start_node(self, index: int) -> None:
        """Start node ``index`` again, on the port it had; starting a live node does nothing.
        Partitions that moved away stay where they are."""
        node = self._node(index)
        if not node.alive:
            await self._start_node(node)
            self.state.nodes_changed()

    def _node(self, index: int) -> ServerNode:
        if not self._started:
            raise RuntimeError("the cluster is not running: start it first (async with LocalTopicCluster(...))")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.state.nodes):
            raise IndexError(f"no node {index!r}: the cluster has nodes 0 .. {len(self.state.nodes) - 1}")
        return self.state.nodes[index]

    def __repr__(self) -> str:
        return f"LocalTopicCluster({self.state.nodes!r})"
