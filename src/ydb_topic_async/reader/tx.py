"""Transactional reading: batches whose offsets are committed by a transaction.

``receive_batch_with_tx`` records each batch under its transaction. The transaction's
before-commit hook sends ``UpdateOffsetsInTransaction`` with the batches' offset ranges for the
reader's consumer, so the committed offsets move only if the transaction commits. After a
commit, the partition sessions learn the new committed offsets (graceful stops and ``close``
wait for them). If the transaction fails or is rolled back, the reader ends its read stream and
opens a new one: the server then delivers again everything not committed, so nothing read in
the failed transaction is lost. A batch whose partition session ended before the commit cannot
have its offsets committed (another reader may own the partition by now): the commit fails.

Once the offsets are in the transaction, the reader also offers it a probe of them, so that a
commit whose answer is lost can be settled (``query/_outcome.py``): the partition session that
read them is asked for its committed offset (an answer proves the partition was held throughout),
or, when that session is gone, ``DescribeConsumer``. Until the transaction's after-commit hook
has run, the read stream is left as it is, so the partition session can still answer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._errors import PartitionSessionClosedError, TransactionEndedError, YdbTopicError
from .._futures import deadline, wait_within
from .._proto import ydb_topic_pb2 as pb
from .._retry import RetryPolicy
from ..query._binding import TxBinding, bind
from ..query._outcome import OffsetsObservation, OffsetsProbe, ReadSpan
from ..topic.admin import TopicAdmin
from .commits import merge_ranges

if TYPE_CHECKING:
    from .._context import ClientContext
    from .messages import MessageBatch, PartitionSession
    from .session import ReaderConnection

_UPDATE_OFFSETS = "/Ydb.Topic.V1.TopicService/UpdateOffsetsInTransaction"


class TxReads:
    """The batches handed out per open transaction, and the hooks that commit or re-read them."""

    def __init__(self, context: ClientContext, conn: ReaderConnection, consumer: str) -> None:
        self._context = context
        self._transport = context.transport
        self._conn = conn
        self._consumer = consumer
        self._open: dict[int, tuple[TxBinding, list[MessageBatch]]] = {}

    async def join(self, tx: object) -> TxBinding:
        """Begin ``tx`` if needed; raise ``TransactionEndedError`` when nothing can join it."""
        binding = bind(tx)
        await binding.identity()
        return binding

    def record(self, binding: TxBinding, batch: MessageBatch) -> None:
        """Record a batch just taken from the buffer under its transaction."""
        try:
            binding.check_accepting()
        except TransactionEndedError:
            # It ended while the batch was awaited: have the batch delivered again, not lost.
            self._conn.restart("a batch was received for a transaction that had already ended")
            raise
        key = id(binding.tx)
        entry = self._open.get(key)
        if entry is None:
            entry = self._open[key] = (binding, [])
            binding.on_before_commit(lambda: self._before_commit(key))
            binding.on_after_commit(lambda error: self._after_commit(key, error))
            binding.on_after_rollback(lambda error: self._after_rollback(key))
        entry[1].append(batch)

    async def _before_commit(self, key: int) -> None:
        entry = self._open.get(key)
        if entry is None:
            return
        binding, batches = entry
        for batch in batches:
            if batch.partition_session.closed:
                error = PartitionSessionClosedError(
                    f"{batch.partition_session!r} ended after {batch!r} was received: its offsets cannot be"
                    " committed (the messages will be read again)"
                )
                await binding.abort(self._transport, error)
                raise error
        identity = binding.current_identity()
        assert identity is not None
        request = pb.UpdateOffsetsInTransactionRequest(tx=identity, consumer=self._consumer)
        ranges: dict[str, dict[int, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
        readers: dict[tuple[str, int], PartitionSession] = {}
        for batch in batches:
            ranges[batch.topic_path][batch.partition_id].append(batch.commit_range)
            readers[batch.topic_path, batch.partition_id] = batch.partition_session
        read: list[tuple[ReadSpan, PartitionSession]] = []
        for path, partitions in ranges.items():
            topic = request.topics.add(path=path)
            for partition_id, spans in partitions.items():
                item = topic.partitions.add(partition_id=partition_id)
                merged = merge_ranges(spans)
                for start, end in merged:
                    item.partition_offsets.add(start=start, end=end)
                span = ReadSpan(path, self._consumer, partition_id, merged[0][0], merged[-1][1])
                read.append((span, readers[path, partition_id]))
        node_id = binding.node_id()
        try:
            # No retries of its own: a failure fails the transaction, which is what gets repeated.
            # It goes to the node of the transaction's session, as the transaction's own calls do.
            await self._transport.call_operation(
                _UPDATE_OFFSETS,
                request,
                pb.UpdateOffsetsInTransactionResponse,
                None,
                idempotent=False,
                retry=RetryPolicy.no_retries(),
                endpoint=None if node_id is None else self._transport.balancer.for_node(node_id),
            )
        except Exception as exc:
            await binding.abort(self._transport, exc)
            raise
        binding.on_commit_lost(self._probe(read))

    def _probe(self, read: Sequence[tuple[ReadSpan, PartitionSession]]) -> OffsetsProbe:
        """How to read the committed offsets of ``read`` after a commit whose answer was lost:
        from the partition session that read each span while it lives (it held the partition
        throughout), else with ``DescribeConsumer``."""

        async def probe(timeout: float) -> list[OffsetsObservation]:
            seen: list[OffsetsObservation] = []
            async with deadline(timeout):
                lost: list[ReadSpan] = []
                for span, session in read:
                    offset = await self._held_offset(session, timeout / 3)
                    if offset is None:
                        lost.append(span)
                    else:
                        seen.append(OffsetsObservation(span, offset, held=True))
                admin = TopicAdmin(self._context)
                for path in dict.fromkeys(span.path for span in lost):
                    described = await admin.describe_consumer(path, self._consumer, include_stats=True)
                    committed = {p.partition_id: p.committed_offset for p in described.partitions}
                    for span in lost:
                        if span.path == path:
                            seen.append(OffsetsObservation(span, committed.get(span.partition_id, -1), held=False))
            return seen

        return probe

    async def _held_offset(self, session: PartitionSession, timeout: float) -> int | None:
        """The committed offset the live partition session ``session`` reports, or None when it
        has ended or does not answer in time."""
        if session.closed or self._conn.sessions.get(session.id) is not session:
            return None
        try:
            status = await wait_within(self._conn.request_status(session), timeout)
        except (TimeoutError, YdbTopicError):
            return None
        return status.committed_offset

    async def _after_commit(self, key: int, error: BaseException | None) -> None:
        entry = self._open.pop(key, None)
        if entry is None:
            return
        batches = entry[1]
        if error is not None:
            self._reread(batches, f"a transaction with reads from it failed ({error!r})")
            return
        for batch in batches:
            session = batch.partition_session
            if not session.closed:
                self._conn.commits.on_ack(session, batch.end_offset)
        self._conn.wake.set()  # a graceful stop may have waited for these offsets

    async def _after_rollback(self, key: int) -> None:
        entry = self._open.pop(key, None)
        if entry is not None:
            self._reread(entry[1], "a transaction with reads from it was rolled back")

    def _reread(self, batches: list[MessageBatch], reason: str) -> None:
        # The server delivers uncommitted data again only on a new stream. If every session of
        # these batches has already ended, the stream was replaced and that happened already.
        if any(not batch.partition_session.closed for batch in batches):
            self._conn.restart(reason)
