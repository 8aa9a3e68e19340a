"""Executor side of writes: a batch-write task and an exactly-once streaming-sink task.

Batch writes are at-least-once: every task attempt writes under a producer id of its own (job id,
Spark partition, attempt number), so no write is ever deduplicated against an earlier job, and a
retried task writes its rows again.

The streaming sink is exactly-once for replays that reproduce the same rows, and proves it.
A task writes as ``<prefix>-<query id>-<Spark partition>`` with seq_no ``(batch id + 1) << 32 |
row position``, and every message carries in its metadata (key ``DIGEST_KEY``) a chained digest of
the task's rows up to and including it. When Spark runs a micro-batch again, the writer's
handshake tells how far the earlier attempt got (the producer's last stored seq_no); the task then
reads that stored message back and compares its digest with the digest of its own rows up to the
same position. Equal: the earlier rows are exactly these, so they are skipped and the rest is
written. Different (a non-deterministic plan): the task fails with ``ReplayMismatchError``, or,
with ``onReplayMismatch=atLeastOnce``, writes its rows again under a new producer id. No row of
the batch is ever dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyspark.sql.datasource import WriterCommitMessage

from .. import (
    Driver,
    Message,
    OperationTimeoutError,
    Skipped,
    TopicMessage,
    TopicSelector,
    TopicWriter,
    WriteResult,
    Written,
)
from ..observability import sdk_logger
from ._bridge import Runtime, retry_policy, runtime
from ._errors import ReplayMismatchError
from ._options import SourceOptions
from ._planning import describe

logger = sdk_logger("spark")

DIGEST_KEY = "ydb-spark-digest"
"""Metadata key of the sink's chained row digest (16 bytes) on every message it writes."""
SEQ_BATCH_SHIFT = 32
"""Sink seq_no = (batch id + 1) << 32 | row position (from 1): increasing across batches."""
_POSITION_MASK = (1 << SEQ_BATCH_SHIFT) - 1
_LOOKBACK = 1024
"""Offsets a replay first reads back from a partition's end to find an earlier attempt's last message."""

Record = tuple[bytes, list[tuple[str, bytes]] | None, int | None]
"""A row to write: payload, metadata pairs, explicit partition."""
Outgoing = list[bytes | str | Message]
"""Messages for one ``write_with_ack_future`` call."""


@dataclass(frozen=True)
class Columns:
    """Where the writable columns are in the input rows."""

    data: int
    metadata: int | None
    partition: int | None


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


@dataclass(frozen=True)
class Chunk:
    """Rows to write, column by column: payloads, and metadata pairs and partitions when given."""

    data: list[bytes]
    metadata: list[list[tuple[str, bytes]] | None] | None = None
    partitions: list[int | None] | None = None

    @classmethod
    def of(cls, records: list[Record]) -> Chunk:
        return cls([r[0] for r in records], [r[1] for r in records], [r[2] for r in records])

    def rows(self) -> Iterator[Record]:
        n = len(self.data)
        return zip(self.data, self.metadata or [None] * n, self.partitions or [None] * n, strict=True)


def chunks_from_arrow(batches: Iterator[Any], cols: Columns) -> Iterator[Chunk]:
    """One chunk per Arrow batch of the input."""
    for batch in batches:
        data = _payloads(batch.column(cols.data).to_pylist())
        meta = None
        if cols.metadata is not None:
            meta = [_metadata(m) for m in batch.column(cols.metadata).to_pylist()]
        part = None
        if cols.partition is not None:
            part = [_partition(p) for p in batch.column(cols.partition).to_pylist()]
        yield Chunk(data, meta, part)


def chunks_from_rows(rows: Iterator[Any], cols: Columns, size: int = 4096) -> Iterator[Chunk]:
    """Rows (pyspark < 4.1 hands the streaming sink Rows, not Arrow) in chunks of ``size``."""
    records: list[Record] = []
    for row in rows:
        meta = _metadata(row[cols.metadata]) if cols.metadata is not None else None
        part = _partition(row[cols.partition]) if cols.partition is not None else None
        records.append((_payloads([row[cols.data]])[0], meta, part))
        if len(records) >= size:
            yield Chunk.of(records)
            records = []
    if records:
        yield Chunk.of(records)


def _payloads(values: list[Any]) -> list[bytes]:
    if all(type(v) is bytes for v in values):
        return values  # a binary column: nothing to convert
    if any(v is None for v in values):
        raise ValueError("ydb_topic: column 'data' is null in a row to write")
    return [v.encode() if isinstance(v, str) else bytes(v) for v in values]


