"""``driver.topic``: topic administration and the factories of writers and readers.

``TopicClient`` is a ``TopicAdmin`` (``topic/admin.py``) that also makes writers and readers
from the driver's ``ClientContext`` and remembers them, so that closing the driver closes them.
It sits above the writers and readers it makes, so it lives apart from the ``topic`` package,
whose administration and types the writers and readers use.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import weakref
from collections.abc import Mapping
from typing import Any, Protocol, Unpack

from ._context import ClientContext
from ._errors import InvalidArgumentError, OperationTimeoutError
from ._futures import deadline
from ._validate import check_int, check_timeout
from .observability.logging import sdk_logger
from .reader.messages import TopicSelector
from .reader.reader import TopicReader, TopicsArg
from .reader.settings import ReaderOptions, ReaderSettings
from .topic.admin import TopicAdmin, offset_bounds
from .writer.keyed import DEFAULT_IDLE_TIMEOUT, KeyedWriter
from .writer.keyed_tx import KeyedTxWriter
from .writer.partitioning import Partitioner
from .writer.settings import KeyedWriterOptions, WriterOptions, WriterSettings
from .writer.tx_writer import TxWriter
from .writer.writer import TopicWriter

logger = sdk_logger("topic")


class _Closable(Protocol):
    async def close(self, timeout: float | None = None) -> None: ...


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MILLISECOND = dt.timedelta(milliseconds=1)
_PROBE_SETTINGS = ReaderSettings(None, buffer_size_bytes=64 * 1024)
"""The settings of ``offsets_for_time``'s reader: no consumer, and a small buffer (it needs one
message per partition)."""


def _to_ms(value: dt.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return (value - _EPOCH) // _MILLISECOND


def _wanted_times(when: object) -> int | dict[int, int]:
    """``offsets_for_time``'s ``when`` in milliseconds since the epoch (rounded down)."""
    if isinstance(when, dt.datetime):
        return _to_ms(when)
    if isinstance(when, Mapping):
        wanted = {}
        for pid, at in when.items():
            check_int(pid, "a partition id of when")
            if not isinstance(at, dt.datetime):
                raise InvalidArgumentError(f"when[{pid}] must be a datetime, got {type(at).__name__}")
            wanted[pid] = _to_ms(at)
        return wanted
    raise InvalidArgumentError(
        f"when must be a datetime or a mapping of partition ids to datetimes, got {type(when).__name__}"
    )


