"""Replaying a micro-batch an earlier run started (the ledger has its record), whose layout may
differ: each task first reads back everything any earlier attempt of the batch stored, in every
output topic, from the end offsets the record holds. It then holds its rows and checks them all
before writing one: the rows its own producers stored must be its first rows, digest for digest,
and none of the rest may be a row another producer stored. Only then does it write the rest.
Anything else fails the task (``ReplayMismatchError``, naming what differs) with nothing written,
or, with ``onReplayMismatch=atLeastOnce``, writes all its rows again under a new producer id."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import Message, TopicMessage
from ...observability import sdk_logger
from .._bridge import Runtime
from .._options import ByTimestamp, SourceOptions
from .._planning import describe, offsets_by_time
from .producers import DIGEST_SIZE, POSITION_MASK, SinkBase, SinkProducer, content_digest, mismatch_error
from .rows import DIGEST_KEY, Chunk, Outgoing, Row
from .tasks import Acks, YdbTopicCommitMessage, read_between

if TYPE_CHECKING:
    from .._ledger import ReplayBounds

logger = sdk_logger("spark")

_CLOCK_MARGIN = dt.timedelta(minutes=10)
"""For a topic the ledger has no end offsets of (each row naming its topic): how long before the
batch's first planning a replay starts reading it back, for the driver's clock against the server's."""


@dataclass(frozen=True)
class _Planned:
    """A row of a replayed task, numbered and digested as its first attempt numbered it."""

    producer: SinkProducer
    message: Message
    digest: bytes
    content: bytes

    @property
    def seq_no(self) -> int:
        assert self.message.seq_no is not None
        return self.message.seq_no


@dataclass(frozen=True)
class _Stored:
    """A message an earlier attempt of the micro-batch stored."""

    producer_id: str
    seq_no: int
    digest: bytes
    content: bytes
    current: bool
    """Written by this attempt (an earlier try of one of its tasks, or another of its tasks)."""


