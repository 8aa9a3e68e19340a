"""Commit bookkeeping: offset ranges merged per partition session, and acknowledgement futures.

A message's commit range runs from the end of the previous message received in its partition
session (the session's committed offset for the first one) to its offset + 1, so ranges
committed in order are contiguous and cover offsets that hold no message (retention, aborted
transactions). ``commit`` only records a range; the stream's sender sends everything recorded
since its last turn as one ``CommitOffsetRequest`` with the ranges of each session merged.
The server acknowledges with the session's committed offset; a waiter resolves once that
offset reaches its range end, or fails when the session ends first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from .._proto import ydb_topic_pb2 as pb
from .bookkeeping import PartitionSessionState
from .messages import PartitionSession

GAP_ADVICE = (
    "commits are contiguous from the committed offset; commit every message or whole batches"
    " (and, after a forward seek, the SkippedOffsets it returned)"
)
"""Why a commit behind a gap waits, and what to do about it (for log messages)."""


def subtract_ranges(ranges: list[tuple[int, int]], covered: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of sorted, merged ``ranges`` outside sorted, merged ``covered``."""
    out: list[tuple[int, int]] = []
    index = 0
    for start, end in ranges:
        while index < len(covered) and covered[index][1] <= start:
            index += 1
        position = index
        while start < end and position < len(covered) and covered[position][0] < end:
            cover_start, cover_end = covered[position]
            if cover_start > start:
                out.append((start, cover_start))
            start = max(start, cover_end)
            position += 1
        if start < end:
            out.append((start, end))
    return out


def merge_ranges(ranges: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """Sort and merge touching or overlapping ``[start, end)`` ranges."""
    ordered = sorted((start, end) for start, end in ranges)
    if len(ordered) < 2:
        return ordered
    merged = [ordered[0]]
    for start, end in ordered[1:]:
        last_start, last_end = merged[-1]
        if start <= last_end:
            if end > last_end:
                merged[-1] = (last_start, end)
        else:
            merged.append((start, end))
    return merged


class CommitTracker:
    """Ranges recorded but not yet sent, per partition session, and the ack waiters.

    The ranges of in-order commits grow in place: each session's last range, while it is not
    sent yet, is its bookkeeping's ``commit_run``, which the next commit in order extends
    (``TopicReader.commit`` does that itself, on its hot path)."""

    def __init__(self, wake_sender: asyncio.Event) -> None:
        self._pending: dict[PartitionSession, list[list[int]]] = {}
        self._wake_sender = wake_sender
        self.on_committed: Callable[[PartitionSession], None] | None = None
        """Told of each session whose committed offset moved forward."""

    def add(self, session: PartitionSession, start: int, end: int, want_ack: bool) -> asyncio.Future[None] | None:
        """Record ``[start, end)`` for ``session``; return an ack future when asked for one."""
        books = session._bookkeeping
        future: asyncio.Future[None] | None = None
        if want_ack:
            future = asyncio.get_running_loop().create_future()
        if end <= books.committed_offset:
            if future is not None:
                future.set_result(None)
            return future
        if future is not None:
            books.ack_waiters.append((end, future))
        run = books.commit_run
        if run is not None and run[1] == start:
            run[1] = end  # the usual case: commits in order
            return future
        run = [start, end]
        ranges = self._pending.get(session)
        if ranges is None:
            self._pending[session] = [run]
        else:
            ranges.append(run)
        books.recorded.append(run)
        books.commit_run = run
        books.owner = self
        self._wake_sender.set()
        return future

    def take_request(self) -> Any | None:
        """A ``FromClient`` with every pending range (merged per session), or None."""
        if not self._pending:
            return None
        pending, self._pending = self._pending, {}
        request = pb.StreamReadMessage.FromClient()
        offsets = request.commit_offset_request.commit_offsets
        for session, ranges in pending.items():
            books = session._bookkeeping
            books.commit_run = None  # sent: the next commit starts a new range
            if books.state is PartitionSessionState.CLOSED:
                continue
            # The server refuses a range below the committed offset or over one sent before
            # (the session ends): after a backward seek, or a message committed twice, send
            # only what is new. (Usually nothing else is recorded: every recorded range is
            # one of these.)
            new = merge_ranges(ranges)
            if len(books.recorded) != len(ranges) or new[0][0] < books.committed_offset:
                unsent = {id(run) for run in ranges}
                sent = [(0, books.committed_offset)]
                sent += [(run[0], run[1]) for run in books.recorded if id(run) not in unsent]
                new = subtract_ranges(new, merge_ranges(sent))
                if not new:
                    continue
            item = offsets.add(partition_session_id=session.id)
            for start, end in new:
                item.offsets.add(start=start, end=end)
        return request if len(offsets) else None

    def on_ack(self, session: PartitionSession, committed_offset: int) -> None:
        """The server reports ``committed_offset`` for ``session``."""
        books = session._bookkeeping
        if committed_offset > books.committed_offset:
            books.committed_offset = committed_offset
            books.recorded = [r for r in books.recorded if r[1] > committed_offset]
            run = books.commit_run
            if run is not None and run[1] <= committed_offset:
                books.commit_run = None  # no longer recorded: the next commit starts anew
            if self.on_committed is not None:
                self.on_committed(session)
        waiters = books.ack_waiters
        if not waiters:
            return
        committed = books.committed_offset
        still: list[tuple[int, asyncio.Future[None]]] = []
        for end, future in waiters:
            if end <= committed:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((end, future))
        books.ack_waiters = still

    def fail_session(self, session: PartitionSession, error: BaseException) -> None:
        """``session`` ended: drop its unsent ranges and fail its waiters."""
        books = session._bookkeeping
        self._pending.pop(session, None)
        books.commit_run = None
        waiters, books.ack_waiters = books.ack_waiters, []
        for _, future in waiters:
            if not future.done():
                future.set_exception(error)
                future.exception()  # a caller that used commit() never looks: keep asyncio quiet

    @staticmethod
    def scan(session: PartitionSession) -> tuple[int, tuple[int, int] | None]:
        """How far the committed offset can advance with the ranges requested so far, and the
        first uncommitted offsets ``[start, end)`` that hold back ranges requested past them
        (None when every requested range can be acknowledged as it is).

        Commits are contiguous: a range past a gap of uncommitted offsets is acknowledged only
        once the gap is committed too.
        """
        books = session._bookkeeping
        reach = books.committed_offset
        for start, end in merge_ranges(books.recorded):
            if start > reach:
                return reach, (reach, start)
            reach = max(reach, end)
        return reach, None
