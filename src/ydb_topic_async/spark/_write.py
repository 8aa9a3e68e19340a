"""Executor side of writes: a batch-write task and an exactly-once streaming-sink task.

Rows are Kafka-shaped: a payload (``value`` or ``data``), and optionally a ``key`` (placed by the
keyed writer's partitioner, ``partition_for_key``, and kept in the message's metadata as
``__key``, as YDB's Kafka API stores record keys), metadata (``headers`` as the Kafka sink takes
them, or a ``metadata`` map), a ``topic`` per row and a ``partition``.

Batch writes are at-least-once: every task attempt writes under a producer id of its own (job id,
Spark partition, attempt number), so no write is ever deduplicated against an earlier job, and a
retried task writes its rows again.

The streaming sink is exactly-once for replays that reproduce the same rows, and proves it. A
task writes as ``<prefix>-<query id>-<Spark partition>`` (``-<partition>`` added for a row whose
partition is chosen) with seq_no ``(batch id + 1) << 32 | row position``, and every message
carries in its metadata (key ``DIGEST_KEY``) a chained digest of the task's rows up to and
including it, and the id of the attempt that wrote it.

- The first attempt of a micro-batch (the ledger, ``_ledger``, has no record of it) writes as it
  goes. A task that Spark runs again within the same run (same layout) finds its producer's last
  stored seq_no in the writer's handshake, reads that message back and compares digests: equal,
  the stored rows are these and are skipped; different, the plan is not deterministic.
- A micro-batch that an earlier run started (the ledger has its record) is a replay whose layout
  may differ: each task first reads back everything any earlier attempt of the batch stored, in
  every output topic, from the end offsets the record holds. It then holds its rows and checks
  them all before writing one: the rows its own producers stored must be its first rows, digest
  for digest, and none of the rest may be a row another producer stored. Only then does it write
  the rest. Anything else fails the task (``ReplayMismatchError``, naming what differs) with
  nothing written, or, with ``onReplayMismatch=atLeastOnce``, writes all its rows again under a
  new producer id. No row of a batch is ever dropped.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pyspark.sql.datasource import WriterCommitMessage

from .. import (
    PARTITION_KEY_METADATA,
    Driver,
    Message,
    OperationTimeoutError,
    Skipped,
    TopicDescription,
    TopicMessage,
    TopicSelector,
    TopicWriter,
    WriteResult,
    Written,
    partition_for_key,
    partition_key,
)
from ..observability import sdk_logger
from ._bridge import Runtime, retry_policy, runtime
from ._errors import ReplayMismatchError
from ._options import ByTimestamp, SourceOptions
from ._planning import describe, offsets_by_time

if TYPE_CHECKING:
    from ._ledger import ReplayBounds, SinkPlan

logger = sdk_logger("spark")

DIGEST_KEY = "ydb-spark-digest"
"""Metadata key of the sink's chained row digest (16 bytes) and attempt id (8 bytes) on every message."""
KEY_METADATA = "__key"
"""Metadata key a row's ``key`` is stored under (as YDB's Kafka API stores a record's key)."""
SEQ_BATCH_SHIFT = 32
"""Sink seq_no = (batch id + 1) << 32 | row position (from 1): increasing across batches."""
_POSITION_MASK = (1 << SEQ_BATCH_SHIFT) - 1
_DIGEST_SIZE = 16
_LOOKBACK = 1024
"""Offsets a task first reads back from a partition's end to find an earlier attempt's last message."""
_CLOCK_MARGIN = dt.timedelta(minutes=10)
"""For a topic the ledger has no end offsets of (each row naming its topic): how long before the
batch's first planning a replay starts reading it back, for the driver's clock against the server's."""

Record = tuple[bytes, list[tuple[str, bytes]] | None, int | None]
"""A row to write: payload, metadata pairs, explicit partition."""
Outgoing = list[bytes | str | Message]
"""Messages for one ``write_with_ack_future`` call."""


