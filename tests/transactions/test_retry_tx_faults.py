"""``retry_tx`` over a three-node ``LocalTopicCluster`` when nodes go away: every attempt that
cannot have committed is repeated, a commit whose answer was lost is settled from the consumer
offsets it carried, and only a commit nothing can settle is raised.

The classes of failure, one test each: a failure inside the function (repeated before the
commit), a commit that never left the client (repeated), a commit in flight when the node holding
its session stopped, applied first (settled as committed, not repeated) or not (settled as not
committed, repeated, and the reader hands the same messages out again), with the partition
session that read them still held or lost with the node, and a lost commit of a transaction
without topic reads (``CommitOutcomeUnknownError``).

The commit in flight is held by the local server (``faults.hold_next_commit``) and the node
holding its query session is stopped under it (``LocalTopicCluster.stop_node_during_commit``), as
when a node dies with a commit on it. What the settling relies on is YDB's rule for offsets in a
transaction: a transaction's offsets of a partition must start at the consumer's committed offset,
or the commit is aborted (``ydb/core/persqueue`` checks a transaction's consumer offsets against
the committed ones before it applies them; ``testing/storage/transactions.py``'s ``PendingOffsets`` does
the same here). Sessions' calls go to their node as the official SDKs send them
(ydb-python-sdk ``ydb/query/session.py`` passes ``preferred_endpoint`` of the session's node id;
ydb-go-sdk v3.116.1 moved ``UpdateOffsetsInTransaction`` to the transaction's node).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicCluster

from .._polling import eventually

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

QUICK = yta.RetryPolicy(
    max_elapsed=30.0, fast=yta.BackoffSchedule(base=0.01, cap=0.2), slow=yta.BackoffSchedule(base=0.05, cap=0.5)
)


class Attempts(yta.NoopMetrics):
    """The driver's transaction attempts: (outcome, settled) of each."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def transaction_attempt(self, outcome: str, settled: bool) -> None:
        self.seen.append((outcome, settled))


@asynccontextmanager
async def _driver(cluster: LocalTopicCluster, metrics: yta.MetricsRecorder | None = None) -> AsyncIterator[yta.Driver]:
    async with yta.Driver(cluster.endpoint, cluster.database, retry=QUICK, metrics=metrics) as driver:
        await driver.wait_ready(timeout=10)
        await eventually(lambda: len(driver.endpoints) == 3, "every node discovered")
        await driver.topic.create_topic("src", consumers=["c"])
        await driver.topic.create_topic("dst")
        async with driver.topic.writer("src", producer_id="input") as writer:
            await writer.write([b"m%d" % i for i in range(6)])
        yield driver


def _reader_node(cluster: LocalTopicCluster) -> int:
    """The node serving the read stream that holds partition 0 of ``src`` for consumer ``c``."""
    info = cluster.reads.read_sessions().get(("/local/src", "c", 0))
    return 0 if info is None else info.node_id


async def _next_session_on(driver: yta.Driver, cluster: LocalTopicCluster, node_id: int) -> None:
    """Leave the pool so that the next transaction's session lives on node ``node_id``."""
    begun: list[yta.Transaction] = []
    for _ in range(8):
        tx = await driver.query.transaction().begin()
        begun.append(tx)
        assert tx.session_id is not None
        if cluster.query.sessions[tx.session_id].node_id == node_id:
            break
    else:
        raise AssertionError(f"no session was created on node {node_id}")
    chosen = begun.pop()
    await chosen.rollback()  # first in line among the idle sessions
    for tx in begun:
        await tx.rollback()


def _outputs(cluster: LocalTopicCluster) -> list[bytes]:
    return sorted(m.data for m in cluster.storage.iter_all("dst"))


async def _transform(reader: yta.TopicReader, driver: yta.Driver, tx: yta.Transaction) -> list[int]:
    batch = await reader.receive_batch_with_tx(tx, max_messages=3, timeout=10)
    await driver.topic.tx_writer(tx, "dst").write([m.data.upper() for m in batch])
    return [m.offset for m in batch]


