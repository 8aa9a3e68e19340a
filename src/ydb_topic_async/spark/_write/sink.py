"""The exactly-once streaming sink: a micro-batch task, and the first attempt of one.

The sink is exactly-once for replays that reproduce the same rows, and proves it. A task writes
as ``<prefix>-<query id>-<Spark partition>`` (``-<partition>`` added for a row whose partition
is chosen) with seq_no ``(batch id + 1) << 32 | row position``, and every message carries in its
metadata (key ``DIGEST_KEY``) a chained digest of the task's rows up to and including it, and
the id of the attempt that wrote it (``producers``).

The first attempt of a micro-batch (the ledger, ``_ledger``, has no record of it) writes as it
goes. A task that Spark runs again within the same run (same layout) finds its producer's last
stored seq_no in the writer's handshake, reads that message back and compares digests: equal,
the stored rows are these and are skipped; different, the plan is not deterministic.

A micro-batch that an earlier run started (the ledger has its record) is a replay whose layout
may differ: its tasks are ``replay``'s. No row of a batch is ever dropped.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ... import Driver, Message
from ...observability import sdk_logger
from .._bridge import runtime
from .._options import SourceOptions
from .._planning import describe
from .producers import DIGEST_SIZE, POSITION_MASK, SinkBase, SinkProducer, mismatch_error
from .replay import ReplayTask
from .rows import DIGEST_KEY, Chunk, Outgoing, Row
from .tasks import Task, YdbTopicCommitMessage, drive, read_between

if TYPE_CHECKING:
    from .._ledger import SinkPlan

logger = sdk_logger("spark")

_LOOKBACK = 1024
"""Offsets a task first reads back from a partition's end to find an earlier attempt's last message."""


def write_sink_task(
    options: SourceOptions,
    producer_prefix: str,
    partition: int,
    batch_id: int,
    chunks: Iterator[Chunk],
    plan: SinkPlan | None = None,
    query_id: str | None = None,
) -> YdbTopicCommitMessage:
    """Write one micro-batch task's rows exactly once (see the module docstring).

    ``producer_prefix`` is ``<prefix>-<query id>-``; this task's producers add its Spark
    ``partition``. ``plan`` is what the driver found in the ledger for this batch."""
    rt = runtime()
    replay = None
    if plan is not None and plan.unavailable is None:
        if plan.batch != batch_id or (plan.query_id is not None and query_id is not None and plan.query_id != query_id):
            raise RuntimeError(
                f"ydb_topic: the sink's writer was planned for micro-batch {plan.batch} of query {plan.query_id} "
                f"but runs in micro-batch {batch_id} of query {query_id}: the sink cannot tell whether this batch "
                "ran before, so it writes nothing"
            )
        replay = plan.replay
    attempt = bytes.fromhex(plan.attempt) if plan is not None else uuid.uuid4().bytes[:8]
    task: Task
    if replay is None:
        task = _SinkTask(rt, options, producer_prefix, partition, batch_id, attempt)
    else:
        task = ReplayTask(rt, options, producer_prefix, partition, batch_id, attempt, replay)
    return drive(rt, task, chunks)


class _SinkTask(SinkBase):
    """The first attempt of a micro-batch (or one whose record cannot be kept): rows are written
    as they come; a task Spark runs again checks its own producers' stored rows."""

    async def write(self, chunk: Chunk) -> None:
        outgoing: dict[tuple[str, int | None], Outgoing] = {}
        for row in await self.placement.rows(chunk):
            producer = await self._producer(row)
            message = self._message(producer, row)
            if producer.lookup is not None:
                await self._check(producer, message, outgoing)
            else:
                outgoing.setdefault((row.path, row.target), []).append(message)
        await self._send(outgoing)

    async def _producer(self, row: Row) -> SinkProducer:
        producer, last = await self._open(row)
        if last >= self.lowest:
            producer.stored_until = last
            if last > self.highest:
                # A later micro-batch is stored already: the checkpoint is behind the topic (it was
                # restored or edited). Rows of this batch cannot be matched to stored ones.
                await self._mismatch(producer, f"a later micro-batch was stored already (seq_no {last})")
            else:
                driver = await self.rt.driver(self.options.connection)
                producer.lookup = asyncio.get_running_loop().create_task(
                    _stored_digest(driver, self.options, producer, last),
                    name=f"ydb-topic-async sink lookup {producer.producer_id}",
                )
        return producer

    async def _check(
        self, producer: SinkProducer, message: Message, outgoing: dict[tuple[str, int | None], Outgoing]
    ) -> None:
        """A row of a re-run task, while the earlier attempt's rows are being matched."""
        assert message.seq_no is not None
        if message.seq_no < producer.stored_until:
            producer.held.append(message)
            return
        if message.seq_no == producer.stored_until:
            producer.held.append(message)
            assert producer.lookup is not None
            stored = await producer.lookup
            producer.lookup = None
            if stored is not None and stored[:DIGEST_SIZE] == producer.digest:
                producer.already_stored += len(producer.held)
                producer.held = []
                return
            await self._mismatch(producer, "the rows differ" if stored else "the stored rows cannot be read back")
            return
        # This attempt has no row at the stored position: its rows differ from the stored ones.
        await self._mismatch(producer, "the rows differ")
        outgoing.setdefault((self.options.full_path(producer.topic), producer.target), []).append(message)

    async def _mismatch(self, producer: SinkProducer, why: str) -> None:
        if producer.lookup is not None:
            producer.lookup.cancel()
            await asyncio.gather(producer.lookup, return_exceptions=True)
            producer.lookup = None
        position = producer.stored_until & POSITION_MASK
        where = (
            f"micro-batch {self.batch_id} is being written again, and {why} from what an earlier attempt stored "
            f"as producer {producer.producer_id!r} (rows up to position {position} of this Spark partition)"
        )
        if not self.options.rewrite_on_replay_mismatch:
            raise mismatch_error(where)
        rewrite = await self._rewrite(producer)
        logger.warning(
            "ydb_topic: %s; onReplayMismatch is atLeastOnce: writing this attempt's rows again as producer %r "
            "(rows of the earlier attempt stay, so some may be stored twice)",
            where, rewrite.writer.producer_id,
        )
        held, producer.held = producer.held, []
        producer.rewritten += len(held)
        producer.stored_until = 0
        await rewrite.send(held)

    async def _send(self, outgoing: dict[tuple[str, int | None], Outgoing]) -> None:
        for key, messages in outgoing.items():
            producer = self.producers[key]
            if producer.rewrite is not None:
                producer.rewritten += len(messages)
            await (producer.rewrite or producer.acks).send(messages)

    async def finish(self) -> YdbTopicCommitMessage:
        for producer in self.producers.values():
            if producer.lookup is not None or producer.held:
                # The earlier attempt stored more rows than this one has: they cannot all match.
                await self._mismatch(producer, "this attempt has fewer rows")
        return await super().finish()


async def _stored_digest(driver: Driver, options: SourceOptions, producer: SinkProducer, seq_no: int) -> bytes | None:
    """The digest stamp on the message ``producer`` stored with ``seq_no``, or None.

    That message is the producer's latest, so it lies after every other message of the producer:
    read back from the partition's end in growing windows until a window holds any of them.
    """
    partition = producer.target
    if partition is None:
        partition = (await producer.acks.writer.wait_init()).partition_id
    state = await describe(driver, producer.topic)
    first, end = state.bounds.get(partition, (0, 0))
    high, window = end, _LOOKBACK
    while high > first:
        low = max(first, high - window)
        seen = False
        async for messages in read_between(driver, options, producer.topic, partition, low, high):
            for message in messages:
                if message.producer_id == producer.producer_id:
                    seen = True
                    if message.seq_no == seq_no:
                        return message.metadata_items.get(DIGEST_KEY)
        if seen:
            return None  # the producer's messages are here but not that seq_no: it expired or never was
        high, window = low, window * 4
    return None