@dataclass(frozen=True)
class Columns:
    """Where the writable columns are in the input rows."""

    data: int
    metadata: int | None = None
    """A ``metadata`` map or a ``headers`` array of (key, value) structs."""
    partition: int | None = None
    key: int | None = None
    topic: int | None = None


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
    """Rows to write, column by column: payloads, and when given metadata pairs, partitions, keys
    and topics."""

    data: list[bytes]
    metadata: list[list[tuple[str, bytes]] | None] | None = None
    partitions: list[int | None] | None = None
    keys: list[bytes | None] | None = None
    topics: list[str | None] | None = None

    @classmethod
    def of(cls, records: Sequence[Record]) -> Chunk:
        return cls([r[0] for r in records], [r[1] for r in records], [r[2] for r in records])

    def rows(self) -> Iterator[tuple[bytes, list[tuple[str, bytes]] | None, int | None, bytes | None, str | None]]:
        n = len(self.data)
        return zip(
            self.data, self.metadata or [None] * n, self.partitions or [None] * n, self.keys or [None] * n,
            self.topics or [None] * n, strict=True,
        )

    @property
    def plain(self) -> bool:
        """Payloads only: no metadata, partition, key or topic."""
        return (
            self.partitions is None and self.keys is None and self.topics is None
            and (self.metadata is None or not any(self.metadata))
        )


def chunks_from_arrow(batches: Iterator[Any], cols: Columns) -> Iterator[Chunk]:
    """One chunk per Arrow batch of the input."""
    for batch in batches:
        meta, part, keys, topics = (
            None if index is None else batch.column(index).to_pylist()
            for index in (cols.metadata, cols.partition, cols.key, cols.topic)
        )
        yield Chunk(
            _payloads(batch.column(cols.data).to_pylist()),
            None if meta is None else [_metadata(m) for m in meta],
            None if part is None else [_partition(p) for p in part],
            None if keys is None else [_key(k) for k in keys],
            topics,
        )


def chunks_from_rows(rows: Iterator[Any], cols: Columns, size: int = 4096) -> Iterator[Chunk]:
    """Rows (pyspark < 4.1 hands the streaming sink Rows, not Arrow) in chunks of ``size``."""
    buffered: list[Any] = []
    for row in rows:
        buffered.append(row)
        if len(buffered) >= size:
            yield _chunk_of_rows(buffered, cols)
            buffered = []
    if buffered:
        yield _chunk_of_rows(buffered, cols)


def _chunk_of_rows(rows: list[Any], cols: Columns) -> Chunk:
    def column(index: int | None) -> list[Any] | None:
        return None if index is None else [row[index] for row in rows]

    meta, part, keys = column(cols.metadata), column(cols.partition), column(cols.key)
    return Chunk(
        _payloads([row[cols.data] for row in rows]),
        None if meta is None else [_metadata(m) for m in meta],
        None if part is None else [_partition(p) for p in part],
        None if keys is None else [_key(k) for k in keys],
        column(cols.topic),
    )


def _payloads(values: list[Any]) -> list[bytes]:
    if all(type(v) is bytes for v in values):
        return values  # a binary column: nothing to convert
    if any(v is None for v in values):
        raise ValueError("ydb_topic: the payload column ('data' or 'value') is null in a row to write")
    return [v.encode() if isinstance(v, str) else bytes(v) for v in values]


def _metadata(meta: Any) -> list[tuple[str, bytes]] | None:
    """A ``metadata`` map (a dict, or Arrow's (key, value) pairs) or Kafka-style ``headers`` (a list
    of {key, value} structs) as metadata pairs, in order."""
    if not meta:
        return None
    pairs = meta.items() if isinstance(meta, dict) else meta
    items = []
    for pair in pairs:
        if isinstance(pair, dict):  # a headers struct from Arrow
            name, value = pair.get("key"), pair.get("value")
        else:  # a (key, value) pair, or a headers Row
            name, value = pair[0], pair[1]
        if name is None:
            raise ValueError("ydb_topic: a metadata (header) key is null in a row to write")
        items.append((str(name), value.encode() if isinstance(value, str) else bytes(value or b"")))
    if any(k in (DIGEST_KEY, KEY_METADATA) for k, _ in items):
        raise ValueError(
            f"ydb_topic: metadata keys {DIGEST_KEY!r} and {KEY_METADATA!r} are reserved (the sink's row digest and "
            "the 'key' column)"
        )
    return items


def _partition(partition: Any) -> int | None:
    if partition is not None and partition < 0:
        raise ValueError(f"ydb_topic: column 'partition' must not be negative, got {partition}")
    return partition  # type: ignore[no-any-return]


def _key(key: Any) -> bytes | None:
    if key is None:
        return None
    return key.encode() if isinstance(key, str) else bytes(key)