def _metadata(meta: Any) -> list[tuple[str, bytes]] | None:
    if not meta:
        return None
    pairs = meta.items() if isinstance(meta, dict) else meta
    items = [(str(k), v.encode() if isinstance(v, str) else bytes(v or b"")) for k, v in pairs]
    if any(k == DIGEST_KEY for k, _ in items):
        raise ValueError(f"ydb_topic: metadata key {DIGEST_KEY!r} is reserved for the sink's row digest")
    return items


def _partition(partition: Any) -> int | None:
    if partition is not None and partition < 0:
        raise ValueError(f"ydb_topic: column 'partition' must not be negative, got {partition}")
    return partition  # type: ignore[no-any-return]


# --- acknowledgements -------------------------------------------------------------------------


class _Acks:
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


# --- batch writes -----------------------------------------------------------------------------


class _Task(Protocol):
    async def write(self, chunk: Chunk) -> None: ...
    async def finish(self) -> YdbTopicCommitMessage: ...
    async def close(self) -> None: ...


def _drive(rt: Runtime, task: _Task, chunks: Iterator[Chunk]) -> YdbTopicCommitMessage:
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


def write_batch_task(options: SourceOptions, producer_id: str, chunks: Iterator[Chunk]) -> YdbTopicCommitMessage:
    """Write every row under ``producer_id`` (one per job and task attempt) and count what was stored."""
    rt = runtime()
    return _drive(rt, _BatchTask(rt, options, producer_id), chunks)


class _BatchTask:
    def __init__(self, rt: Runtime, options: SourceOptions, producer_id: str) -> None:
        self.rt = rt
        self.options = options
        self.producer_id = producer_id
        self.writers: dict[int | None, _Acks] = {}

    async def _writer(self, target: int | None) -> _Acks:
        entry = self.writers.get(target)
        if entry is None:
            driver = await self.rt.driver(self.options.connection)
            producer_id = self.producer_id if target is None else f"{self.producer_id}-{target}"
            writer = driver.topic.writer(
                self.options.topic, producer_id=producer_id, partition_id=target, codec=self.options.codec,
                retry=retry_policy(self.options.connection),
            )
            entry = self.writers[target] = _Acks(writer, _compresses(self.options))
        return entry

    async def write(self, chunk: Chunk) -> None:
        groups: dict[int | None, Outgoing] = {}
        if chunk.partitions is None and (chunk.metadata is None or not any(chunk.metadata)):
            groups[None] = list(chunk.data)  # the common case: payloads only, in one call
        else:
            for data, metadata, target in chunk.rows():
                groups.setdefault(target, []).append(data if metadata is None else Message(data, metadata=metadata))
        for target, messages in groups.items():
            await (await self._writer(target)).send(messages)

    async def finish(self) -> YdbTopicCommitMessage:
        for acks in self.writers.values():
            await acks.wait()
        return YdbTopicCommitMessage(
            tuple(acks.writer.producer_id or "" for acks in self.writers.values()),
            sum(acks.stored for acks in self.writers.values()),
        )

    async def close(self) -> None:
        await _close_all([acks.writer for acks in self.writers.values()])


def _compresses(options: SourceOptions) -> bool:
    return options.codec not in (None, 1)  # 1: raw


async def _close_all(writers: list[TopicWriter]) -> None:
    """Close every writer (each waits for its acknowledgements); the first failure is raised."""
    first: BaseException | None = None
    for writer in writers:
        try:
            await writer.close()
        except Exception as exc:
            first = first or exc
    if first is not None:
        raise first


# --- the exactly-once streaming sink ---------------------------------------------------------


def write_sink_task(
    options: SourceOptions, producer_base: str, batch_id: int, chunks: Iterator[Chunk]
) -> YdbTopicCommitMessage:
    """Write one micro-batch task's rows exactly once (see the module docstring)."""
    rt = runtime()
    return _drive(rt, _SinkTask(rt, options, producer_base, batch_id), chunks)


def _digest(previous: bytes, seq_no: int, data: bytes, metadata: list[tuple[str, bytes]] | None) -> bytes:
    h = hashlib.blake2b(previous, digest_size=16)
    h.update(seq_no.to_bytes(8, "big"))
    h.update(len(data).to_bytes(8, "big"))
    h.update(data)
    for key, value in metadata or ():
        encoded = key.encode()
        h.update(len(encoded).to_bytes(4, "big"))
        h.update(encoded)
        h.update(len(value).to_bytes(4, "big"))
        h.update(value)
    return h.digest()