@pytest.mark.parametrize("apply", [True, False], ids=["applied", "not-applied"])
@pytest.mark.parametrize("partition_session", ["held", "lost"])
async def test_a_commit_in_flight_when_its_node_stops_is_settled_from_the_consumer_offsets(
    ydb_topic_cluster: LocalTopicCluster, apply: bool, partition_session: str
) -> None:
    """The node holding the transaction's session stops while its commit is in flight, after
    applying it or before. Applied: the offsets moved to the transaction's end, so it committed:
    ``retry_tx`` returns the function's result after one attempt. Not applied: they did not
    move, so it is repeated on a session of a live node, and the reader hands out the same
    messages again. Either way every input is transformed exactly once and the consumer's
    offsets reach its end. ``held``: the read stream is on another node, and its partition
    session answers for the offsets; ``lost``: it was on the stopped node too, and
    ``DescribeConsumer`` answers."""
    cluster = ydb_topic_cluster
    attempts = Attempts()
    async with _driver(cluster, attempts) as driver, driver.topic.reader("src", consumer="c") as reader:
        await eventually(lambda: _reader_node(cluster) != 0, "the read stream holds the partition")
        reader_node = _reader_node(cluster)
        if partition_session == "held":
            victim = next(n.node_id for n in cluster.nodes if n.node_id not in (1, reader_node))
        else:
            victim = reader_node
        await _next_session_on(driver, cluster, victim)

        calls: list[tuple[list[int], int]] = []
        transactions: list[yta.Transaction] = []

        async def one_batch(tx: yta.Transaction) -> list[int]:
            offsets = await _transform(reader, driver, tx)
            assert tx.session_id is not None
            calls.append((offsets, cluster.query.sessions[tx.session_id].node_id))
            transactions.append(tx)
            return offsets

        held = cluster.faults.hold_next_commit()
        moved = asyncio.create_task(driver.query.retry_tx(one_batch))
        stopped = await cluster.stop_node_during_commit(held, apply=apply)
        result = await asyncio.wait_for(moved, 60)
        assert stopped.node_id == victim == calls[0][1]
        first = transactions[0]
        if apply:
            assert len(calls) == 1 and result == calls[0][0] == [0, 1, 2]
            assert first.commit_settled == "committed" and first.state is yta.TransactionState.COMMITTED
            assert attempts.seen == [("committed", True)]
        else:
            assert first.commit_settled == "not committed" and not first.outcome_unknown
            assert len(calls) == 2 and calls[1][0] == calls[0][0] == [0, 1, 2]  # the same messages again
            assert calls[1][1] != victim  # a fresh session, on a live node
            assert result == calls[1][0]
            assert attempts.seen == [("retried", True), ("committed", False)]
        assert cluster.storage.committed_offsets("src", "c") == {0: 3}
        assert _outputs(cluster) == [b"M0", b"M1", b"M2"]

        # The pipeline goes on from there.
        while sum(cluster.storage.committed_offsets("src", "c").values()) < 6:
            await driver.query.retry_tx(lambda tx: _transform(reader, driver, tx))
    assert _outputs(cluster) == [b"M%d" % i for i in range(6)]


async def test_a_lost_commit_without_topic_reads_is_raised_as_unknown(ydb_topic_cluster: LocalTopicCluster) -> None:
    """A transaction that only wrote carries nothing the server can be asked about: its lost
    commit raises ``CommitOutcomeUnknownError`` naming what it held, after one attempt, both
    when the node had applied it and when it had not."""
    cluster = ydb_topic_cluster
    async with _driver(cluster) as driver:
        for apply, victim in ((True, 3), (False, 2)):
            await _next_session_on(driver, cluster, victim)
            calls = 0

            async def publish(tx: yta.Transaction, data: bytes = b"apply=%d" % apply) -> None:
                nonlocal calls
                calls += 1
                await driver.topic.tx_writer(tx, "dst").write(data)

            held = cluster.faults.hold_next_commit()
            attempt = asyncio.create_task(driver.query.retry_tx(publish))
            stopped = await cluster.stop_node_during_commit(held, apply=apply)
            with pytest.raises(yta.CommitOutcomeUnknownError, match="read no topic messages") as raised:
                await asyncio.wait_for(attempt, 30)
            assert stopped.node_id == victim
            assert calls == 1
            assert "TxWriter('/local/dst'" in raised.value.held
            assert isinstance(raised.value.__cause__, yta.TransportError | yta.ServerError)
    assert _outputs(cluster) == [b"apply=1"]


