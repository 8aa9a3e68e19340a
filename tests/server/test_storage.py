"""The storage API directly: appends, dedup state, splits, waiting for data, held transactional writes."""

from __future__ import annotations

import asyncio

import pytest

from ydb_topic_async.testing import StorageError, TopicStorage
from ydb_topic_async.testing.storage import NewMessage, PendingWrites
from ydb_topic_async.testing.stored import TopicSettings


def message(seq_no: int, producer_id: str = "p") -> NewMessage:
    return NewMessage(seq_no=seq_no, created_at_ns=1, codec=1, data=b"d%d" % seq_no, uncompressed_size=2,
                      producer_id=producer_id)


def test_append_assigns_offsets_and_tracks_seq_nos() -> None:
    storage = TopicStorage("/local")
    topic = storage.create("t", TopicSettings(min_active_partitions=2))
    assert topic.path == "/local/t" and storage.topic("/local/t") is topic
    partition = topic.partition(1)
    assert [partition.append(message(s)).offset for s in (1, 5)] == [0, 1]
    assert partition.last_seq_no("p") == 5
    assert partition.is_duplicate("p", 5) and not partition.is_duplicate("p", 6)
    assert not partition.is_duplicate("", 1)  # no producer id, no deduplication
    assert [m.data for m in storage.read("t", 1, offset=1)] == [b"d5"]
    assert partition.message_at(0) is not None and partition.message_at(2) is None
    with pytest.raises(StorageError) as info:
        storage.create("/local/t", TopicSettings())
    assert (info.value.status, info.value.message) == ("ALREADY_EXISTS", "path /local/t already exists")


async def test_split_and_wait_for_offset() -> None:
    storage = TopicStorage("/local")
    topic = storage.create("t", TopicSettings())
    partition = topic.partition(0)
    waiter = asyncio.create_task(partition.wait_for_offset(0))
    await asyncio.sleep(0)
    assert not waiter.done()
    partition.append(message(1))
    assert await asyncio.wait_for(waiter, 1) is True

    ended = asyncio.create_task(partition.wait_for_offset(5))
    await asyncio.sleep(0)
    assert storage.split_partition("t", 0) == (1, 2)
    assert await asyncio.wait_for(ended, 1) is False
    assert (partition.active, partition.child_ids, topic.partition(2).parent_ids) == (False, [1, 2], [0])
    assert [p.partition_id for p in topic.active_partitions] == [1, 2]
    with pytest.raises(StorageError):
        partition.append(message(2))
    with pytest.raises(StorageError):
        storage.split_partition("t", 0)


def test_pending_writes_reach_the_log_only_when_applied() -> None:
    storage = TopicStorage("/local")
    partition = storage.create("t", TopicSettings()).partition(0)
    partition.append(message(1, "other"))
    held = PendingWrites()
    for s in (1, 2, 3):
        held.add(partition, message(s))
    assert partition.end_offset == 1
    partition.append(message(4, "other"))
    held.apply()
    assert [(m.offset, m.producer_id, m.seq_no) for m in partition.messages] == [
        (0, "other", 1), (1, "other", 4), (2, "p", 1), (3, "p", 2), (4, "p", 3)
    ]