@dataclass
class _SinkProducer:
    """One target partition's writer in a sink task, its digest chain and its replay check."""

    producer_id: str
    target: int | None
    acks: _Acks
    """The writer under ``producer_id``."""
    digest: bytes = b""
    stored_until: int = 0
    """seq_no up to which an earlier attempt of this micro-batch stored rows (0: none did)."""
    lookup: asyncio.Task[bytes | None] | None = None
    """Reads back the digest the earlier attempt stored at ``stored_until``."""
    held: Outgoing = field(default_factory=list)
    """This attempt's rows at or below ``stored_until``, kept until the check decides."""
    rewrite: _Acks | None = None
    """The writer under a new producer id after a mismatch (``onReplayMismatch=atLeastOnce``)."""
    already_stored: int = 0
    rewritten: int = 0


class _SinkTask:
    def __init__(self, rt: Runtime, options: SourceOptions, producer_base: str, batch_id: int) -> None:
        self.rt = rt
        self.options = options
        self.producer_base = producer_base
        self.batch_id = batch_id
        self.lowest = (batch_id + 1) << SEQ_BATCH_SHIFT
        self.highest = self.lowest | _POSITION_MASK
        self.position = 0
        self.producers: dict[int | None, _SinkProducer] = {}

    async def _producer(self, target: int | None) -> _SinkProducer:
        producer = self.producers.get(target)
        if producer is not None:
            return producer
        driver = await self.rt.driver(self.options.connection)
        producer_id = self.producer_base if target is None else f"{self.producer_base}-{target}"
        writer = driver.topic.writer(
            self.options.topic, producer_id=producer_id, partition_id=target, auto_seqno=False,
            codec=self.options.codec, retry=retry_policy(self.options.connection),
        )
        producer = self.producers[target] = _SinkProducer(producer_id, target, _Acks(writer, _compresses(self.options)))
        info = await writer.wait_init()
        last = info.last_seq_no
        if last >= self.lowest:
            producer.stored_until = last
            if last > self.highest:
                # A later micro-batch is stored already: the checkpoint is behind the topic (it was
                # restored or edited). Rows of this batch cannot be matched to stored ones.
                await self._mismatch(producer, f"a later micro-batch was stored already (seq_no {last})")
            else:
                producer.lookup = asyncio.get_running_loop().create_task(
                    _stored_digest(driver, self.options, info.partition_id, producer_id, last),
                    name=f"ydb-topic-async sink lookup {producer_id}",
                )
        return producer

    async def write(self, chunk: Chunk) -> None:
        outgoing: dict[int | None, Outgoing] = {}
        for data, metadata, target in chunk.rows():
            self.position += 1
            if self.position > _POSITION_MASK:
                raise ValueError(f"ydb_topic: a sink task takes at most {_POSITION_MASK} rows per micro-batch")
            seq_no = self.lowest | self.position
            producer = await self._producer(target)
            producer.digest = _digest(producer.digest, seq_no, data, metadata)
            message = Message(data, seq_no=seq_no, metadata=[*(metadata or ()), (DIGEST_KEY, producer.digest)])
            if producer.lookup is not None:
                await self._check(producer, message, outgoing)
            else:
                outgoing.setdefault(target, []).append(message)
        await self._send(outgoing)

    async def _check(
        self, producer: _SinkProducer, message: Message, outgoing: dict[int | None, Outgoing]
    ) -> None:
        """A row of a replayed batch, while the earlier attempt's rows are being matched."""
        assert message.seq_no is not None
        if message.seq_no < producer.stored_until:
            producer.held.append(message)
            return
        if message.seq_no == producer.stored_until:
            producer.held.append(message)
            assert producer.lookup is not None
            stored = await producer.lookup
            producer.lookup = None
            if stored == producer.digest:
                producer.already_stored += len(producer.held)
                producer.held = []
                return
            await self._mismatch(producer, "the rows differ" if stored else "the stored rows cannot be read back")
            return
        # This attempt has no row at the stored position: its rows differ from the stored ones.
        await self._mismatch(producer, "the rows differ")
        outgoing.setdefault(producer.target, []).append(message)

    async def _mismatch(self, producer: _SinkProducer, why: str) -> None:
        if producer.lookup is not None:
            producer.lookup.cancel()
            await asyncio.gather(producer.lookup, return_exceptions=True)
            producer.lookup = None
        position = producer.stored_until & _POSITION_MASK
        where = (
            f"micro-batch {self.batch_id} is being written again, and {why} from what an earlier attempt stored "
            f"as producer {producer.producer_id!r} (rows up to position {position} of this Spark partition)"
        )
        if not self.options.rewrite_on_replay_mismatch:
            raise ReplayMismatchError(
                f"ydb_topic: {where}. The query is not deterministic (for example rand(), a shuffle whose row "
                "order varies, or a source that does not replay the same data), so the exactly-once sink cannot "
                "deduplicate the replay. Nothing more was written for this producer and the stored rows stay. "
                "Set the option onReplayMismatch to atLeastOnce to write this attempt's rows again under a new "
                "producer id instead (rows may then be stored twice)."
            )
        driver = await self.rt.driver(self.options.connection)
        rewrite_id = f"{producer.producer_id}-rewrite-{uuid.uuid4().hex[:12]}"
        rewrite = driver.topic.writer(
            self.options.topic, producer_id=rewrite_id, partition_id=producer.target, auto_seqno=False,
            codec=self.options.codec, retry=retry_policy(self.options.connection),
        )
        producer.rewrite = _Acks(rewrite, _compresses(self.options))
        logger.warning(
            "ydb_topic: %s; onReplayMismatch is atLeastOnce: writing this attempt's rows again as producer %r "
            "(rows of the earlier attempt stay, so some may be stored twice)",
            where, rewrite_id,
        )
        held, producer.held = producer.held, []
        producer.rewritten += len(held)
        producer.stored_until = 0
        await producer.rewrite.send(held)

    async def _send(self, outgoing: dict[int | None, Outgoing]) -> None:
        for target, messages in outgoing.items():
            producer = self.producers[target]
            if producer.rewrite is not None:
                producer.rewritten += len(messages)
            await (producer.rewrite or producer.acks).send(messages)

    async def finish(self) -> YdbTopicCommitMessage:
        for producer in self.producers.values():
            if producer.lookup is not None or producer.held:
                # The earlier attempt stored more rows than this one has: they cannot all match.
                await self._mismatch(producer, "this attempt has fewer rows")
        for producer in self.producers.values():
            for acks in (producer.acks, producer.rewrite):
                if acks is not None:
                    await acks.wait()
        rewritten = sum(p.rewritten for p in self.producers.values())
        stored = sum(p.acks.stored + (p.rewrite.stored if p.rewrite else 0) for p in self.producers.values())
        return YdbTopicCommitMessage(
            tuple(p.producer_id for p in self.producers.values()),
            written=stored - rewritten,
            already_stored=sum(p.already_stored for p in self.producers.values()),
            rewritten=rewritten,
        )

    async def close(self) -> None:
        writers: list[TopicWriter] = []
        for producer in self.producers.values():
            if producer.lookup is not None:
                producer.lookup.cancel()
                await asyncio.gather(producer.lookup, return_exceptions=True)
            writers.append(producer.acks.writer)
            if producer.rewrite is not None:
                writers.append(producer.rewrite.writer)
        await _close_all(writers)


