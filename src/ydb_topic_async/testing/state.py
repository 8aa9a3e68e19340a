"""What the local server's services share: ``ServerState``.

``LocalTopicServer`` builds one ``ServerState`` and hands it to the services that use several of
its parts (the write and read streams, the query service, discovery); a service that needs one
part (the control plane, retention) gets just that part. The state holds:

- the address facts: database, host, port (known once the server listens), whether it serves TLS;
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
from .partition_log import TopicStorage
from .quotas import WriteQuotas
from .stats import ServerStats

LOGIN = "Login"
"""The one method the gate lets through without a token: the one that issues tokens."""


class ServerState:
    """The parts of one local server that its services share."""

    def __init__(
        self,
        database: str,
        host: str,
        *,
        tls: bool,
        users: dict[str, str] | None,
        token_ttl: float | None,
        write_quotas: bool,
        tokens: Mapping[str, str] | None = None,
        token_services: Sequence[TokenValidator] = (),
    ) -> None:
        self.database = database
        self.host = host
        self.port = 0
        """The port the server listens on, once it does (0 before)."""
        self.tls = tls
        self.clock = ServerClock()
        self.storage = TopicStorage(database, self.clock)
        self.quotas = WriteQuotas(self.clock) if write_quotas else None
        """The partition write quotas, or None when writes are not throttled."""
        self.faults = Faults()
        self.stats = ServerStats()
        self.auth = Auth(users, token_ttl, tokens=tokens, token_services=token_services)
        self.gate = Gate(self.auth, database)
        self.closing = False
        """True while the server stops: stream handlers stop waiting (for write quota) and end."""

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
