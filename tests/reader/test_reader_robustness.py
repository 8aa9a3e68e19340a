"""Reader behaviour around failing credentials, commits behind a gap, and failure reporting."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.storage import NewMessage

from .._helpers import fill
from .._polling import eventually

pytestmark = pytest.mark.timeout(30)


class TokenServiceError(Exception):
    """What an HTTP token provider raises when its service answers 503."""


async def test_a_failed_token_refresh_is_logged_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    async with LocalTopicServer(users={"alice": "secret"}) as server:
        issued: list[str] = []
        failures = 0
        fail_once = False

        async def provider() -> str:
            nonlocal fail_once, failures
            if fail_once:
                fail_once = False
                failures += 1
                raise TokenServiceError(f"could not renew {issued[-1]}: HTTP 503")
            token = server.auth.login("alice", "secret")
            assert token is not None
            issued.append(token)
            return token

        credentials = yta.TokenProviderCredentials(provider)
        async with yta.Driver(server.endpoint, server.database, credentials, discovery=False) as driver:
            await driver.topic.create_topic("t", consumers=["c"])
            await fill(driver, "t", [b"before"])
            async with driver.topic.reader("t", consumer="c", token_refresh_interval=0.02) as reader:
                before = await reader.receive_message(timeout=10)
                assert before.data == b"before"
                reader.commit(before)
                with caplog.at_level(logging.WARNING, logger="ydb_topic_async.reader"):
                    fail_once = True  # only the reader's refresher asks for tokens now
                    await eventually(lambda: failures == 1, "the refresh failed")
                    issued_before = len(issued)
                    # The next tick asks again and sends the new token in-band.
                    await eventually(lambda: len(issued) > issued_before, "a later refresh")
                await fill(driver, "t", [b"after"])
                after = await reader.receive_message(timeout=10)
                assert after.data == b"after"
                await reader.commit_with_ack(after, timeout=10)  # the stream is alive and authorised
    warnings = [r for r in caplog.records if "could not refresh its token" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert "TokenServiceError" in caplog.text and "HTTP 503" in caplog.text
    assert not any(token in caplog.text for token in issued)  # the SDK masks every token it saw


async def test_commit_with_ack_behind_a_gap_warns_with_the_partition_and_the_gap(
    driver: yta.Driver, topic: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ydb_topic_async.reader.reader.GAP_WARNING_DELAY", 0.3)
    await fill(driver, topic, [f"m{i}".encode() for i in range(7)])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        got = [await reader.receive_message(timeout=10) for _ in range(7)]
        with caplog.at_level(logging.WARNING, logger="ydb_topic_async.reader"):
            await reader.commit_with_ack(got[0], timeout=10)  # in order: nothing to warn about
            # Out of order, but the gap closes within the grace delay: nothing to warn about either.
            late = asyncio.ensure_future(reader.commit_with_ack(got[2], timeout=10))
            await asyncio.sleep(0.05)
            reader.commit(got[1])
            await late
            assert caplog.records == []
            # Offsets 3..5 are not committed: the server cannot acknowledge offset 6 yet.
            waiting = asyncio.ensure_future(reader.commit_with_ack(got[6]))
            await eventually(lambda: bool(caplog.records), "the warning")
        [record] = caplog.records
        assert record.levelno == logging.WARNING
        message = record.getMessage()
        assert f"partition={got[6].partition_id}" in message and f"topic={got[6].topic_path!r}" in message
        assert "waits until offsets 3..5 are committed" in message and "contiguous" in message
        assert not waiting.done()
        for message_ in got[3:6]:
            reader.commit(message_)
        await asyncio.wait_for(waiting, 10)  # the gap is closed: the waiting commit is acknowledged
    desc = await driver.topic.describe_consumer(topic, "consumer")
    assert [p.committed_offset for p in desc.partitions] == [7]


async def test_a_failed_reader_reports_its_error_once(
    server: LocalTopicServer, driver: yta.Driver, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    server.faults.fail_next("StreamRead", "SCHEME_ERROR")
    with caplog.at_level(logging.DEBUG, logger="ydb_topic_async.reader"):
        async with driver.topic.reader(topic, consumer="consumer") as reader:
            with pytest.raises(yta.SchemeError):  # the caller gets the error...
                await reader.receive_message(timeout=10)
    # ...and the log says it once, as an ERROR (the reader failed for good), without a warning first.
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.levelno for r in loud] == [logging.ERROR]
    assert "SCHEME_ERROR" in loud[0].getMessage() and "failed" in loud[0].getMessage()


async def test_a_receive_that_keeps_losing_races_still_times_out(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    # Two consumers share one reader. Each time two messages arrive, the iterating consumer takes
    # the first; the credit that frees makes the waiting receive yield once before taking anything,
    # and meanwhile the iterating consumer takes the second too. Messages keep arriving more often
    # than the timeout: the waiting receive must still give up once its own timeout has passed.
    timeout = 0.5
    log = server.storage.topic(topic).partition(0)
    seq_no = 0

    def arrive(count: int) -> None:
        nonlocal seq_no
        for _ in range(count):
            seq_no += 1
            log.append(NewMessage(seq_no=seq_no, created_at_ns=1, codec=1, data=b"m%d" % seq_no,
                                  uncompressed_size=0, producer_id="p"))
        server.storage.notify()

    taken: list[yta.TopicMessage] = []

    async def iterate(reader: yta.TopicReader) -> None:
        async for message in reader:
            taken.append(message)

    # A threshold of one byte: every message taken frees enough credit for a ReadRequest.
    async with driver.topic.reader(topic, consumer="consumer", credit_release_fraction=1e-9) as reader:
        iterating = asyncio.ensure_future(iterate(reader))
        waiting: asyncio.Future[yta.MessageBatch] | None = None
        try:
            arrive(1)
            await eventually(lambda: len(taken) == 1, "the iterating consumer took the first message")
            started = time.monotonic()
            waiting = asyncio.ensure_future(reader.receive_batch(timeout=timeout))
            while not waiting.done() and time.monotonic() - started < 6 * timeout:
                arrive(2)
                await asyncio.wait([waiting], timeout=timeout / 3)
            elapsed = time.monotonic() - started
            assert waiting.done(), "receive_batch(timeout) was still waiting"
            with pytest.raises(yta.OperationTimeoutError):
                waiting.result()
            assert elapsed < 2 * timeout, elapsed
            assert len(taken) >= 3  # it lost at least one race
        finally:
            tasks = [task for task in (iterating, waiting) if task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            for task in tasks:
                if not task.cancelled():
                    task.exception()
