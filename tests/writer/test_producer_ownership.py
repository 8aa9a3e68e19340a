"""Two writers with one producer id: the newest owns it, the older fails loudly, nothing is lost silently.

YDB gives a (partition, producer id) to the newest write session and kills the older one with
BAD_REQUEST "ownership session is killed by another session" (``TOwnerInfo::GenerateCookie``,
ydb/core/persqueue/pqtablet/partition/ownerinfo.cpp; the server side is tested in
tests/server/test_ownership.py). The old writer then fails with ``ProducerTakenOverError``: every
message it had not had acknowledged fails with it, ``close`` raises it, and one ERROR says so;
what it had acknowledged is stored. A writer that numbers its messages itself also refuses to
report a first-time message as ``Skipped``: that means another writer wrote its seq_nos.

Also the two ways to deploy without a takeover: a producer id per instance, or a handover (the
old writer closes before the new one starts).
"""

from __future__ import annotations

import asyncio
import logging

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import proxy_to
from ydb_topic_async.testing.storage import NewMessage

from .._polling import eventually

pytestmark = pytest.mark.timeout(60)


def errors_about(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR and text in r.getMessage()]


async def test_a_second_writer_takes_over_and_the_first_fails_loudly(
    server: LocalTopicServer, driver: yta.Driver, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Rolling deploy without a handover: pod B starts with pod A's producer id while A still
    writes. A's stream is held up by the network when B connects, so A has messages in flight
    that the server never stores; A learns of the takeover as soon as the network delivers it."""
    async with proxy_to(server) as proxy, yta.Driver(proxy.endpoint, server.database, discovery=False) as via_proxy:
        old = via_proxy.topic.writer(topic, producer_id="pod")
        acked = await old.write_with_ack([b"a1", b"a2", b"a3"])
        assert [r.seq_no for r in acked] == [1, 2, 3]

        proxy.stall()
        in_flight = await old.write_with_ack_future([b"a4", b"a5"])
        await old.write(b"a6")  # written without a future: close() is where it fails
        new = driver.topic.writer(topic, producer_id="pod")
        assert (await new.wait_init(timeout=10)).last_seq_no == 3  # A's acknowledged writes count
        proxy.resume()

        with caplog.at_level(logging.ERROR, logger="ydb_topic_async"):
            for future in in_flight:
                with pytest.raises(yta.ProducerTakenOverError) as taken:
                    await asyncio.wait_for(future, 10)
            error = taken.value
            assert isinstance(error, yta.BadRequestError) and isinstance(error, yta.ProducerConflictError)
            assert not error.is_retriable(idempotent=True)
            assert "ownership session is killed by another session" in str(error)
            assert old.failure is error
            with pytest.raises(yta.ProducerTakenOverError):
                await old.write(b"a7")  # refused at once
            with pytest.raises(yta.ProducerTakenOverError):
                await old.close(timeout=10)
        # One ERROR line, naming the writer and what it lost.
        logged = errors_about(caplog, "ProducerTakenOverError")
        assert len(logged) == 1, [r.getMessage() for r in logged]
        assert "3 unacknowledged messages" in logged[0].getMessage()

        # The newest writer goes on after A's acknowledged messages.
        assert await new.write_with_ack(b"b1") == yta.Written(0, 3, 4)
        await new.close()
    stored = [(m.seq_no, m.data) for m in server.storage.read(topic, 0)]
    assert stored == [(1, b"a1"), (2, b"a2"), (3, b"a3"), (4, b"b1")]


async def test_a_writer_that_reconnects_after_another_wrote_its_seq_nos_fails(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    """A is cut off; B (same producer id) writes meanwhile; A's reconnect takes the producer id
    back (B fails with the takeover) and A's handshake reports seq_nos A never sent: A fails
    too, with its unacknowledged message, instead of writing under numbers B already used."""
    async with proxy_to(server) as proxy, yta.Driver(proxy.endpoint, server.database, discovery=False) as via_proxy:
        old = via_proxy.topic.writer(topic, producer_id="pod", retry=yta.RetryPolicy(max_elapsed=30))
        await old.write_with_ack(b"a1")
        await proxy.refuse()
        pending = await old.write_with_ack_future(b"a2")
        await eventually(lambda: old.connection_state is yta.ConnectionState.RECONNECTING, "the old writer lost")
        new = driver.topic.writer(topic, producer_id="pod")
        assert [r.seq_no for r in await new.write_with_ack([b"b1", b"b2"])] == [2, 3]
        await proxy.restore()

        with pytest.raises(yta.SeqNoConflictError, match="another writer wrote with the same producer id"):
            await asyncio.wait_for(pending, 20)
        with pytest.raises(yta.SeqNoConflictError):
            await old.close()
        with pytest.raises(yta.ProducerTakenOverError):
            await new.write_with_ack(b"b3")
        with pytest.raises(yta.ProducerTakenOverError):
            await new.close()
    assert [(m.seq_no, m.data) for m in server.storage.read(topic, 0)] == [(1, b"a1"), (2, b"b1"), (3, b"b2")]


async def test_a_first_time_message_coming_back_skipped_fails_the_writer(
    server: LocalTopicServer, driver: yta.Driver, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A message the writer numbered itself and sends for the first time cannot have been
    written before, unless by someone else: here a message is stored under the producer id
    behind the writer's back (as a server that does not fence producers would let another
    writer do). ``Skipped`` would hide that the message was not stored: the writer fails."""
    async with driver.topic.writer(topic, producer_id="pod") as writer:
        await writer.write_with_ack(b"mine 1")
        server.storage.topic(topic).partition(0).append(
            NewMessage(seq_no=3, created_at_ns=0, codec=1, data=b"someone else's", uncompressed_size=14,
                       producer_id="pod")
        )
        with caplog.at_level(logging.ERROR, logger="ydb_topic_async"):
            with pytest.raises(yta.SeqNoConflictError, match="already had seq_no 2"):
                await writer.write_with_ack([b"mine 2", b"mine 3"])
            with pytest.raises(yta.SeqNoConflictError):
                await writer.close()
        assert len(errors_about(caplog, "SeqNoConflictError")) == 1
    assert [m.data for m in server.storage.read(topic, 0)] == [b"mine 1", b"someone else's"]


async def test_messages_resent_after_a_reconnect_may_come_back_skipped(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    """The stream breaks after the server stored messages and before their acks arrived: the
    writer resends them and the server answers ``Skipped``, which is a normal result here."""
    async with driver.topic.writer(topic, producer_id="pod") as writer:
        server.faults.drop_write_stream_after(3)
        results = await writer.write_with_ack([b"1", b"2", b"3"])
        assert [type(r).__name__ for r in results] == ["Skipped", "Skipped", "Skipped"]
        assert await writer.write_with_ack(b"4") == yta.Written(0, 3, 4)
    assert [m.data for m in server.storage.read(topic, 0)] == [b"1", b"2", b"3", b"4"]


async def test_rolling_deploy_with_a_producer_id_per_instance(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    """Each instance writes with its own producer id: old and new run side by side, both keep
    their exactly-once numbering, and nothing conflicts."""
    old = driver.topic.writer(topic, producer_id="orders-pod-a")
    new = driver.topic.writer(topic, producer_id="orders-pod-b")
    await old.write_with_ack(b"a1")
    await asyncio.gather(old.write_with_ack([b"a2", b"a3"]), new.write_with_ack([b"b1", b"b2"]))
    await old.close()
    await new.write_with_ack(b"b3")
    await new.close()
    stored = sorted((m.producer_id, m.seq_no, m.data) for m in server.storage.read(topic, 0))
    assert stored == [
        ("orders-pod-a", 1, b"a1"), ("orders-pod-a", 2, b"a2"), ("orders-pod-a", 3, b"a3"),
        ("orders-pod-b", 1, b"b1"), ("orders-pod-b", 2, b"b2"), ("orders-pod-b", 3, b"b3"),
    ]


async def test_rolling_deploy_with_a_handover(server: LocalTopicServer, driver: yta.Driver, topic: str) -> None:
    """The old instance closes its writer (which waits for every acknowledgement) before the new
    one starts with the same producer id: the new writer continues the sequence, nothing fails."""
    old = driver.topic.writer(topic, producer_id="orders")
    await old.write([b"old 1", b"old 2", b"old 3"])
    await old.close(timeout=10)  # the handover: flushed and gone
    async with driver.topic.writer(topic, producer_id="orders") as new:
        assert (await new.wait_init(timeout=10)).last_seq_no == 3
        await new.write_with_ack(b"new 1")
    assert [(m.seq_no, m.data) for m in server.storage.read(topic, 0)] == [
        (1, b"old 1"), (2, b"old 2"), (3, b"old 3"), (4, b"new 1")
    ]


async def test_an_idle_writer_reconnecting_to_its_own_history_goes_on(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    """A writer started after an earlier run of the same producer id (a restarted pod) has sent
    nothing when its stream breaks: the reconnect's handshake reports the earlier run's last
    seq_no, which this writer already numbers after, so it is not another writer's and the
    writer goes on."""
    async with driver.topic.writer(topic, producer_id="pod") as earlier_run:
        assert [r.seq_no for r in await earlier_run.write_with_ack([b"1", b"2", b"3"])] == [1, 2, 3]
    async with proxy_to(server) as proxy, yta.Driver(proxy.endpoint, server.database, discovery=False) as via_proxy:
        writer = via_proxy.topic.writer(topic, producer_id="pod", retry=yta.RetryPolicy(max_elapsed=30))
        assert (await writer.wait_init(timeout=10)).last_seq_no == 3
        first_session = writer.session_id
        proxy.cut()
        await eventually(
            lambda: writer.session_id != first_session and writer.connection_state is yta.ConnectionState.CONNECTED,
            "the writer reconnected",
        )
        assert writer.failure is None
        assert await writer.write_with_ack(b"4") == yta.Written(0, 3, 4)
        await writer.close()
    assert [m.data for m in server.storage.read(topic, 0)] == [b"1", b"2", b"3", b"4"]
