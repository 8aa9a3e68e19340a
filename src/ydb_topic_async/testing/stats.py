"""Counters of what the local server did: requests and messages, per direction.

``LocalTopicServer.stats`` lets a test check how a client batches (messages per WriteRequest,
per ReadResponse) and lets benchmarks relate the server's CPU time to the work it did. Counting
is per request, never per message, so it costs nothing measurable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class ServerStats:
    """Totals since the server was created."""

    write_requests: int = 0
    """WriteRequests received (valid or not)."""
    messages_received: int = 0
    """Messages in the WriteRequests that were accepted: stored, held by a transaction or skipped as duplicates."""
    read_responses: int = 0
    """ReadResponses sent."""
    messages_sent: int = 0
    """Messages in the ReadResponses sent."""
    token_updates: int = 0
    """Tokens sent in-band (UpdateTokenRequest) on write and read streams, and accepted."""
    direct_read_responses: int = 0
    """Direct reads formed (DirectReadResponses, each sent once or more by the partition's node)."""
    read_bytes_sent: int = 0
    """Bytes of ReadResponses and DirectReadResponses sent, all nodes together."""
    read_bytes_from_other_nodes: int = 0
    """Of ``read_bytes_sent``, those a node sent of a partition another node hosts: in a real cluster
    they first crossed from the partition's node to the one serving the stream."""

    def count_read_bytes(self, nbytes: int, remote: bool) -> None:
        """A node sent ``nbytes`` of read data; ``remote``: of a partition another node hosts."""
        self.read_bytes_sent += nbytes
        if remote:
            self.read_bytes_from_other_nodes += nbytes

    def snapshot(self) -> dict[str, int]:
        """The counters as a plain dict (to compare before and after)."""
        return asdict(self)