class TopicClient(TopicAdmin):
    """Administration of topics and consumers, and the entry point for writers and readers.

    Reached as ``driver.topic``. Paths may be absolute (``/local/events``) or relative to the
    driver's database (``events``). Every method validates its arguments before sending
    anything. A method's ``timeout`` bounds the whole call, retries and backoff included
    (``OperationTimeoutError`` when it passes); failures that may pass (UNAVAILABLE, OVERLOADED,
    a broken connection) are retried by the driver's ``retry`` policy, for idempotent methods
    also those whose outcome is unknown.
    """

    def __init__(self, context: ClientContext) -> None:
        super().__init__(context)
        self._owned: weakref.WeakSet[Any] = weakref.WeakSet()

    def _own(self, closable: _Closable) -> None:
        """Remember a writer or reader so that closing the driver closes it."""
        self._owned.add(closable)

    async def _close(self, timeout: float | None = None) -> None:
        """Close every owned writer and reader, all at once, each within ``timeout``; the first
        failure is raised after all are closed."""
        owned = list(self._owned)
        results = await asyncio.gather(*(obj.close(timeout) for obj in owned), return_exceptions=True)
        first: BaseException | None = None
        for obj, result in zip(owned, results, strict=True):
            if not isinstance(result, BaseException):
                continue
            if not isinstance(result, Exception):
                raise result
            if result is not getattr(obj, "failure", None):  # its own failure was logged when it happened
                logger.warning("closing %r with the driver failed: %s", obj, result)
            first = first or result
        if first is not None:
            raise first

    # --- positions ----------------------------------------------------------------------

    async def offsets_for_time(
        self, path: str, when: dt.datetime | Mapping[int, dt.datetime], *, timeout: float | None = None
    ) -> dict[int, int | None]:
        """Per partition, the offset of the first message written at or after ``when``, as
        aiokafka's ``offsets_for_times``: ``None`` for a partition with no such message (then
        ``end_offsets`` gives where the next message will go).

        Write times count in whole milliseconds, as YDB stores them: ``when`` is rounded down to
        its millisecond. The answer comes from the partitions' last write times (one
        ``describe_topic``) and, for each partition that has such a message, the first message a
        reader without a consumer is sent from that time on (the server skips older ones), so
        it costs a read stream, not a scan.

        Parameters:
            path: The topic, absolute or relative to the driver's database.
            when: One time for every partition, or ``{partition_id: time}`` for some of them.
                A naive datetime is taken as UTC.
            timeout: Seconds the whole call may take (``OperationTimeoutError`` after them).

        Returns:
            ``{partition_id: offset or None}`` for every partition (for the given ones with a
            mapping), active or not.

        Raises:
            InvalidArgumentError: ``when`` is not a datetime or a mapping of partition ids to
                datetimes, or names a partition the topic does not have.
        """
        timeout = check_timeout(timeout)
        wanted = _wanted_times(when)
        try:
            async with deadline(timeout):
                description = await self.describe_topic(path, include_stats=True)
                bounds = offset_bounds(description)
                if isinstance(wanted, int):
                    wanted = dict.fromkeys(bounds, wanted)
                unknown = sorted(set(wanted) - set(bounds))
                if unknown:
                    raise InvalidArgumentError(f"topic {description.path} has no partitions {unknown}")
                result: dict[int, int | None] = dict.fromkeys(sorted(wanted))
                groups: dict[int, list[int]] = {}
                for partition in description.partitions:
                    pid = partition.partition_id
                    at_ms = wanted.get(pid)
                    if at_ms is None:
                        continue
                    start, end = bounds[pid]
                    last = partition.stats.last_write_time if partition.stats else None
                    if start < end and (last is None or _to_ms(last) >= at_ms):
                        groups.setdefault(at_ms, []).append(pid)
                for at_ms, pids in groups.items():  # one time for all partitions: one reader
                    await self._first_offsets_since(description.path, at_ms, pids, bounds, result)
        except TimeoutError:
            raise OperationTimeoutError(f"offsets_for_time for {path} did not finish within {timeout}s") from None
        return result

    async def _first_offsets_since(
        self,
        path: str,
        at_ms: int,
        pids: list[int],
        bounds: Mapping[int, tuple[int, int]],
        result: dict[int, int | None],
    ) -> None:
        """Fill ``result`` with the first offset written at or after ``at_ms`` of each partition
        in ``pids`` (each holds such a message), reading them with one reader."""
        read_from = _EPOCH + at_ms * _MILLISECOND
        starts = {pid: bounds[pid][0] for pid in pids}
        selector = TopicSelector(path, partitions=pids, read_from=read_from, start_offsets=starts)
        todo = set(pids)
        async with TopicReader(self._context, selector, _PROBE_SETTINGS) as reader:
            while todo:
                batch = await reader.receive_batch()
                pid = batch.partition_session.partition_id
                if pid in todo:
                    todo.discard(pid)
                    result[pid] = batch[0].offset

    # --- writers and readers ------------------------------------------------------------

    def writer(self, path: str, **options: Unpack[WriterOptions]) -> TopicWriter:
        """A ``TopicWriter`` for ``path``: one partition, exactly-once with a producer id.

        Every option is checked here (``InvalidArgumentError`` naming it). Closing the driver
        closes the writer.

        Parameters:
            path: The topic, absolute or relative to the driver's database.

        Keyword Args:
            producer_id (str | None): The deduplication identity. ``None`` (the default) makes a random one,
                so that resends after a reconnect are still deduplicated; ``""`` sends none and
                switches deduplication off. At most 2048 characters.
            partition_id (int | None): The partition to write to; ``None`` lets the server pick one per
                producer id.
            message_group_id (str | None): The session's message group, as the Java and JS SDKs send it:
                the server places the session by it and deduplicates by it. YDB accepts it only
                without a producer id or equal to it (any other pair is refused with
                BAD_REQUEST), so with ``producer_id`` not given none is sent and the group is the
                writer's identity; not with ``partition_id``. ``None`` (the default): the
                producer id's.
            direct_write (bool): Connect to the node that holds the partition, with its generation,
                and follow the partition when it moves. Needs ``partition_id``.
            session_metadata (Mapping[str, str] | None): ``str`` to ``str`` pairs sent with the write session.
            codec (int | "auto" | None): The codec of written batches (``Codec.RAW`` by default); a custom
                codec id needs its function in ``encoders``. ``"auto"``: per batch, the codec that
                makes it smallest among those the topic accepts and the writer has an encoder for
                (RAW and GZIP when the topic lists none), measured on a sample of the batch off
                the event loop at the start and every 100 batches; a compressing codec must save
                at least 5% over RAW (``TopicWriter.selected_codec`` tells the current choice).
            encoders (CodecFunctions | None): Extra codec functions by codec id
                (``bytes -> bytes``), run off the event loop. An encoder runs in one thread at a
                time unless wrapped in ``ThreadSafe``.
            auto_seqno (bool): Number messages automatically, after the producer's last stored seq_no
                (default ``True``). With ``False`` every ``Message`` carries its own increasing
                ``seq_no``.
            auto_created_at (bool): Stamp each message with the time it was written (default ``True``).
            max_buffer_messages (int | None): The most messages accepted and not yet acknowledged (100,000 by
                default; ``None``: no limit).
            max_buffer_bytes (int | None): The most bytes accepted and not yet acknowledged: each message's
                payload and metadata, plus 256 bytes for what holding a message costs (64 MiB by default;
                ``None``: no limit).
            buffer_wait_timeout (float | None): Seconds ``write`` waits for room in a full buffer before raising
                ``BufferFullTimeoutError`` (``None``, the default: as long as it takes).
            retry (RetryPolicy | None): The reconnect policy; ``None``: the driver's ``stream_retry`` (reconnect for
                as long as the writer is open).
            max_request_size (int | None): The most bytes one WriteRequest may hold; ``None``: the driver's
                ``max_message_size`` less a margin for the request's framing.
            token_refresh_interval (float): Seconds between checks of the credentials' token for an
                in-band refresh (default 5; 0 switches the refresh off).
            init_timeout (float): Seconds one handshake may take, the InitRequest write and the
                InitResponse read together, before the attempt counts as failed (default 30).
            wait_for_topic (float | None): Seconds to wait for the topic to be created when it
                does not exist yet, counted from the first answer saying so: until the first
                handshake, that answer is tried again (on ``retry``'s fast backoff, the last try
                as the time ends) while ``write`` buffers as usual; then the writer fails with
                ``TopicNotFoundError``. Only a missing topic is waited for: any other failure is
                handled as without it. ``None`` (the default): a missing topic fails the writer at
                once.
        """
        writer = TopicWriter(self._context, self, path, WriterSettings(**options))
        self._own(writer)
        return writer

    def keyed_writer(
        self,
        path: str,
        *,
        partitioner: Partitioner = "ydb",
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        **options: Unpack[KeyedWriterOptions],
    ) -> KeyedWriter:
        """A ``KeyedWriter`` for ``path``: ``write(message, key=...)`` spreads messages over the
        topic's partitions by key, in order per key.

        Every option is checked here. Closing the driver closes the keyed writer.

        Parameters:
            path: The topic, absolute or relative to the driver's database.
            partitioner: Where a key goes. ``"ydb"`` (the default): where YDB's own
                key-partitioned producers (the C++ SDK's producer, the Go SDK's multi-partition
                writer) put it, following the topic's key ranges through splits; the message
                carries the 8-byte partition key as its ``__partition_key`` metadata item.
                ``"kafka"``: Kafka's default partitioner (murmur2 of the key modulo the number of
                partitions), for topics without auto-partitioning. Or a function
                ``(key: bytes, partitions: Sequence[PartitionInfo]) -> partition_id``.
            idle_timeout: Seconds after which a partition's writer with nothing unacknowledged
                and no write is closed, to be opened again by the next write to its partition
                (default 30, as the C++ SDK's producer; ``None``: never).

        Keyword Args:
            producer_id (str | None): The base of the partitions' producer ids (each partition's writer
                writes as ``{producer_id}_{partition_id}``); ``None`` makes a random one. Not
                empty, at most 2037 characters.
            options (KeyedWriterOptions): ``direct_write``, ``session_metadata``, ``codec``, ``encoders``,
                ``auto_created_at``, ``buffer_wait_timeout``, ``retry``, ``max_request_size``,
                ``token_refresh_interval`` and ``init_timeout`` as for ``writer``;
                ``max_buffer_messages`` and ``max_buffer_bytes`` bound each partition's writer.
                ``wait_for_topic`` as for ``writer``: the keyed writer waits for the topic's
                partitions (``describe_topic(..., wait_for_topic=)``), and ``write`` holds
                messages meanwhile, as many as one partition's writer would.
        """
        writer = KeyedWriter(self._context, self, path, WriterSettings(**options), partitioner, idle_timeout)
        self._own(writer)
        return writer

    def keyed_tx_writer(
        self,
        tx: object,
        path: str,
        *,
        partitioner: Partitioner = "ydb",
        **options: Unpack[KeyedWriterOptions],
    ) -> KeyedTxWriter:
        """A ``KeyedTxWriter`` for ``path``: keyed writes (as ``keyed_writer``) whose messages, in
        every partition, are published when ``tx`` commits.

        The commit waits for the acknowledgement of every message written through it and fails
        (the transaction rolls back) on any error; the first write to each partition returns once
        acknowledged. A partition split or kept overloaded during the transaction fails it.
        Closing the driver closes the writer.

        Parameters:
            tx: A transaction from ``driver.query.transaction()`` or from the official ``ydb``
                package's asyncio query client.
            path: The topic, absolute or relative to the driver's database.
            partitioner: Where a key goes, as for ``keyed_writer``.

        Keyword Args:
            options (KeyedWriterOptions): As for ``keyed_writer``. Each partition's writer has a
                producer id (``{producer_id}_{partition_id}``), so the driver's reconnect policy
                applies: a resend after a lost acknowledgement is deduplicated. Not
                ``wait_for_topic``, as for ``tx_writer``.
        """
        writer = KeyedTxWriter(self._context, self, tx, path, WriterSettings(**options), partitioner)
        self._own(writer)
        return writer

    def tx_writer(self, tx: object, path: str, **options: Unpack[WriterOptions]) -> TxWriter:
        """A ``TxWriter`` for ``path`` whose messages are published when ``tx`` commits.

        Parameters:
            tx: A transaction from ``driver.query.transaction()`` or from the official ``ydb``
                package's asyncio query client.
            path: The topic, absolute or relative to the driver's database.

        Keyword Args:
            options (WriterOptions): As for ``writer``, with other defaults: no producer id
                (``producer_id=""``) and no retries (``retry=RetryPolicy.no_retries()``), so
                that any error fails the transaction. Retries need a producer id. Not
                ``wait_for_topic`` (``InvalidArgumentError``): a transaction waiting for a topic
                would be held open meanwhile; wait before beginning it
                (``describe_topic(path, wait_for_topic=...)``).
        """
        writer = TxWriter(self._context, self, tx, path, TxWriter.settings(**options))
        self._own(writer)
        return writer

    def reader(self, topics: TopicsArg, *, consumer: str | None, **options: Unpack[ReaderOptions]) -> TopicReader:
        """A ``TopicReader`` of ``topics`` as ``consumer``. Every option is checked here; closing
        the driver closes the reader.

        Parameters:
            topics: A topic path, a ``TopicSelector`` (partitions, ``read_from``, ``max_lag``,
                ``start_offsets``) or a list of them.
            consumer: The consumer whose committed offsets the reader starts from and moves.
                ``None`` reads the selectors' explicit partitions from their ``start_offsets``
                (or offsets from ``on_partition_start``) and refuses commits.

        Keyword Args:
            buffer_size_bytes (int): The most bytes received and not yet handed out, counted decoded
                (50 MiB by default, at least 1024): a compressed response counts its size and what its
                payloads decode to, and credit is granted so that what the server may still send fits
                once decoded, with room for the one message it may send past the credit.
            decoders (CodecFunctions | None): Extra codec functions by codec id (``bytes -> bytes``), e.g.
                ``{LZ4_CODEC: lz4_decode}``; a decoder runs in one thread at a time unless
                wrapped in ``ThreadSafe``.
            on_partition_start (OnPartitionStart | None): Called with each new ``PartitionSession``; may return a read
                offset (int) or ``StartOffsets``. May be a coroutine function.
            on_partition_stop (OnPartitionStop | None): Called when a partition session ends. May be a
                coroutine function.
            reader_name (str | None): The name the server shows for this reader (random by default).
            retry (RetryPolicy | None): The reconnect policy; ``None``: the driver's ``stream_retry`` (reconnect for
                as long as the reader is open; uncommitted messages are delivered again).
            auto_partitioning_support (bool): Read auto-partitioned topics as their partitions split
                and merge (default ``True``).
            graceful_stop_timeout (float): Seconds a partition the server takes away waits for commits
                of the messages already handed out (default 10).
            credit_release_fraction (float): The share of ``buffer_size_bytes`` freed before credit is
                returned to the server (default 0.25, in ``(0, 1]``).
            token_refresh_interval (float): Seconds between checks of the credentials' token for an
                in-band refresh (default 5; 0 switches the refresh off).
            init_timeout (float): Seconds one handshake may take (default 30).
            partition_max_in_flight_bytes (int | None): The most bytes of one partition session handed
                out and not yet committed; a partition at the limit is not taken from until commits
                free room (the server is told too). ``None`` or 0: no limit. Needs a consumer.
            on_commit (OnCommit | None): Called with a ``CommitAck`` each time the server moves a
                partition session's committed offset; runs on the reader's task and must return
                quickly (what it raises is logged and ignored).
            direct_read (bool): Read each partition's data from the node that hosts it (YDB's
                direct read), the read stream staying where it is; a server that does not offer
                it is read the ordinary way (said once in the log). Default ``False``.

        Raises:
            InvalidArgumentError: An option's value is out of range or of the wrong type (the
                message names it), or the topics are not paths and selectors.
            TypeError: An unknown option.
        """
        reader = TopicReader(self._context, topics, ReaderSettings(consumer, **options))
        self._own(reader)
        return reader


__all__ = ["TopicClient"]
