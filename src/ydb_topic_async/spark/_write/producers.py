"""What both kinds of streaming-sink task share: the micro-batch's seq_no range, the chained
digest every message carries, the task's producers, and writing again under a new producer id."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ... import Message, TopicWriter
from .._bridge import Runtime
from .._errors import ReplayMismatchError
from .._options import SourceOptions
from .rows import DIGEST_KEY, Outgoing, Placement, Row
from .tasks import Acks, YdbTopicCommitMessage, close_all, compresses, open_writer

SEQ_BATCH_SHIFT = 32
"""Sink seq_no = (batch id + 1) << 32 | row position (from 1): increasing across batches."""
POSITION_MASK = (1 << SEQ_BATCH_SHIFT) - 1
DIGEST_SIZE = 16


def chain_digest(previous: bytes, seq_no: int, data: bytes, metadata: list[tuple[str, bytes]] | None) -> bytes:
    h = hashlib.blake2b(previous, digest_size=DIGEST_SIZE)
    h.update(seq_no.to_bytes(8, "big"))
    h.update(len(data).to_bytes(8, "big"))
    h.update(data)
    _hash_metadata(h, metadata or ())
    return h.digest()


def content_digest(path: str, data: bytes, metadata: Sequence[tuple[str, bytes]]) -> bytes:
    """A row's identity whatever writes it: topic, payload, metadata (the key among it); not the
    partition, which the server may choose per producer."""
    h = hashlib.blake2b(digest_size=DIGEST_SIZE)
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


def mismatch_error(where: str) -> ReplayMismatchError:
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
class SinkProducer:
    """One (topic, partition) writer of a sink task, its digest chain and its replay check."""

    producer_id: str
    topic: str
    target: int | None
    acks: Acks
    """The writer under ``producer_id``."""
    digest: bytes = b""
    stored_until: int = 0
    """seq_no up to which an earlier attempt of this micro-batch stored rows (0: none did)."""
    lookup: asyncio.Task[bytes | None] | None = None
    """Reads back the digest the earlier attempt stored at ``stored_until``."""
    held: Outgoing = field(default_factory=list)
    """This attempt's rows at or below ``stored_until``, kept until the check decides."""
    rewrite: Acks | None = None
    """The writer under a new producer id after a mismatch (``onReplayMismatch=atLeastOnce``)."""
    already_stored: int = 0
    rewritten: int = 0


class SinkBase:
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
        self.highest = self.lowest | POSITION_MASK
        self.position = 0
        self.placement = Placement(rt, options)
        self.producers: dict[tuple[str, int | None], SinkProducer] = {}

    def _producer_id(self, target: int | None) -> str:
        return self.producer_base if target is None else f"{self.producer_base}-{target}"

    def _message(self, producer: SinkProducer, row: Row) -> Message:
        self.position += 1
        if self.position > POSITION_MASK:
            raise ValueError(f"ydb_topic: a sink task takes at most {POSITION_MASK} rows per micro-batch")
        seq_no = self.lowest | self.position
        producer.digest = chain_digest(producer.digest, seq_no, row.data, row.metadata)
        stamp = producer.digest + self.attempt
        return Message(row.data, seq_no=seq_no, metadata=[*(row.metadata or ()), (DIGEST_KEY, stamp)])

    async def _open(self, row: Row) -> tuple[SinkProducer, int]:
        """The row's producer, made on first use; and its last stored seq_no (from the handshake)."""
        producer = self.producers.get((row.path, row.target))
        if producer is not None:
            return producer, -1
        driver = await self.rt.driver(self.options.connection)
        producer_id = self._producer_id(row.target)
        writer = open_writer(driver, self.options, row.topic, producer_id, row.target, sink=True)
        producer = self.producers[(row.path, row.target)] = SinkProducer(
            producer_id, row.topic, row.target, Acks(writer, compresses(self.options))
        )
        info = await writer.wait_init()
        return producer, info.last_seq_no

    async def _rewrite(self, producer: SinkProducer) -> Acks:
        """A writer under a new producer id (``onReplayMismatch=atLeastOnce``)."""
        driver = await self.rt.driver(self.options.connection)
        rewrite_id = f"{producer.producer_id}-rewrite-{uuid.uuid4().hex[:12]}"
        producer.rewrite = Acks(
            open_writer(driver, self.options, producer.topic, rewrite_id, producer.target, sink=True),
            compresses(self.options),
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
        await close_all(writers)
