"""What the reader machinery keeps about one partition session: ``SessionBookkeeping``.

A ``PartitionSession`` (``messages``) is what users hold; everything about it that changes while
the reader reads lives in the one ``SessionBookkeeping`` it carries, written only by the reader
machinery: its state and committed offset (which the session shows read-only), where commit
ranges start, what is buffered and handed out, the commits requested and their waiters, seeks
and the partition's in-flight bytes. The machinery reads and writes it directly (plain slots):
``TopicReader.commit`` extends ``commit_run`` on its hot path with no lookup.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from typing import Protocol


class PartitionSessionState(enum.Enum):
    """Where a partition session is in its life."""

    ACTIVE = "active"
    """Reading: its messages are handed out and can be committed."""
    STOPPING = "stopping"
    """The server asked for a graceful stop: what is buffered is still handed out, and the stop is
    confirmed once what was handed out is committed (or ``graceful_stop_timeout`` passes)."""
    CLOSED = "closed"
    """Ended: its offsets can no longer be committed."""


class Rereading(Protocol):
    """A backward seek being served (``seeking.Replay``), as the buffer and the partition
    sessions see it."""

    @property
    def resume(self) -> int:
        """Where the session's own stream continues once what is read again was handed out."""
        ...

    def taken(self, nbytes: int, part_done: bool) -> None:
        """``nbytes`` of what it read again were handed out (``part_done``: a part's last)."""
        ...

    def cancel(self) -> None:
        """Stop: what was read again and not handed out is dropped."""
        ...


class SessionBookkeeping:
    """One partition session's changing state, kept by the reader machinery (see the module)."""

    __slots__ = (
        "ack_waiters",
        "buffered",
        "child_partition_ids",
        "commit_run",
        "committed_offset",
        "delivered_end",
        "ended",
        "hold",
        "in_flight",
        "in_flight_marks",
        "next_commit_start",
        "over_limit",
        "owner",
        "partition_end_offset",
        "paused",
        "recorded",
        "replay",
        "skip_to",
        "state",
        "stop_deadline",
    )

    def __init__(self, committed_offset: int, partition_end_offset: int) -> None:
        # What the session shows (read-only) to its users.
        self.state = PartitionSessionState.ACTIVE
        self.committed_offset = committed_offset
        """The latest committed offset the server reported."""
        self.partition_end_offset = partition_end_offset
        """The partition's end offset, as last reported (at the start, or by a status request)."""
        self.ended = False
        """An auto-partitioned topic's partition has no more data (``child_partition_ids`` follow)."""
        self.child_partition_ids: tuple[int, ...] = ()
        # The stream's side (``session``, ``seeking``).
        self.next_commit_start = committed_offset
        """Commit range start of the next message received: ranges cover gaps between offsets."""
        self.skip_to = 0
        """Messages the stream delivers below this offset are dropped as they arrive (a forward
        seek past what was received; 0: none)."""
        # The buffer's side (``flow_control``).
        self.buffered = 0
        """Parts (responses' data for this session) received and not yet handed out in full."""
        self.delivered_end = committed_offset
        """End (offset + 1) of the last message handed to the user."""
        self.hold = False
        """The stream's own messages wait until what a backward seek reads again was handed out."""
        self.over_limit = False
        """Handed out and not committed reached ``partition_max_in_flight_bytes``."""
        self.paused = False
        """``hold or over_limit``: some of its buffered messages may not be handed out now."""
        self.in_flight = 0
        """Bytes handed out and not yet committed (counted only under ``partition_max_in_flight_bytes``)."""
        self.in_flight_marks: deque[tuple[int, int]] = deque()
        """(commit end, bytes) of each take counted in ``in_flight``, in the order taken."""
        # Commits (``commits``).
        self.recorded: list[list[int]] = []
        """Commit ranges ``[start, end]`` requested and not yet below the committed offset."""
        self.commit_run: list[int] | None = None
        """The last of ``recorded`` while it is not sent yet: an in-order commit extends it."""
        self.owner: object = None
        """The commit tracker of the reader that received the session (set by its first commit)."""
        self.ack_waiters: list[tuple[int, asyncio.Future[None]]] = []
        """(range end, future) of each ``commit_with_ack`` and ``close`` waiting for the server."""
        # The partition sessions' side (``partitions``) and seeks (``seeking``).
        self.stop_deadline: float | None = None
        """When a graceful stop is confirmed even with commits missing (``time.monotonic``)."""
        self.replay: Rereading | None = None
        """The backward seek being served, None when there is none."""


__all__ = ["PartitionSessionState", "Rereading", "SessionBookkeeping"]