@dataclass(frozen=True, slots=True)
class Row:
    """A row placed: its topic (full path, and as the writer is given it), partition (None: the
    server picks one per producer) and metadata (the key included)."""

    path: str
    topic: str
    target: int | None
    data: bytes
    metadata: list[tuple[str, bytes]] | None


class _Placement:
    """Where each row goes: the option's topic or the row's, the row's partition or its key's."""

    def __init__(self, rt: Runtime, options: SourceOptions) -> None:
        self.rt = rt
        self.options = options
        self.descriptions: dict[str, TopicDescription] = {}
        self.placed: dict[tuple[str, bytes], int] = {}
        self.paths: dict[str, str] = {}

    async def rows(self, chunk: Chunk) -> list[Row]:
        options = self.options
        result = []
        for data, metadata, partition, key, row_topic in chunk.rows():
            topic = options.topic or row_topic
            if not topic:
                raise ValueError(
                    "ydb_topic: null topic present in the data; give every row a topic, or set the option 'topic'"
                )
            path = self.paths.get(topic)
            if path is None:
                path = self.paths[topic] = options.full_path(topic)
            target = partition
            if key is not None:
                metadata = [*(metadata or ()), (KEY_METADATA, key)]
                if options.partitioner != "kafka":
                    # As the keyed writer and YDB's own producers send it.
                    metadata.append((PARTITION_KEY_METADATA, partition_key(key)))
                if target is None:
                    target = await self._partition_for(topic, key)
            result.append(Row(path, topic, target, data, metadata))
        return result

    async def _partition_for(self, topic: str, key: bytes) -> int:
        placed = self.placed.get((topic, key))
        if placed is None:
            description = self.descriptions.get(topic)
            if description is None:
                driver = await self.rt.driver(self.options.connection)
                description = self.descriptions[topic] = await driver.topic.describe_topic(
                    topic, wait_for_topic=self.options.wait_for_topic
                )
            placed = self.placed[(topic, key)] = partition_for_key(
                description, key, "kafka" if self.options.partitioner == "kafka" else "ydb"
            )
        return placed


def _writer(driver: Driver, options: SourceOptions, topic: str, producer_id: str, target: int | None,
            *, sink: bool) -> TopicWriter:
    settings = options.writer_settings(
        producer_id=producer_id, partition_id=target, auto_seqno=not sink, retry=retry_policy(options.connection)
    )
    return driver.topic.writer(topic, **settings.options())


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


# --- batch writes -----------------------------------------------------------------------------


def write_batch_task(options: SourceOptions, producer_id: str, chunks: Iterator[Chunk]) -> YdbTopicCommitMessage:
    """Write every row under ``producer_id`` (one per job and task attempt) and count what was stored."""
    rt = runtime()
    return _drive(rt, _BatchTask(rt, options, producer_id), chunks)


class _BatchTask:
    def __init__(self, rt: Runtime, options: SourceOptions, producer_id: str) -> None:
        self.rt = rt
        self.options = options
        self.producer_id = producer_id
        self.placement = _Placement(rt, options)
        self.writers: dict[tuple[str, int | None], _Acks] = {}

    async def _writer(self, topic: str, target: int | None) -> _Acks:
        key = (self.options.full_path(topic), target)
        entry = self.writers.get(key)
        if entry is None:
            driver = await self.rt.driver(self.options.connection)
            producer_id = self.producer_id if target is None else f"{self.producer_id}-{target}"
            writer = _writer(driver, self.options, topic, producer_id, target, sink=False)
            entry = self.writers[key] = _Acks(writer, _compresses(self.options))
        return entry

    async def write(self, chunk: Chunk) -> None:
        if chunk.plain:  # the common case: payloads only, in one call
            await (await self._writer(self.options.topic, None)).send(list(chunk.data))
            return
        groups: dict[tuple[str, int | None], tuple[str, Outgoing]] = {}
        for row in await self.placement.rows(chunk):
            message = row.data if row.metadata is None else Message(row.data, metadata=row.metadata)
            groups.setdefault((row.path, row.target), (row.topic, []))[1].append(message)
        for (_, target), (topic, messages) in groups.items():
            await (await self._writer(topic, target)).send(messages)

    async def finish(self) -> YdbTopicCommitMessage:
        for acks in self.writers.values():
            await acks.wait()
        return YdbTopicCommitMessage(
            tuple(acks.writer.producer_id or "" for acks in self.writers.values()),
            sum(acks.stored for acks in self.writers.values()),
        )

    async def close(self) -> None:
        await _close_all([acks.writer for acks in self.writers.values()])


