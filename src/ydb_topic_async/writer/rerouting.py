"""Placing a failed lane's messages again: the keyed writer's split and overload recovery.

A lane fails with OVERLOADED when its partition split (the partition is inactive) or is only
busy. ``Rerouting`` takes failed lanes one at a time, in its own task, while new writes are held
back (``steady`` is clear meanwhile); the messages a keyed writer held while it waited for its
topic to be created (``wait_for_topic``) are placed the same way, in their order, before any
later write. It reads the topic's partitions, retried under the keyed
writer's own policy (by default for as long as it is open, as its lanes reconnect), not the
driver's budget for one call, so an outage during a recovery delays it instead of failing the
keyed writer and every message it holds. Then:

- the partition is still active (only overloaded): back off, then resend the lane's
  unacknowledged messages to its partition with the same seq_nos (the server drops what it has);
- it split: the key routes are read anew, the server is asked which of the lane's unacknowledged
  messages the old partition stored (the last seq_no of the lane's producer id: those resolve as
  ``Skipped``), and the rest are sent, in their order, to the partitions their keys now belong
  to, before any later message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from .._errors import BufferFullTimeoutError, OverloadedError
from .._retry import RetryState
from ..observability.logging import sdk_logger
from .keyed_lanes import Entry, Lane, LaneBroken, Lanes
from .messages import Skipped, WriteResult
from .partitioning import KeyRouter, Partitioner

if TYPE_CHECKING:
    from .._retry import RetryPolicy
    from ..topic.admin import TopicAdmin

logger = sdk_logger("writer")


class Rerouting:
    """Recovers the failed lanes of the keyed writer of ``path`` (see the module's docstring).

    ``settle(entry, result)`` resolves an entry the old partition had stored; ``lane_failed(lane)``
    is the keyed writer's reaction to a lane that breaks while taking messages (it comes back
    through ``take``); ``rerouted(routes)`` gives the keyed writer the routes after a split.
    """

    def __init__(
        self,
        path: str,
        admin: TopicAdmin,
        lanes: Lanes,
        retry: RetryPolicy,
        partitioner: Partitioner,
        *,
        settle: Callable[[Entry, WriteResult], None],
        lane_failed: Callable[[Lane], None],
        rerouted: Callable[[KeyRouter], None],
    ) -> None:
        self._path = path
        self._admin = admin
        self._lanes = lanes
        self._retry = retry
        self._partitioner = partitioner
        self._settle = settle
        self._lane_failed = lane_failed
        self._rerouted = rerouted
        self._jobs: asyncio.Queue[Lane | _Placement] = asyncio.Queue()
        """Failed lanes to recover, and messages to place, in the order they came."""
        self.steady = asyncio.Event()
        """Clear while a failed lane is being replaced or its partition's split handled."""
        self.steady.set()
        self._overloads: dict[int, RetryState] = {}
        """Partition id -> its streak of overloads (until a message of it is acknowledged)."""

    def take(self, lane: Lane) -> None:
        """Recover ``lane``, which failed; writes wait until it is done."""
        lane.failed = True
        self.steady.clear()
        self._jobs.put_nowait(lane)

    def place(self, entries: list[Entry], target: Callable[[Entry], int]) -> None:
        """Hand ``entries`` (accepted before the topic's partitions were known), in order, to the
        partitions ``target`` picks; writes wait until it is done."""
        self.steady.clear()
        self._jobs.put_nowait(_Placement(entries, target))

    def acknowledged(self, partition_id: int) -> None:
        """A message of the partition was acknowledged: its streak of overloads is over."""
        self._overloads.pop(partition_id, None)

    async def wait_steady(self, timeout: float | None) -> None:
        """Wait while a split or overloaded partition's messages are being placed again: as
        long as a full buffer would make ``TopicWriter.write`` wait (``buffer_wait_timeout``)."""
        try:
            await asyncio.wait_for(self.steady.wait(), timeout)
        except TimeoutError:
            raise BufferFullTimeoutError(
                f"keyed writer for {self._path}: a split or overloaded partition's messages (or those held while"
                f" the topic was awaited) were still being placed after {timeout}s (buffer_wait_timeout);"
                " nothing from this call was accepted"
            ) from None

    async def run(self) -> None:
        """Recover failed lanes and place held messages, one job at a time, for as long as the
        keyed writer is open; raises what fails a recovery (which fails the keyed writer)."""
        while True:
            job = await self._jobs.get()
            if isinstance(job, _Placement):
                await self._distribute(job.entries, job.target)
            else:
                await self._recover(job)
            if self._jobs.empty():
                self.steady.set()

    async def _recover(self, lane: Lane) -> None:
        pid = lane.partition_id
        error = lane.writer.failure or OverloadedError(f"partition {pid} is overloaded")
        await self._lanes.remove(lane, error)
        entries = [e for e in lane.pending if not e.done]
        lane.pending.clear()
        base = lane.writer.seq_no_base
        description = await self._admin.describe_topic(self._path, retry=self._retry)
        info = next((p for p in description.partitions if p.partition_id == pid), None)
        if info is not None and info.active:
            # Only overloaded: back off, then resend with the same seq_nos (the server drops what it has).
            self._lanes.continue_numbering(lane)
            await self._back_off(pid, error)
            if entries:
                await self._distribute(entries, lambda _: pid)
            return
        routes = KeyRouter(description, self._partitioner)
        self._rerouted(routes)
        # A lane that never connected sent nothing: none of its messages can be stored.
        stored = await self._lanes.last_stored_seq_no(pid) - base if base is not None else 0
        logger.info(
            "keyed writer %s: partition %d was split; %d unacknowledged messages, %d of them stored there",
            self._path, pid, len(entries), sum(1 for e in entries if e.partition_id == pid and e.seq_no <= stored),
        )
        leftovers = []
        for entry in entries:
            if entry.partition_id == pid and entry.seq_no <= stored:
                self._settle(entry, Skipped(pid, entry.seq_no + (base or 0)))
            else:
                leftovers.append(entry)
        await self._distribute(leftovers, lambda entry: routes.partition_for(entry.key))

    async def _distribute(self, entries: list[Entry], target: Callable[[Entry], int]) -> None:
        """Hand ``entries`` over, in order, to the lanes ``target`` picks; a lane that breaks
        before taking its share keeps the entries for its own recovery."""
        groups: dict[int, list[Entry]] = {}
        for entry in entries:
            groups.setdefault(target(entry), []).append(entry)
        for pid, group in groups.items():
            try:
                await self._lanes.hand_over(self._lanes.get(pid), group)
            except LaneBroken as broken:
                broken.lane.pending.extend(group)
                self._lane_failed(broken.lane)

    async def _back_off(self, partition_id: int, error: BaseException) -> None:
        streak = self._overloads.get(partition_id)
        if streak is None:
            streak = self._overloads[partition_id] = RetryState(self._retry)
        delay = streak.next_delay(error)
        if delay is None:
            raise error
        logger.info("keyed writer %s: partition %d overloaded; resending in %.3fs", self._path, partition_id, delay)
        await asyncio.sleep(delay)


class _Placement(NamedTuple):
    """Messages to hand to the partitions ``target`` picks (see ``Rerouting.place``)."""

    entries: list[Entry]
    target: Callable[[Entry], int]


__all__ = ["Rerouting"]
