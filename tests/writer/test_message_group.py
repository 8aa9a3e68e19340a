"""An explicit ``message_group_id``, as the Java and JS SDKs send it.

YDB's write session takes a producer id with no message group, the same one, or a partition, and
refuses a different pair with BAD_REQUEST (ydb-platform/ydb:
ydb/services/persqueue_v1/actors/write_session_actor.cpp, ``TWriteSessionTopicApiActor::HandleInit``);
the source id that deduplicates is the message group when one is given. So the writer sends a
message group without a producer id (unless they are equal) and refuses the pairs YDB refuses at
the call, before anything is sent.
"""

from __future__ import annotations

import pytest

from ydb_topic_async import Driver, InvalidArgumentError, Message, RetryPolicy, Skipped, Written
from ydb_topic_async.testing import LocalTopicServer

pytestmark = pytest.mark.timeout(30)


async def test_a_message_group_places_and_deduplicates_the_session(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("groups", min_active_partitions=3)
    async with driver.topic.writer("groups", message_group_id="orders-eu") as writer:
        assert writer.producer_id == "" and writer.message_group_id == "orders-eu"
        first = await writer.write_with_ack([b"a", b"b"])
    partition = first[0].partition_id
    stored = server.storage.read("groups", partition)
    assert [(m.producer_id, m.message_group_id, m.seq_no) for m in stored] == [
        ("orders-eu", "orders-eu", 1), ("orders-eu", "orders-eu", 2)
    ]
    # The group is the identity: a new session with it continues its numbers in its partition,
    # and a resent seq_no is dropped.
    async with driver.topic.writer("groups", message_group_id="orders-eu", auto_seqno=False) as again:
        init = await again.wait_init(timeout=10)
        assert (init.last_seq_no, init.partition_id) == (2, partition)
        results = await again.write_with_ack([Message(b"b", seq_no=2), Message(b"c", seq_no=3)])
    assert [type(r) for r in results] == [Skipped, Written]
    async with driver.topic.writer("groups", producer_id="same", message_group_id="same") as equal:
        assert isinstance(await equal.write_with_ack(b"x"), Written)


async def test_pairs_ydb_refuses_are_refused_at_the_call(driver: Driver) -> None:
    await driver.topic.create_topic("strict")
    with pytest.raises(InvalidArgumentError, match="only without a producer_id or equal to it"):
        driver.topic.writer("strict", producer_id="p", message_group_id="g")
    with pytest.raises(InvalidArgumentError, match="exclude each other"):
        driver.topic.writer("strict", message_group_id="g", partition_id=0)
    with pytest.raises(InvalidArgumentError, match="non-empty string"):
        driver.topic.writer("strict", message_group_id="")
    with pytest.raises(InvalidArgumentError, match="not valid Unicode"):
        driver.topic.writer("strict", message_group_id="\udc80")
    with pytest.raises(InvalidArgumentError, match="message_group_id"):
        driver.topic.keyed_writer("strict", message_group_id="g")  # type: ignore[call-arg]
    # An explicit empty producer id with a group is what is sent anyway.
    async with driver.topic.writer("strict", producer_id="", message_group_id="g") as writer:
        assert isinstance(await writer.write_with_ack(b"x"), Written)


async def test_a_transactional_writer_retries_under_its_message_group(server: LocalTopicServer, driver: Driver) -> None:
    """A message group deduplicates as a producer id does, so it allows a transactional writer's retries."""
    await driver.topic.create_topic("tx-groups")
    async with driver.query.transaction() as tx:
        with pytest.raises(InvalidArgumentError, match="retries only with a producer id"):
            driver.topic.tx_writer(tx, "tx-groups", retry=RetryPolicy())
        writer = driver.topic.tx_writer(tx, "tx-groups", message_group_id="g", retry=RetryPolicy())
        await writer.write([b"a", b"b"])
    assert [(m.producer_id, m.seq_no) for m in server.storage.read("tx-groups", 0)] == [("g", 1), ("g", 2)]
