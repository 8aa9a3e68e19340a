"""What every write task is made of: its writers and their acknowledgements, what it reports to
Spark, feeding it Spark's rows, and reading a partition's range back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql.datasource import WriterCommitMessage

from ... import Driver, OperationTimeoutError, Skipped, TopicMessage, TopicSelector, TopicWriter, WriteResult, Written
from ...observability import sdk_logger
from .._bridge import Runtime, retry_policy
from .._options import SourceOptions
from .._planning import describe
from .rows import Chunk, Outgoing

logger = sdk_logger("spark")


@dataclass(frozen=True)
class YdbTopicCommitMessage(WriterCommitMessage):  # type: ignore[misc,unused-ignore]
    """What a write task reports once every message it sent was acknowledged.

    ``written``: messages this task attempt stored. ``already_stored``: rows an earlier attempt
    of the same micro-batch had stored, proven identical and not written again. ``rewritten``:
    rows written under a new producer id after a replay mismatch (``onReplayMismatch=atLeastOnce``;
    they may duplicate rows the earlier attempt stored).
    """

    producer_ids: tuple[str, ...]
    written: int
    already_stored: int = 0
    rewritten: int = 0


def open_writer(driver: Driver, options: SourceOptions, topic: str, producer_id: str, target: int | None,
            *, sink: bool) -> TopicWriter:
    settings = options.writer_settings(
        producer_id=producer_id, partition_id=target, auto_seqno=not sink, retry=retry_policy(options.connection)
    )
    return driver.topic.writer(topic, **settings.options())


class Acks:
    """Sends to one writer and counts what the server stored.

    With a compressing codec a message can fail on its own after the writer accepted it (its
    compressed form may not fit a request), so every message gets an acknowledgement future and
    each one is checked. Raw payloads are checked when the writer accepts them, and afterwards they
    can only fail with the whole writer, which ``flush`` raises: a successful flush means every
    accepted message is stored, and the cost of a future per message is saved. Acks arrive in
    order, so a chunk of futures is waited for through its last one (one callback per chunk).
    """

    def __init__(self, writer: TopicWriter, per_message: bool) -> None:
        self.writer = writer
        self.per_message = per_message
        self.chunks: list[list[asyncio.Future[WriteResult]]] = []
        self.accepted = 0
        self.stored = 0

    async def send(self, messages: Outgoing) -> None:
        if not messages:
            return
        if self.per_message:
            self.chunks.append(await self.writer.write_with_ack_future(messages))
            while self.chunks and all(f.done() for f in self.chunks[0]):
                self._tally(self.chunks.pop(0))
        elif all(type(m) is bytes for m in messages):
            # One payload per call takes the writer's hot path (a list goes through its general
            # path, which checks and wraps each message): about a quarter less CPU per row.
            write = self.writer.write
            for payload in messages:
                await write(payload)
            self.accepted += len(messages)
        else:
            await self.writer.write(messages)
            self.accepted += len(messages)

    async def wait(self) -> None:
        """Wait for every acknowledgement; raise the first failure."""
        await self.writer.flush()
        self.stored += self.accepted
        self.accepted = 0
        chunks, self.chunks = self.chunks, []
        for chunk in chunks:
            await asyncio.wait([chunk[-1]])
            for future in chunk:
                if not future.done():
                    await asyncio.wait([future])
            self._tally(chunk)

    def _tally(self, chunk: list[asyncio.Future[WriteResult]]) -> None:
        for future in chunk:
            result = future.result()  # a failed message fails the task
            # Skipped: the server already has this seq_no from this same producer id, i.e. from
            # this attempt's own resend after a reconnect (an earlier attempt's rows are never sent).
            if isinstance(result, (Written, Skipped)):
                self.stored += 1


def compresses(options: SourceOptions) -> bool:
    return options.codec not in (None, 1)  # 1: raw


async def close_all(writers: list[TopicWriter]) -> None:
    """Close every writer (each waits for its acknowledgements); the first failure is raised."""
    first: BaseException | None = None
    for writer in writers:
        try:
            await writer.close()
        except Exception as exc:
            first = first or exc
    if first is not None:
        raise first


class Task(Protocol):
    async def write(self, chunk: Chunk) -> None: ...
    async def finish(self) -> YdbTopicCommitMessage: ...
    async def close(self) -> None: ...


def drive(rt: Runtime, task: Task, chunks: Iterator[Chunk]) -> YdbTopicCommitMessage:
    """Feed Spark's rows to ``task`` on the runtime's loop, chunk by chunk; close it whatever happens
    (a failure while closing after an earlier one is logged: the earlier one is what the task reports)."""
    try:
        for chunk in chunks:
            rt.run(task.write(chunk))
        result = rt.run(task.finish())
    except BaseException:
        try:
            rt.run(task.close())
        except Exception:
            logger.debug("ydb_topic: closing the writers of a failed task failed too", exc_info=True)
        raise
    rt.run(task.close())
    return result


async def read_between(
    driver: Driver, options: SourceOptions, topic: str, partition: int, start: int, end: int
) -> AsyncIterator[list[TopicMessage]]:
    """Messages of ``[start, end)`` of one partition."""
    if start >= end:
        return
    selector = TopicSelector(topic, partitions=[partition], start_offsets={partition: start})
    async with driver.topic.reader(selector, consumer=None, retry=retry_policy(options.connection)) as reader:
        position = start
        while position < end:
            try:
                batch = await reader.receive_batch(timeout=options.poll_timeout)
            except OperationTimeoutError:
                # Nothing came: either the rest expired meanwhile (then the partition now starts
                # at or past ``end``) or the server is slow. A slow read must fail the task, not
                # pass as "nothing stored": the check would miss messages and let a replay
                # write them twice.
                first, _ = (await describe(driver, topic)).bounds.get(partition, (0, 0))
                if first >= end:
                    return
                raise OperationTimeoutError(
                    f"reading back offsets [{position}, {end}) of {topic!r} partition {partition} gave nothing"
                    f" within poll_timeout ({options.poll_timeout:g}s) while the partition still holds them;"
                    " the task fails so that Spark retries it rather than risk a duplicate"
                ) from None
            yield [m for m in batch if m.offset < end]
            position = batch.end_offset