# --- the exactly-once streaming sink ---------------------------------------------------------


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
    task: _Task
    if replay is None:
        task = _SinkTask(rt, options, producer_prefix, partition, batch_id, attempt)
    else:
        task = _ReplayTask(rt, options, producer_prefix, partition, batch_id, attempt, replay)
    return _drive(rt, task, chunks)


def _digest(previous: bytes, seq_no: int, data: bytes, metadata: list[tuple[str, bytes]] | None) -> bytes:
    h = hashlib.blake2b(previous, digest_size=_DIGEST_SIZE)
    h.update(seq_no.to_bytes(8, "big"))
    h.update(len(data).to_bytes(8, "big"))
    h.update(data)
    _hash_metadata(h, metadata or ())
    return h.digest()


def _content(path: str, data: bytes, metadata: Sequence[tuple[str, bytes]]) -> bytes:
    """A row's identity whatever writes it: topic, payload, metadata (the key among it); not the
    partition, which the server may choose per producer."""
    h = hashlib.blake2b(digest_size=_DIGEST_SIZE)
    for part in (path.encode(), data):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    _hash_metadata(h, sorted((k, v) for k, v in metadata if k != DIGEST_KEY))
    return h.digest()


def _hash_metadata(h: hashlib.blake2b, metadata: Iterable[tuple[str, bytes]]) -> None:
    """Feed metadata items to ``h``, each key and value prefixed with its length."""
    for key, value in metadata:
        encoded = key.encode()
        h.update(len(encoded).to_bytes(4, "big"))
        h.update(encoded)
        h.update(len(value).to_bytes(4, "big"))
        h.update(value)


def _mismatch_error(where: str) -> ReplayMismatchError:
    return ReplayMismatchError(
        f"ydb_topic: {where}. The rows of this micro-batch are not the ones an earlier attempt of it stored: "
        "its Spark partitions changed between the attempts (minPartitions or maxRecordsPerPartition of a source "
        "that does not record its split, repartition() or coalesce() before the sink, another source or source "
        "option), or the query is not deterministic (rand(), uuid(), a shuffle whose row order varies). The "
        "exactly-once sink cannot deduplicate it, so nothing more was written for this task and the stored rows "
        "stay. To finish the batch exactly once, undo the change and restart from the same checkpoint; or set "
        "the option onReplayMismatch to atLeastOnce to write this attempt's rows again under a new producer id "
        "(rows may then be stored twice)."
    )


@dataclass
class _SinkProducer:
    """One (topic, partition) writer of a sink task, its digest chain and its replay check."""

    producer_id: str
    topic: str
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


class _SinkBase:
    """What both kinds of sink task share: the batch's seq_no range, producers and rewrites."""

    def __init__(
        self, rt: Runtime, options: SourceOptions, producer_prefix: str, partition: int, batch_id: int, attempt: bytes
    ) -> None:
        self.rt = rt
        self.options = options
        self.producer_prefix = producer_prefix
        self.producer_base = f"{producer_prefix}{partition}"
        self.batch_id = batch_id
        self.attempt = attempt
        self.lowest = (batch_id + 1) << SEQ_BATCH_SHIFT
        self.highest = self.lowest | _POSITION_MASK
        self.position = 0
        self.placement = _Placement(rt, options)
        self.producers: dict[tuple[str, int | None], _SinkProducer] = {}

    def _producer_id(self, target: int | None) -> str:
        return self.producer_base if target is None else f"{self.producer_base}-{target}"

    def _message(self, producer: _SinkProducer, row: Row) -> Message:
        self.position += 1
        if self.position > _POSITION_MASK:
            raise ValueError(f"ydb_topic: a sink task takes at most {_POSITION_MASK} rows per micro-batch")
        seq_no = self.lowest | self.position
        producer.digest = _digest(producer.digest, seq_no, row.data, row.metadata)
        stamp = producer.digest + self.attempt
        return Message(row.data, seq_no=seq_no, metadata=[*(row.metadata or ()), (DIGEST_KEY, stamp)])

    async def _open(self, row: Row) -> tuple[_SinkProducer, int]:
        """The row's producer, made on first use; and its last stored seq_no (from the handshake)."""
        producer = self.producers.get((row.path, row.target))
        if producer is not None:
            return producer, -1
        driver = await self.rt.driver(self.options.connection)
        producer_id = self._producer_id(row.target)
        writer = _writer(driver, self.options, row.topic, producer_id, row.target, sink=True)
        producer = self.producers[(row.path, row.target)] = _SinkProducer(
            producer_id, row.topic, row.target, _Acks(writer, _compresses(self.options))
        )
        info = await writer.wait_init()
        return producer, info.last_seq_no

    async def _rewrite(self, producer: _SinkProducer) -> _Acks:
        """A writer under a new producer id (``onReplayMismatch=atLeastOnce``)."""
        driver = await self.rt.driver(self.options.connection)
        rewrite_id = f"{producer.producer_id}-rewrite-{uuid.uuid4().hex[:12]}"
        producer.rewrite = _Acks(
            _writer(driver, self.options, producer.topic, rewrite_id, producer.target, sink=True),
            _compresses(self.options),
        )
        return producer.rewrite

    async def finish(self) -> YdbTopicCommitMessage:
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


