"""What the local server's services share: ``ServerState``.

``LocalTopicServer`` builds one ``ServerState`` and hands it to the services that use several of
its parts (the write and read streams, the query service, discovery); a service that needs one
part (the control plane, retention) gets just that part. The state holds:

- the address facts: database, the nodes (``ServerNode``: each one's host, port, node id,
  location and whether it is up; one for a ``LocalTopicServer``), whether it serves TLS;
- the storage and its clock;
- the fault injector, the counters (``ServerStats``), who may call (``Auth``: users and their
  login tokens, pre-shared tokens, trusted token services) and the admission ``Gate``;
- the write quotas (None when writes are not throttled) and whether the server is stopping.

``admit`` is the check every call passes before it is served: the gate, then an injected failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._replies import status_code
from .auth import Auth, Gate, TokenValidator
from .clock import ServerClock
from .faults import Faults
from .nodes import ServerNode
from .quotas import WriteQuotas
from .stats import ServerStats
from .storage import TopicStorage

LOGIN = "Login"
"""The one method the gate lets through without a token: the one that issues tokens."""


class ServerState:
    """The parts of one local server that its services share."""

    def __init__(
        self,
        database: str,
        nodes: list[ServerNode],
        *,
        tls: bool,
        users: dict[str, str] | None,
        token_ttl: float | None,
        write_quotas: bool,
        tokens: Mapping[str, str] | None = None,
        token_services: Sequence[TokenValidator] = (),
    ) -> None:
        self.database = database
        self.nodes = nodes
        """Every node of the server, live or not (one for a ``LocalTopicServer``)."""
        self.tls = tls
        self.clock = ServerClock()
        self.storage = TopicStorage(database, self.clock)
        self.storage.node_ids = [node.node_id for node in nodes]
        self.quotas = WriteQuotas(self.clock) if write_quotas else None
        """The partition write quotas, or None when writes are not throttled."""
        self.faults = Faults()
        self.stats = ServerStats()
        self.auth = Auth(users, token_ttl, tokens=tokens, token_services=token_services)
        self.gate = Gate(self.auth, database)
        self.closing = False
        """True while the server stops: stream handlers stop waiting (for write quota) and end."""

    @property
    def host(self) -> str:
        """The first node's address."""
        return self.nodes[0].host

    @property
    def port(self) -> int:
        """The first node's port, once it listens (0 before, unless one was asked for)."""
        return self.nodes[0].port

    @property
    def clustered(self) -> bool:
        """Whether the nodes are several: a partition's location then matters (direct write)."""
        return len(self.nodes) > 1

    def live_nodes(self) -> list[ServerNode]:
        """The nodes serving now, in node order."""
        return [node for node in self.nodes if node.alive]

    def nodes_changed(self) -> None:
        """A node started or stopped: place partitions on the live nodes only."""
        self.storage.node_ids = [node.node_id for node in self.live_nodes()]
        self.storage.move_off_dead_nodes()

    def admit(self, method: str, headers: dict[str, str]) -> tuple[int, str] | None:
        """Why a call of ``method`` is refused, as ``(YDB status code, issue message)``; None to serve it.

        The gate first (auth, database), except for Login, then a failure injected for ``method``.
        """
        if method != LOGIN:
            refusal = self.gate.admit(headers)
            if refusal is not None:
                status, message = refusal
                return status_code(status), message
        injected = self.faults.take_status(method)
        if injected is not None:
            return injected, "injected failure"
        return None
