"""The read balancer of the local server: which read session of a consumer reads which partition.

Readers of one consumer share the partitions of a topic (``ConsumerGroup``): each partition is
owned by at most one read session, partitions are spread evenly, and when readers join or leave
the surplus is moved with a graceful StopPartitionSessionRequest; the new owner gets the
partition only once the old one confirmed (or after ``graceful_stop_timeout``, with a
non-graceful stop). Readers without a consumer read the partitions they name, independently,
and are not balanced.

Auto-partitioning, as YDB's read balancer does it (a split parent becomes inactive):

- A reader session *with* ``auto_partitioning_support`` that read the parent to its end gets an
  EndPartitionSession (with ``child_partition_ids`` and ``adjacent_partition_ids``) and, at
  once, the children, before it commits anything: the client orders its processing itself.
- For a session *without* it, the children become readable only once the parent is finished:
  committed to its end. Until then the session sees just the parent.
- A finished parent's session is stopped (non-graceful): there is nothing left in it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from .read_session import PartitionSessionState, ReadSession
from .storage import Consumer, Partition, Topic


class SessionFactory(Protocol):
    """What the balancer needs from the read service: new partition sessions."""

    graceful_stop_timeout: float

    def new_partition_session(
        self, session: ReadSession, topic: Topic, partition: Partition, consumer: Consumer | None
    ) -> PartitionSessionState: ...


def finished(consumer: Consumer | None, partition: Partition) -> bool:
    """An inactive partition whose data the consumer has fully committed."""
    if consumer is None or partition.active:
        return False
    return consumer.committed_offset(partition) >= partition.end_offset


@dataclass(frozen=True, slots=True)
class ReaderInfo:
    """The read session that currently owns a partition for a consumer."""

    read_session_id: str
    reader_name: str
    assigned_at_ns: int
    node_id: int = 1
    """The node serving the read session's stream."""


@dataclass
class _Release:
    owner: ReadSession
    state: PartitionSessionState
    deadline: float


@dataclass
class ConsumerGroup:
    """The read sessions of one consumer on one topic, and who owns which partition."""

    service: SessionFactory
    topic: Topic
    consumer: Consumer
    members: list[ReadSession] = field(default_factory=list)
    owner: dict[int, tuple[ReadSession, PartitionSessionState]] = field(default_factory=dict)
    releasing: dict[int, _Release] = field(default_factory=dict)

    def placement(self, partition: Partition) -> tuple[bool, ReadSession | None]:
        """Whether ``partition`` may be handed out now, and the session it must go to (None: any)."""
        if finished(self.consumer, partition):
            return False, None
        required = None
        for parent_id in partition.parent_ids:
            parent = self.topic.partitions[parent_id]
            if finished(self.consumer, parent):
                continue
            held = self.owner.get(parent_id)
            if held is None:
                return False, None
            reader, state = held
            if not (reader.auto_partitioning and state.end_sent):
                return False, None
            required = reader
        return True, required

    def forget(self, session: ReadSession) -> None:
        self.members = [m for m in self.members if m is not session]
        for pid, (owner, _) in list(self.owner.items()):
            if owner is session:
                del self.owner[pid]
        for pid, release in list(self.releasing.items()):
            if release.owner is session:
                del self.releasing[pid]

    def released(self, partition_id: int) -> None:
        self.releasing.pop(partition_id, None)
        self.owner.pop(partition_id, None)

    def rebalance(self) -> None:
        if not self.members:
            return
        now = time.monotonic()
        for pid, release in list(self.releasing.items()):
            if release.deadline <= now:
                # The owner did not confirm the graceful stop in time: take the partition away.
                release.owner.stop(release.state, graceful=False)
                self.released(pid)
        for pid, (owner, state) in list(self.owner.items()):
            if finished(self.consumer, state.partition) and pid not in self.releasing:
                if owner.auto_partitioning and not state.end_sent:
                    # Its EndPartitionSession goes first, once the reader confirmed the start
                    # (a confirmation still on its way must not turn the end into a stop).
                    continue
                owner.stop(state, graceful=False)
                del self.owner[pid]
        # Partitions on their way to another reader count for nobody until released.
        counts = {id(m): 0 for m in self.members}
        for pid, (owner, _) in self.owner.items():
            if pid not in self.releasing:
                counts[id(owner)] += 1
        for partition in self.topic.partitions:
            pid = partition.partition_id
            if pid in self.owner:
                continue
            eligible, required = self.placement(partition)
            if not eligible:
                continue
            candidates = [m for m in self.members if m.accepts(self.topic, pid)]
            if required is not None:
                candidates = [m for m in candidates if m is required]
            if not candidates:
                continue
            target = min(candidates, key=lambda m: counts[id(m)])
            counts[id(target)] += 1
            state = self.service.new_partition_session(target, self.topic, partition, self.consumer)
            self.owner[pid] = (target, state)
            target.start(state)
        # Even out: readers above their fair share give partitions back gracefully; the
        # least loaded readers get them once the stops are confirmed.
        total = len(self.owner)
        members = sorted(self.members, key=lambda m: counts[id(m)], reverse=True)
        base, extra = divmod(total, len(members))
        for rank, member in enumerate(members):
            share = base + (1 if rank < extra else 0)
            movable = [
                (pid, state)
                for pid, (owner, state) in self.owner.items()
                if owner is member and pid not in self.releasing and state.started
            ]
            while counts[id(member)] > share and movable:
                pid, state = movable.pop()
                if not any(m is not member and m.accepts(self.topic, pid) for m in self.members):
                    continue
                member.stop(state, graceful=True)
                self.releasing[pid] = _Release(member, state, now + self.service.graceful_stop_timeout)
                counts[id(member)] -= 1

    def next_deadline(self) -> float | None:
        return min((r.deadline for r in self.releasing.values()), default=None)