async def test_failures_inside_the_function_are_repeated(ydb_topic_cluster: LocalTopicCluster) -> None:
    """Before the commit nothing can have committed: the node holding the session stops while
    the function writes (the session dies with it), the write stream breaks while the
    transactional writer waits for its acknowledgement, the session is killed. Each attempt is
    repeated on a fresh session, and the inputs land exactly once."""
    cluster = ydb_topic_cluster
    attempts = Attempts()
    async with _driver(cluster, attempts) as driver, driver.topic.reader("src", consumer="c") as reader:
        await _next_session_on(driver, cluster, 3)
        faults = ["node stop", "write stream", "query session"]
        nodes: list[int] = []

        async def one_batch(tx: yta.Transaction) -> list[int]:
            batch = await reader.receive_batch_with_tx(tx, max_messages=2, timeout=10)
            assert tx.session_id is not None
            nodes.append(cluster.query.sessions[tx.session_id].node_id)
            fault = faults.pop(0) if faults else None
            if fault == "node stop":
                await cluster.stop_node(2)
            elif fault == "write stream":
                cluster.faults.drop_write_stream_after(0)
            elif fault == "query session":
                cluster.faults.kill_query_session(tx.session_id)
            await driver.topic.tx_writer(tx, "dst").write([m.data.upper() for m in batch])
            return [m.offset for m in batch]

        moved: list[int] = []
        while len(moved) < 6:
            moved += await driver.query.retry_tx(one_batch)
        assert faults == []
        assert nodes[0] == 3 and 3 not in nodes[1:]  # after its node stopped, sessions live elsewhere
    assert sorted(moved) == list(range(6))
    assert _outputs(cluster) == [b"M%d" % i for i in range(6)]
    assert cluster.storage.committed_offsets("src", "c") == {0: 6}
    outcomes = [outcome for outcome, _ in attempts.seen]
    # One repeat per fault at least (a first stream to the stopped node, before it was known to
    # be gone, may cost one more); nothing raised, nothing settled (no answer was lost).
    assert outcomes.count("committed") == 3 and outcomes.count("retried") >= 3 and "failed" not in outcomes
    assert len(nodes) == len(outcomes)
    assert not any(settled for _, settled in attempts.seen)


async def test_a_commit_that_could_not_connect_was_not_sent_and_is_repeated(
    ydb_topic_cluster: LocalTopicCluster,
) -> None:
    """The node of the transaction's session can no longer be connected to when the commit is
    sent (discovery now names an address nobody listens on): gRPC fails the call before any byte
    of it leaves (``ConnectFailedError``), so it certainly did not commit. Though the
    transaction read nothing that could settle a lost answer, ``retry_tx`` repeats it, on a
    session of a node that answers, and what it wrote is stored once."""
    cluster = ydb_topic_cluster
    async with _driver(cluster) as driver:
        await _next_session_on(driver, cluster, 3)
        errors: list[BaseException | None] = []
        nodes: list[int] = []
        unused = _unused_port()

        async def publish(tx: yta.Transaction) -> int:
            await driver.topic.tx_writer(tx, "dst").write(b"once")
            assert tx.session_id is not None
            nodes.append(cluster.query.sessions[tx.session_id].node_id)
            tx.after_commit(lambda t, error: errors.append(error))
            if len(nodes) == 1:
                # Node 3 is listed at an address that refuses: the session's next call goes there.
                cluster.discovery.nodes = [
                    (n.host, unused if n.node_id == 3 else n.port, n.node_id) for n in cluster.nodes
                ]
                await driver._transport.discover(timeout=5)
            return len(nodes)

        committed_before = cluster.query.committed_transactions
        assert await driver.query.retry_tx(publish) == 2
        assert nodes[0] == 3 and nodes[1] != 3
        assert isinstance(errors[0], yta.ConnectFailedError) and errors[1] is None
        assert cluster.query.committed_transactions == committed_before + 1
    assert _outputs(cluster) == [b"once"]


def _unused_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize(
    "error",
    [
        yta.TransportInternalError("Internal error from Core"),
        yta.ConnectionLostError("Cancelling all calls"),
        yta.ConnectFailedError("failed to connect to all addresses; last error: ..."),
        yta.TransportCancelledError(""),
        yta.DeadlineExceededError(""),
        yta.BadSessionError(),
        yta.AbortedError(),
        yta.UndeterminedError(),
        yta.PartitionSessionClosedError("the partition session ended"),
    ],
    ids=lambda error: type(error).__name__,
)
async def test_what_retry_tx_repeats(driver: yta.Driver, error: yta.YdbTopicError) -> None:
    """The rule ``retry_tx`` follows, as ``driver.query.retriable`` states it: every transient
    failure of an attempt that did not commit is repeated (the transaction is repeated whole, so
    INTERNAL and CANCELLED count, as for an idempotent call), also when a writer, reader or the
    transaction only reports that it ended because of one. A lost commit nothing settled, the
    function's own errors and final server statuses are not."""
    assert driver.query.retriable(error)
    ended = yta.TransactionEndedError("the transaction can no longer commit")
    ended.__cause__ = error
    assert driver.query.retriable(ended)
    unknown = yta.CommitOutcomeUnknownError("lost")
    unknown.__cause__ = error
    assert not driver.query.retriable(unknown)
    for final in (ValueError("the function's own"), yta.SchemeError(), yta.TransactionEndedError("no cause")):
        assert not driver.query.retriable(final)
