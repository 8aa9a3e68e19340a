"""The consume-transform-produce example keeps exactly-once results through broken streams and sessions."""

from __future__ import annotations

import pytest

from ydb_topic_async import Driver, Transaction, TxWriter
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import load_example, stored_data

pytestmark = pytest.mark.timeout(90)


async def test_every_result_lands_exactly_once_when_streams_break_mid_way(
    driver: Driver, server: LocalTopicServer, source: str, target: str
) -> None:
    example = load_example("exactly_once_transform")
    total = 120
    async with driver.topic.writer(source, producer_id="input") as writer:
        await writer.write([f"item {i}".encode() for i in range(total)])
    faults: list[str] = []

    async def chaos(attempt: int, tx: Transaction, writer: TxWriter) -> None:
        step = attempt % 4
        if step == 1:
            await writer.flush()
            server.faults.drop_read_streams()
            faults.append("read stream")
        elif step == 2:
            server.faults.drop_write_streams()
            faults.append("write stream")
        elif step == 3:
            await writer.flush()
            assert tx.session_id is not None
            server.faults.kill_query_session(tx.session_id)
            faults.append("query session")

    attempts = await example.transform_topic(driver, source, target, "consumer", total, batch_size=7, on_batch=chaos)

    results = stored_data(server, target)
    assert results == [f"ITEM {i}".encode() for i in range(total)]  # each exactly once, in order
    assert server.storage.committed_offsets(source, "consumer") == {0: total}
    assert {"read stream", "write stream", "query session"} <= set(faults)
    # Every killed session failed its transaction; those were repeated, not lost or doubled.
    assert server.query.aborted_transactions >= faults.count("query session")
    assert attempts > server.query.committed_transactions
