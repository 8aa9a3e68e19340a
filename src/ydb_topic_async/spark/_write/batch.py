"""Batch writes, at-least-once: every task attempt writes under a producer id of its own (job id,
Spark partition, attempt number), so no write is ever deduplicated against an earlier job, and a
retried task writes its rows again."""

from __future__ import annotations

from collections.abc import Iterator

from ... import Message
from .._bridge import Runtime, runtime
from .._options import SourceOptions
from .rows import Chunk, Outgoing, Placement
from .tasks import Acks, YdbTopicCommitMessage, close_all, compresses, drive, open_writer


def write_batch_task(options: SourceOptions, producer_id: str, chunks: Iterator[Chunk]) -> YdbTopicCommitMessage:
    """Write every row under ``producer_id`` (one per job and task attempt) and count what was stored."""
    rt = runtime()
    return drive(rt, _BatchTask(rt, options, producer_id), chunks)


class _BatchTask:
    def __init__(self, rt: Runtime, options: SourceOptions, producer_id: str) -> None:
        self.rt = rt
        self.options = options
        self.producer_id = producer_id
        self.placement = Placement(rt, options)
        self.writers: dict[tuple[str, int | None], Acks] = {}

    async def _acks_for(self, topic: str, target: int | None) -> Acks:
        key = (self.options.full_path(topic), target)
        entry = self.writers.get(key)
        if entry is None:
            driver = await self.rt.driver(self.options.connection)
            producer_id = self.producer_id if target is None else f"{self.producer_id}-{target}"
            writer = open_writer(driver, self.options, topic, producer_id, target, sink=False)
            entry = self.writers[key] = Acks(writer, compresses(self.options))
        return entry

    async def write(self, chunk: Chunk) -> None:
        if chunk.plain:  # the common case: payloads only, in one call
            await (await self._acks_for(self.options.topic, None)).send(list(chunk.data))
            return
        groups: dict[tuple[str, int | None], tuple[str, Outgoing]] = {}
        for row in await self.placement.rows(chunk):
            message = row.data if row.metadata is None else Message(row.data, metadata=row.metadata)
            groups.setdefault((row.path, row.target), (row.topic, []))[1].append(message)
        for (_, target), (topic, messages) in groups.items():
            await (await self._acks_for(topic, target)).send(messages)

    async def finish(self) -> YdbTopicCommitMessage:
        for acks in self.writers.values():
            await acks.wait()
        return YdbTopicCommitMessage(
            tuple(acks.writer.producer_id or "" for acks in self.writers.values()),
            sum(acks.stored for acks in self.writers.values()),
        )

    async def close(self) -> None:
        await close_all([acks.writer for acks in self.writers.values()])