class _SinkTask(_SinkBase):
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

    async def _producer(self, row: Row) -> _SinkProducer:
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
        self, producer: _SinkProducer, message: Message, outgoing: dict[tuple[str, int | None], Outgoing]
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
            if stored is not None and stored[:_DIGEST_SIZE] == producer.digest:
                producer.already_stored += len(producer.held)
                producer.held = []
                return
            await self._mismatch(producer, "the rows differ" if stored else "the stored rows cannot be read back")
            return
        # This attempt has no row at the stored position: its rows differ from the stored ones.
        await self._mismatch(producer, "the rows differ")
        outgoing.setdefault((self.options.full_path(producer.topic), producer.target), []).append(message)

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
            raise _mismatch_error(where)
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


@dataclass(frozen=True)
class _Planned:
    """A row of a replayed task, numbered and digested as its first attempt numbered it."""

    producer: _SinkProducer
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


class _ReplayTask(_SinkBase):
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
        outgoing: dict[str, tuple[_SinkProducer, Outgoing]] = {}
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
                        f"the rows of this Spark partition differ, from position {entry.seq_no & _POSITION_MASK} on, "
                        f"from what producer {producer_id!r} stored in an earlier attempt of micro-batch "
                        f"{self.batch_id}"
                    ), skip
                skip.add(entry.seq_no)
        # None of the rest may be a row another producer stored: rows moved between Spark partitions.
        for entry in planned:
            holder = None if entry.seq_no in skip else others.get(entry.content)
            if holder is not None:
                return (
                    f"row {entry.seq_no & _POSITION_MASK} of this Spark partition was stored in an earlier attempt "
                    f"of micro-batch {self.batch_id} by producer {holder!r}, another Spark partition's"
                ), skip
        return None, skip

    async def _conflict(self, where: str) -> YdbTopicCommitMessage:
        if not self.options.rewrite_on_replay_mismatch:
            raise _mismatch_error(where)
        # At-least-once: every row again, under new producer ids (per producer, as the rows go).
        logger.warning("ydb_topic: %s; onReplayMismatch is atLeastOnce: writing this task's %d rows again under "
                       "new producer ids (rows stored before may now be stored twice)", where, len(self.rows))
        self.position = 0
        for producer in self.producers.values():
            producer.digest = b""
            producer.already_stored = 0
        outgoing: dict[str, tuple[_Acks, Outgoing]] = {}
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
                async for messages in _read_between(driver, self.options, topic, pid, starts[pid], end):
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
            yield _Stored(message.producer_id, message.seq_no, stamp[:_DIGEST_SIZE],
                          _content(path, message.data, list(metadata.items())), stamp[_DIGEST_SIZE:] == self.attempt)


def _row_content(row: Row) -> bytes:
    return _content(row.path, row.data, list(dict(row.metadata or ()).items()))


async def _stored_digest(driver: Driver, options: SourceOptions, producer: _SinkProducer, seq_no: int) -> bytes | None:
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
        async for messages in _read_between(driver, options, producer.topic, partition, low, high):
            for message in messages:
                if message.producer_id == producer.producer_id:
                    seen = True
                    if message.seq_no == seq_no:
                        return message.metadata_items.get(DIGEST_KEY)
        if seen:
            return None  # the producer's messages are here but not that seq_no: it expired or never was
        high, window = low, window * 4
    return None


async def _read_between(
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

