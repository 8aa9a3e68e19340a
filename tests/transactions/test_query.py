"""Query sessions and transactions: lazy begin, commit, rollback, hooks, session death, cleanup."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from ydb_topic_async import (
    BadSessionError,
    ClosedError,
    CommitOutcomeUnknownError,
    Driver,
    InvalidArgumentError,
    OperationTimeoutError,
    OverloadedError,
    ServerError,
    SessionBusyError,
    Transaction,
    TransactionEndedError,
    TransactionState,
)
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import FlakyProxy, proxy_to

from .._helpers import proxied_driver, stored_data
from .._polling import eventually

pytestmark = pytest.mark.timeout(60)


async def test_transaction_begins_on_first_use_and_commits_on_clean_exit(
    driver: Driver, server: LocalTopicServer
) -> None:
    async with driver.query.transaction() as tx:
        state, tx_id, session_id = tx.state, tx.tx_id, tx.session_id  # before the first use
        assert state is TransactionState.NOT_STARTED
        assert tx_id is None and session_id is None
        assert server.query.sessions == {}
        await tx.begin()
        state = tx.state
        assert state is TransactionState.ACTIVE
        assert tx.session_id in server.query.sessions
        assert tx.session_id is not None and tx.tx_id in server.query.sessions[tx.session_id].transactions
    assert tx.state is TransactionState.COMMITTED
    assert server.query.committed_transactions == 1
    assert server.query.sessions[tx.session_id].transactions == {}


async def test_sessions_are_attached_kept_in_the_pool_and_reused(driver: Driver, server: LocalTopicServer) -> None:
    first = await driver.query.transaction().begin()
    await first.commit()
    assert driver.query.pool.idle == 1
    second = await driver.query.transaction().begin()
    assert second.session_id == first.session_id
    assert second.tx_id != first.tx_id
    # While one transaction holds the session, another gets a new one.
    third = await driver.query.transaction().begin()
    assert third.session_id != first.session_id
    await second.rollback()
    await third.commit()
    assert driver.query.pool.open_sessions == 2
    assert set(server.query.sessions) == {first.session_id, third.session_id}


async def test_exception_in_block_rolls_back(driver: Driver, server: LocalTopicServer) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with driver.query.transaction() as tx:
            await tx.begin()
            raise RuntimeError("boom")
    assert tx.state is TransactionState.ROLLED_BACK
    assert server.query.committed_transactions == 0
    assert tx.session_id is not None and server.query.sessions[tx.session_id].transactions == {}


async def test_hooks_run_in_order_with_the_outcome(driver: Driver) -> None:
    events: list[tuple[str, object]] = []
    tx = driver.query.transaction()

    @tx.before_commit
    async def first(t: object) -> None:
        assert t is tx
        events.append(("before_commit", tx.state))

    tx.after_commit(lambda t, error: events.append(("after_commit", error)))
    tx.before_rollback(lambda t: events.append(("before_rollback", None)))
    await tx.begin()
    await tx.commit()
    await tx.commit()  # a second commit does nothing
    assert events == [("before_commit", TransactionState.COMMITTING), ("after_commit", None)]
    with pytest.raises(TransactionEndedError):
        await tx.rollback()
    with pytest.raises(TransactionEndedError):
        tx.before_commit(first)

    rolled: list[tuple[str, object]] = []
    tx2 = driver.query.transaction()
    tx2.before_rollback(lambda t: rolled.append(("before_rollback", t.state)))
    tx2.after_rollback(lambda t, error: rolled.append(("after_rollback", error)))
    tx2.after_commit(lambda t, error: rolled.append(("after_commit", error)))
    await tx2.begin()
    await tx2.rollback()
    await tx2.rollback()
    assert rolled == [("before_rollback", TransactionState.ROLLING_BACK), ("after_rollback", None)]
    with pytest.raises(TransactionEndedError, match="rolled back"):
        await tx2.commit()
    with pytest.raises(InvalidArgumentError):
        driver.query.transaction().before_commit("not callable")  # type: ignore[arg-type]


async def test_failing_before_commit_hook_aborts_and_rolls_back(driver: Driver, server: LocalTopicServer) -> None:
    outcome: list[BaseException | None] = []
    tx = driver.query.transaction()

    async def refuse(t: object) -> None:
        raise ValueError("not today")

    tx.before_commit(refuse)
    tx.after_commit(lambda t, error: outcome.append(error))
    await tx.begin()
    with pytest.raises(ValueError, match="not today"):
        await tx.commit()
    assert tx.state is TransactionState.FAILED
    assert isinstance(outcome[0], ValueError)
    assert server.query.committed_transactions == 0
    assert tx.session_id is not None
    assert server.query.sessions[tx.session_id].transactions == {}  # rolled back on the server
    assert driver.query.pool.idle == 1  # the session is still good


async def test_session_death_aborts_the_transaction(driver: Driver, server: LocalTopicServer) -> None:
    tx = await driver.query.transaction().begin()
    session_id = tx.session_id
    assert session_id is not None
    assert server.faults.kill_query_session(session_id)
    # Only the session object shows that its attach stream brought the death notice.
    session = driver.query.pool._all.copy().pop()
    await asyncio.wait_for(session.died.wait(), 5)
    with pytest.raises(BadSessionError):
        await tx.commit()
    assert tx.state is TransactionState.FAILED
    assert server.query.committed_transactions == 0
    # The dead session is dropped; the next transaction gets a fresh one.
    assert driver.query.pool.open_sessions == 0
    tx2 = await driver.query.transaction().begin()
    assert tx2.session_id != session_id
    await tx2.commit()


async def test_commit_failure_from_the_server_is_raised(driver: Driver, server: LocalTopicServer) -> None:
    tx = await driver.query.transaction().begin()
    server.faults.fail_next("CommitTransaction", "ABORTED")
    with pytest.raises(Exception, match="ABORTED"):
        await tx.commit()
    assert tx.state is TransactionState.FAILED
    assert not tx.outcome_unknown


async def test_retry_tx_repeats_an_aborted_transaction(driver: Driver, server: LocalTopicServer) -> None:
    attempts: list[str] = []

    async def body(tx: object) -> str:
        from ydb_topic_async import Transaction

        assert isinstance(tx, Transaction)
        await tx.begin()
        attempts.append(str(tx.tx_id))
        return "done"

    server.faults.fail_next("CommitTransaction", "ABORTED")
    assert await driver.query.retry_tx(body) == "done"
    assert len(attempts) == 2 and attempts[0] != attempts[1]
    assert server.query.committed_transactions == 1


async def test_driver_close_rolls_back_and_deletes_sessions(server: LocalTopicServer) -> None:
    driver = Driver(server.endpoint, server.database)
    await driver.open()
    try:
        idle = await driver.query.transaction().begin()
        open_tx = await driver.query.transaction().begin()
        await driver.topic.create_topic("never-written")
        await driver.topic.tx_writer(open_tx, "never-written").write(b"x")
        await idle.commit()
        ended: list[BaseException | None] = []
        open_tx.after_rollback(lambda t, error: ended.append(error))
        assert len(server.query.sessions) == 2
    finally:
        await driver.close()
    assert open_tx.state is TransactionState.ROLLED_BACK
    assert ended == [None]
    # The attach watchers ended with their sessions (the autouse fixture checks every other task).
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("query session") and not t.done()]
    assert server.query.sessions == {}
    assert server.query.committed_transactions == 1
    assert server.storage.read("never-written", 0) == []
    with pytest.raises(ClosedError):
        driver.query.transaction()


@asynccontextmanager
async def _held_begin(server: LocalTopicServer) -> AsyncIterator[tuple[Driver, FlakyProxy]]:
    """A driver whose pool holds an idle session, behind a proxy that is then stalled: a begin
    takes that session (``pool.idle`` drops to 0) and waits for the server until ``resume``."""
    async with proxy_to(server) as proxy, proxied_driver(server, proxy) as driver:
        await driver.topic.create_topic("racing")
        async with driver.query.transaction() as warm_up:
            await warm_up.begin()
        assert driver.query.pool.idle == 1
        proxy.stall()
        yield driver, proxy


async def test_a_commit_waits_for_a_begin_under_way(server: LocalTopicServer) -> None:
    async with _held_begin(server) as (driver, proxy):
        tx = driver.query.transaction()
        writer = driver.topic.tx_writer(tx, "racing")
        write = asyncio.create_task(writer.write(b"x"))
        await eventually(lambda: driver.query.pool.idle == 0, "the first write begins the transaction")
        commit = asyncio.create_task(tx.commit())
        await asyncio.sleep(0.05)
        assert not commit.done()  # waiting for the begin
        proxy.resume()
        await asyncio.wait_for(asyncio.gather(write, commit), 10)
        assert tx.state is TransactionState.COMMITTED
        assert stored_data(server, "racing") == [b"x"]
        assert tx.session_id is not None and server.query.sessions[tx.session_id].transactions == {}
        assert driver.query.pool.idle == 1  # the session went back, with no transaction left open


async def test_a_rollback_waits_for_a_begin_under_way(server: LocalTopicServer) -> None:
    async with _held_begin(server) as (driver, proxy):
        tx = driver.query.transaction()
        begin = asyncio.create_task(tx.begin())
        await eventually(lambda: driver.query.pool.idle == 0, "the begin under way")
        rollback = asyncio.create_task(tx.rollback())
        await asyncio.sleep(0.05)
        assert not rollback.done()  # waiting for the begin
        proxy.resume()
        await asyncio.wait_for(asyncio.gather(begin, rollback), 10)
        assert tx.state is TransactionState.ROLLED_BACK
        assert tx.session_id is not None and server.query.sessions[tx.session_id].transactions == {}
        assert driver.query.pool.idle == 1
        with pytest.raises(TransactionEndedError):
            await tx.begin()


@pytest.mark.parametrize("status", ["UNDETERMINED", "TIMEOUT", "CANCELLED"])
async def test_an_uncertain_commit_without_topic_reads_is_raised_as_unknown_and_drops_the_session(
    driver: Driver, server: LocalTopicServer, source: str, status: str
) -> None:
    """Nothing in a transaction that only wrote can tell whether a commit whose answer was lost
    applied: ``CommitOutcomeUnknownError`` (the lost error its cause) says what it held, and
    ``retry_tx`` does not repeat it."""
    tx = await driver.query.transaction().begin()
    await driver.topic.tx_writer(tx, source).write(b"held")
    server.faults.fail_next("CommitTransaction", status)
    with pytest.raises(CommitOutcomeUnknownError, match="read no topic messages") as raised:
        await tx.commit()
    assert isinstance(raised.value.__cause__, ServerError) and status in str(raised.value.__cause__)
    assert raised.value.tx_id == tx.tx_id and raised.value.session_id == tx.session_id
    assert "TxWriter(" in raised.value.held and source in raised.value.held
    assert not driver.query.retriable(raised.value)
    assert tx.state is TransactionState.FAILED
    assert tx.outcome_unknown and tx.commit_settled is None
    assert driver.query.pool.open_sessions == 0  # never reused: the commit may still be running on it

    attempts = 0

    async def body(t: Transaction) -> None:
        nonlocal attempts
        attempts += 1
        await t.begin()

    server.faults.fail_next("CommitTransaction", status)
    with pytest.raises(CommitOutcomeUnknownError):
        await driver.query.retry_tx(body)
    assert attempts == 1  # repeating could commit twice


async def test_a_refused_commit_rolls_back_and_keeps_the_session(driver: Driver, server: LocalTopicServer) -> None:
    tx = await driver.query.transaction().begin()
    session_id = tx.session_id
    assert session_id is not None
    server.faults.fail_next("CommitTransaction", "OVERLOADED")
    with pytest.raises(OverloadedError):
        await tx.commit()
    assert not tx.outcome_unknown
    assert server.query.sessions[session_id].transactions == {}  # not left open on the pooled session
    assert driver.query.pool.idle == 1


async def test_rolling_back_a_transaction_the_server_ended_keeps_the_session(
    driver: Driver, server: LocalTopicServer
) -> None:
    tx = await driver.query.transaction().begin()
    assert tx.session_id is not None and tx.tx_id is not None
    server.query.abort(server.query.transaction(tx.session_id, tx.tx_id))
    await tx.rollback()  # NOT_FOUND: it is already rolled back
    assert tx.state is TransactionState.ROLLED_BACK
    assert driver.query.pool.idle == 1
    again = await driver.query.transaction().begin()
    assert again.session_id == tx.session_id
    await again.commit()


async def test_a_hooks_own_timeout_is_not_reported_as_a_commit_timeout(driver: Driver) -> None:
    for timeout in (None, 30.0):
        tx = driver.query.transaction()

        async def slow_dependency(t: object) -> None:
            raise TimeoutError("the hook's own dependency timed out")

        tx.before_commit(slow_dependency)
        await tx.begin()
        with pytest.raises(TimeoutError, match="own dependency") as raised:
            await tx.commit(timeout=timeout)
        assert not isinstance(raised.value, OperationTimeoutError)
        assert tx.state is TransactionState.FAILED


async def test_the_commit_timeout_bounds_the_hooks(driver: Driver, server: LocalTopicServer) -> None:
    tx = driver.query.transaction()
    never = asyncio.Event()

    async def stuck(t: object) -> None:
        await never.wait()

    tx.before_commit(stuck)
    await tx.begin()
    with pytest.raises(OperationTimeoutError, match=r"within 0\.2s"):
        await tx.commit(timeout=0.2)
    assert tx.state is TransactionState.FAILED
    assert tx.session_id is not None and server.query.sessions[tx.session_id].transactions == {}
    with pytest.raises(OperationTimeoutError, match="begin within"):
        await driver.query.transaction().begin(timeout=0)


async def test_session_busy_drops_the_session(driver: Driver, server: LocalTopicServer) -> None:
    server.faults.fail_next("BeginTransaction", "SESSION_BUSY")
    with pytest.raises(SessionBusyError):
        await driver.query.transaction().begin()
    assert driver.query.pool.open_sessions == 0
    tx = await driver.query.transaction().begin()
    server.faults.fail_next("CommitTransaction", "SESSION_BUSY")
    with pytest.raises(SessionBusyError):
        await tx.commit()
    assert driver.query.pool.open_sessions == 0


async def test_retry_tx_repeats_a_transaction_the_server_no_longer_knows(
    driver: Driver, server: LocalTopicServer
) -> None:
    attempts = 0

    async def body(t: Transaction) -> int:
        nonlocal attempts
        attempts += 1
        await t.begin()
        return attempts

    server.faults.fail_next("CommitTransaction", "NOT_FOUND")
    assert await driver.query.retry_tx(body) == 2
    assert server.query.committed_transactions == 1