async def _stored_digest(
    driver: Driver, options: SourceOptions, partition: int, producer_id: str, seq_no: int
) -> bytes | None:
    """The digest on the message ``producer_id`` stored with ``seq_no`` in ``partition``, or None.

    That message is the producer's latest, so it lies after every other message of the producer:
    read back from the partition's end in growing windows until a window holds any of them.
    """
    state = await describe(driver, options.topic)
    first, end = state.bounds.get(partition, (0, 0))
    high, window = end, _LOOKBACK
    while high > first:
        low = max(first, high - window)
        seen = False
        async for messages in _read_between(driver, options, partition, low, high):
            for message in messages:
                if message.producer_id == producer_id:
                    seen = True
                    if message.seq_no == seq_no:
                        return message.metadata_items.get(DIGEST_KEY)
        if seen:
            return None  # the producer's messages are here but not that seq_no: it expired or never was
        high, window = low, window * 4
    return None


async def _read_between(
    driver: Driver, options: SourceOptions, partition: int, start: int, end: int
) -> AsyncIterator[list[TopicMessage]]:
    selector = TopicSelector(options.topic, partitions=[partition], start_offsets={partition: start})
    async with driver.topic.reader(selector, consumer=None, retry=retry_policy(options.connection)) as reader:
        position = start
        while position < end:
            try:
                batch = await reader.receive_batch(timeout=options.poll_timeout)
            except OperationTimeoutError:
                return  # the range expired meanwhile
            yield [m for m in batch if m.offset < end]
            position = batch.end_offset
