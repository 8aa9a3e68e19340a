"""``commit_offset`` while a reader holds the partition, and readers of a consumer the topic lacks.

YDB (ydb/services/persqueue_v1/actors/commit_offset_actor.cpp and the partition's
``ProcessUserAct``): without ``read_session_id`` the commit is applied and the partition forgets
the read session holding it, whose stream then closes with SESSION_EXPIRED; with that session's
id it is applied and the session goes on; with another id it fails with SESSION_EXPIRED
("set offset in already dead session"). The server side is tested in
tests/server/test_read_fidelity.py; here the SDK's reader and calls.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import fill
from .._polling import eventually

pytestmark = pytest.mark.timeout(30)


async def test_a_reader_resumes_from_an_offset_committed_out_of_band(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    """The reader has messages 0..9 in hand or buffered; an operator commits offset 6 without a
    session id: the reader's session ends, it reconnects at once (SESSION_EXPIRED is retried
    quickly) and goes on from offset 6, without messages 2..5."""
    await fill(driver, topic, [b"m%d" % i for i in range(10)])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        first = await reader.receive_batch(max_messages=2, timeout=10)
        assert [m.offset for m in first] == [0, 1]
        session = reader.read_session_id
        await driver.topic.commit_offset(topic, 0, "consumer", 6, timeout=10)
        await eventually(lambda: reader.read_session_id != session, "the reader opened a new session")
        rest: list[yta.TopicMessage] = []
        while len(rest) < 4:
            batch = await reader.receive_batch(timeout=10)
            rest.extend(batch)
            reader.commit(batch)
        assert [m.offset for m in rest] == [6, 7, 8, 9]
        assert isinstance(reader.last_error, yta.SessionExpiredError)
        assert reader.failure is None
    assert server.storage.committed_offsets(topic, "consumer") == {0: 10}


async def test_committing_with_the_readers_session_id_leaves_the_reader_alone(
    driver: yta.Driver, topic: str
) -> None:
    await fill(driver, topic, [b"m%d" % i for i in range(4)])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        first = await reader.receive_message(timeout=10)
        session = reader.read_session_id
        await driver.topic.commit_offset(topic, 0, "consumer", first.offset + 1, read_session_id=session, timeout=10)
        second = await reader.receive_message(timeout=10)
        assert (first.offset, second.offset) == (0, 1)
        assert reader.read_session_id == session and reader.reconnects == 0
    described = await driver.topic.describe_consumer(topic, "consumer")
    assert described.partitions[0].committed_offset == 1


async def test_committing_with_a_stale_session_id_fails_at_once(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, [b"m0", b"m1"])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        await reader.receive_message(timeout=10)
        started = time.monotonic()
        with pytest.raises(yta.StaleReadSessionError, match="set offset in already dead session gone"):
            await driver.topic.commit_offset(topic, 0, "consumer", 1, read_session_id="gone", timeout=20)
        assert time.monotonic() - started < 10  # refused, not retried until the timeout
        assert reader.reconnects == 0
    described = await driver.topic.describe_consumer(topic, "consumer")
    assert described.partitions[0].committed_offset == 0


async def test_a_consumer_the_topic_lacks(driver: yta.Driver, topic: str) -> None:
    """Reading and committing as an unknown consumer is BAD_REQUEST "no read rule provided for
    consumer" (``TReadInitAndAuthActor``, read_init_auth_actor.cpp, which CommitOffset runs too),
    so the reader fails instead of reconnecting; describing it is SCHEME_ERROR
    (``TDescribeConsumerActor``)."""
    reader = driver.topic.reader(topic, consumer="nobody")
    with pytest.raises(yta.BadRequestError, match="no read rule provided for consumer 'nobody'"):
        await asyncio.wait_for(reader.receive_batch(), 10)
    assert isinstance(reader.failure, yta.BadRequestError)
    await reader.close()
    with pytest.raises(yta.BadRequestError, match="no read rule provided for consumer 'nobody'"):
        await driver.topic.commit_offset(topic, 0, "nobody", 0, timeout=10)
    with pytest.raises(yta.SchemeError, match="no consumer 'nobody' in topic"):
        await driver.topic.describe_consumer(topic, "nobody", timeout=10)