class ReplayTask(SinkBase):
    """A task of a micro-batch an earlier run started: it holds its rows, reads back everything
    any earlier attempt of the batch stored, checks every row, and writes only then."""

    def __init__(
        self, rt: Runtime, options: SourceOptions, producer_prefix: str, partition: int, batch_id: int,
        attempt: bytes, bounds: ReplayBounds,
    ) -> None:
        super().__init__(rt, options, producer_prefix, partition, batch_id, attempt)
        self.bounds = bounds
        self.rows: list[Row] = []

    async def write(self, chunk: Chunk) -> None:
        self.rows.extend(await self.placement.rows(chunk))

    async def finish(self) -> YdbTopicCommitMessage:
        if not self.rows:
            return await super().finish()  # nothing to write, so nothing to write twice
        # The writers first: their handshakes make this attempt the owner of its producer ids (an
        # earlier attempt's writer still alive is cut off) and tell each one's last stored seq_no.
        last_stored: dict[str, int] = {}
        for row in self.rows:
            producer, last = await self._open(row)
            if last >= 0:
                last_stored[producer.producer_id] = last
        mine = {producer.producer_id for producer in self.producers.values()}
        # What this attempt's other tasks are writing meanwhile is theirs, not an earlier attempt's;
        # what this task's own producers stored in this attempt (Spark ran the task again) counts.
        stored = [m for m in await self._read_back({row.path: row.topic for row in self.rows})
                  if not m.current or m.producer_id in mine]
        for producer_id, last in last_stored.items():
            if last > self.highest:
                return await self._conflict(f"a later micro-batch was stored already by producer {producer_id!r} "
                                            f"(seq_no {last}): the checkpoint is behind the topic")
            if last >= self.lowest and not any(m.producer_id == producer_id and m.seq_no == last for m in stored):
                return await self._conflict(f"producer {producer_id!r} stored rows of micro-batch {self.batch_id} "
                                            "that cannot be read back")
        planned: list[_Planned] = []
        for row in self.rows:
            producer, _ = await self._open(row)
            message = self._message(producer, row)
            planned.append(_Planned(producer, message, producer.digest, _row_content(row)))
        problem, skip = self._check(planned, stored)
        if problem is not None:
            return await self._conflict(problem)
        outgoing: dict[str, tuple[SinkProducer, Outgoing]] = {}
        for entry in planned:
            if entry.seq_no in skip:
                entry.producer.already_stored += 1
            else:
                outgoing.setdefault(entry.producer.producer_id, (entry.producer, []))[1].append(entry.message)
        for producer, messages in outgoing.values():
            await producer.acks.send(messages)
        return await super().finish()

    def _check(self, planned: list[_Planned], stored: list[_Stored]) -> tuple[str | None, set[int]]:
        """What is wrong with writing ``planned`` after ``stored`` (None: nothing), and the seq_nos
        of the planned rows already stored (to skip)."""
        mine = {entry.producer.producer_id for entry in planned}
        own: dict[str, list[_Stored]] = {}
        others: dict[bytes, str] = {}
        for earlier in stored:
            if earlier.producer_id in mine:
                own.setdefault(earlier.producer_id, []).append(earlier)
            else:
                others.setdefault(earlier.content, earlier.producer_id)
        # The rows each of this task's producers stored must be its first rows, digest for digest.
        by_producer: dict[str, list[_Planned]] = {}
        for entry in planned:
            by_producer.setdefault(entry.producer.producer_id, []).append(entry)
        skip: set[int] = set()
        for producer_id, earlier_rows in own.items():
            earlier_rows.sort(key=lambda e: e.seq_no)
            ours = by_producer.get(producer_id, [])
            if len(earlier_rows) > len(ours):
                return (
                    f"producer {producer_id!r} stored {len(earlier_rows)} rows of micro-batch {self.batch_id} in an "
                    f"earlier attempt and this attempt has {len(ours)} for it"
                ), skip
            for earlier, entry in zip(earlier_rows, ours, strict=False):
                if earlier.seq_no != entry.seq_no or earlier.digest != entry.digest:
                    return (
                        f"the rows of this Spark partition differ, from position {entry.seq_no & POSITION_MASK} on, "
                        f"from what producer {producer_id!r} stored in an earlier attempt of micro-batch "
                        f"{self.batch_id}"
                    ), skip
                skip.add(entry.seq_no)
        # None of the rest may be a row another producer stored: rows moved between Spark partitions.
        for entry in planned:
            holder = None if entry.seq_no in skip else others.get(entry.content)
            if holder is not None:
                return (
                    f"row {entry.seq_no & POSITION_MASK} of this Spark partition was stored in an earlier attempt "
                    f"of micro-batch {self.batch_id} by producer {holder!r}, another Spark partition's"
                ), skip
        return None, skip

    async def _conflict(self, where: str) -> YdbTopicCommitMessage:
        if not self.options.rewrite_on_replay_mismatch:
            raise mismatch_error(where)
        # At-least-once: every row again, under new producer ids (per producer, as the rows go).
        logger.warning("ydb_topic: %s; onReplayMismatch is atLeastOnce: writing this task's %d rows again under "
                       "new producer ids (rows stored before may now be stored twice)", where, len(self.rows))
        self.position = 0
        for producer in self.producers.values():
            producer.digest = b""
            producer.already_stored = 0
        outgoing: dict[str, tuple[Acks, Outgoing]] = {}
        for row in self.rows:
            producer, _ = await self._open(row)
            rewrite = producer.rewrite or await self._rewrite(producer)
            producer.rewritten += 1
            outgoing.setdefault(producer.producer_id, (rewrite, []))[1].append(self._message(producer, row))
        for rewrite, messages in outgoing.values():
            await rewrite.send(messages)
        return await super().finish()

    async def _read_back(self, row_topics: dict[str, str]) -> list[_Stored]:
        """Every message an earlier attempt of this micro-batch stored in the topics it may have
        written: those the ledger has end offsets of, and those this task's rows go to."""
        driver = await self.rt.driver(self.options.connection)
        topics = {path: path for path in self.bounds.ends} | row_topics
        found: list[_Stored] = []
        since = self.bounds.planned_at_ms - int(_CLOCK_MARGIN.total_seconds() * 1000)
        for topic in topics.values():
            state = await describe(driver, topic)
            ends = self.bounds.ends.get(state.path)
            if ends is not None:
                starts = {pid: max(first, ends.get(pid, first)) for pid, (first, _) in state.bounds.items()}
            else:
                starts = await offsets_by_time(
                    driver, state, ByTimestamp(default=since), name="the sink's read-back", missing_is_end=True,
                    timeout=self.options.poll_timeout,
                )
            for pid, (_, end) in sorted(state.bounds.items()):
                async for messages in read_between(driver, self.options, topic, pid, starts[pid], end):
                    found.extend(self._earlier(state.path, messages))
        return found

    def _earlier(self, path: str, messages: list[TopicMessage]) -> Iterator[_Stored]:
        for message in messages:
            if not message.producer_id.startswith(self.producer_prefix):
                continue
            if not self.lowest <= message.seq_no <= self.highest:
                continue
            metadata = message.metadata_items
            stamp = metadata.get(DIGEST_KEY, b"")
            content = content_digest(path, message.data, list(metadata.items()))
            yield _Stored(
                message.producer_id, message.seq_no, stamp[:DIGEST_SIZE], content, stamp[DIGEST_SIZE:] == self.attempt
            )


def _row_content(row: Row) -> bytes:
    return content_digest(row.path, row.data, list(dict(row.metadata or ()).items()))

