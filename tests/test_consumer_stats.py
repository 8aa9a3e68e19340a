"""Consumer statistics, locations, availability periods and metrics levels over the local server.

What YDB reports: per partition the read and commit offsets, the reading session (id, reader
name, node, when it took the partition), the last read time, the read, write and commit time
lags and the bytes read per minute, hour and day; per consumer the earliest last read time and
the largest lags (ydb-platform/ydb:
ydb/services/persqueue_v1/actors/schema/topic/describe_consumer.cpp, which folds the partitions'
stats into the consumer's with ``UpdateProtoTime``, and whose DescribeTopic counterpart also sums
the bytes read with ``AddWindowsStat``). ``metrics_level`` is set on create, set or reset on alter
(ydb/core/persqueue/public/schema: ``SetMetricsLevel``/``ClearMetricsLevel``).
"""

from __future__ import annotations

import datetime as dt

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer

pytestmark = pytest.mark.timeout(30)


async def _read(reader: yta.TopicReader, count: int) -> list[yta.TopicMessage]:
    messages: list[yta.TopicMessage] = []
    while len(messages) < count:
        messages.extend(await reader.receive_batch(timeout=10))
    return messages


async def test_describe_consumer_reports_every_statistic_with_its_unit(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    await driver.topic.create_topic("stats", min_active_partitions=2, consumers=["c"])
    async with driver.topic.writer("stats", partition_id=0, producer_id="p") as writer:
        await writer.write_with_ack([b"a" * 10, b"b" * 10, b"c" * 10])
    started = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
    async with driver.topic.reader("stats", consumer="c", reader_name="stats-reader") as reader:
        messages = await _read(reader, 3)
        await reader.commit_with_ack(messages[0], timeout=10)
        server.advance_time(120)
        described = await driver.topic.describe_consumer("stats", "c", include_location=True)

        read, unread = described.partitions
        assert (read.partition_id, read.start_offset, read.end_offset) == (0, 0, 3)
        assert (read.committed_offset, read.last_read_offset, read.lag) == (1, 3, 2)
        assert read.read_session_id and read.reader_name == "stats-reader"
        assert read.connection_node_id == 1
        assert read.partition_read_session_create_time is not None
        assert read.partition_read_session_create_time >= started
        assert read.last_read_time is not None and read.last_read_time >= started
        # Two minutes later the first uncommitted message has waited that long.
        assert read.time_lag is not None and read.time_lag >= dt.timedelta(seconds=120)
        assert read.time_lag == read.max_committed_time_lag
        assert isinstance(read.max_read_time_lag, dt.timedelta)
        assert isinstance(read.max_write_time_lag, dt.timedelta)
        # The 30 bytes were read more than a minute ago (by the server's clock), within the hour.
        assert (read.bytes_read_per_minute, read.bytes_read_per_hour, read.bytes_read_per_day) == (0, 30, 30)
        assert read.partition_stats is not None and read.partition_stats.store_size_bytes == 30
        assert read.location == yta.PartitionLocation(node_id=1, generation=1)
        assert (unread.lag, unread.bytes_read_per_day, unread.last_read_time) == (0, 0, None)

        stats = described.stats
        assert stats is not None
        assert stats.min_partitions_last_read_time is None  # partition 1 was never read
        assert stats.max_committed_time_lag == read.max_committed_time_lag
        assert stats.max_read_time_lag == max(read.max_read_time_lag, unread.max_read_time_lag)  # type: ignore[type-var]
        assert stats.bytes_read_per_day == 0  # DescribeConsumer leaves bytes to the partitions

    topic = await driver.topic.describe_topic("stats", include_stats=True)
    consumer = topic.consumer("c")
    assert consumer is not None and consumer.stats is not None
    assert (consumer.stats.bytes_read_per_hour, consumer.stats.bytes_read_per_day) == (30, 30)
    assert consumer == yta.ConsumerSettings("c", attributes={"_service_type": "data-streams"})  # stats do not compare

    bare = await driver.topic.describe_consumer("stats", "c", include_stats=False)
    assert bare.stats is None
    assert [(p.committed_offset, p.last_read_time, p.location) for p in bare.partitions] == [(0, None, None)] * 2


async def test_availability_period_is_set_and_reset_by_alter(driver: yta.Driver) -> None:
    await driver.topic.create_topic("kept", consumers=["c"])
    await driver.topic.alter_topic(
        "kept", alter_consumers=[yta.AlterConsumerSettings("c", availability_period=dt.timedelta(hours=3))]
    )
    assert (await driver.topic.describe_consumer("kept", "c")).consumer.availability_period == dt.timedelta(hours=3)
    reset = yta.AlterConsumerSettings("c", reset_availability_period=True)
    await driver.topic.alter_topic("kept", alter_consumers=[reset])
    assert (await driver.topic.describe_consumer("kept", "c")).consumer.availability_period is None
    both = yta.AlterConsumerSettings("c", availability_period=dt.timedelta(hours=1), reset_availability_period=True)
    with pytest.raises(yta.InvalidArgumentError, match="exclude each other"):
        await driver.topic.alter_topic("kept", alter_consumers=[both])
    with pytest.raises(yta.InvalidArgumentError, match="must not be negative"):
        await driver.topic.alter_topic(
            "kept", alter_consumers=[yta.AlterConsumerSettings("c", availability_period=dt.timedelta(hours=-1))]
        )


async def test_metrics_level_is_set_on_create_and_set_or_reset_on_alter(driver: yta.Driver) -> None:
    await driver.topic.create_topic("plain")
    assert (await driver.topic.describe_topic("plain")).metrics_level is None
    await driver.topic.create_topic("detailed", metrics_level=yta.MetricsLevel.DETAILED)
    assert (await driver.topic.describe_topic("detailed")).metrics_level == yta.MetricsLevel.DETAILED
    await driver.topic.alter_topic("detailed", set_metrics_level=yta.MetricsLevel.OBJECT)
    assert (await driver.topic.describe_topic("detailed")).metrics_level == 2
    await driver.topic.alter_topic("detailed", set_retention_storage_mb=10)  # other changes keep it
    assert (await driver.topic.describe_topic("detailed")).metrics_level == 2
    await driver.topic.alter_topic("detailed", reset_metrics_level=True)
    assert (await driver.topic.describe_topic("detailed")).metrics_level is None
    with pytest.raises(yta.InvalidArgumentError, match="exclude each other"):
        await driver.topic.alter_topic("detailed", set_metrics_level=1, reset_metrics_level=True)
    with pytest.raises(yta.InvalidArgumentError, match="metrics_level"):
        await driver.topic.create_topic("bad", metrics_level=-1)
    with pytest.raises(yta.InvalidArgumentError, match="set_metrics_level"):
        await driver.topic.alter_topic("detailed", set_metrics_level=2**32)


async def test_the_official_sdk_reads_the_same_statistics(
    server: LocalTopicServer, driver: yta.Driver, official: object
) -> None:
    """The official ``ydb`` SDK's describe_consumer, against the same local server, sees what ours does."""
    await driver.topic.create_topic("shared", consumers=["c"])
    async with driver.topic.writer("shared", producer_id="p") as writer:
        await writer.write_with_ack([b"x" * 7, b"y" * 7])
    async with driver.topic.reader("shared", consumer="c") as reader:
        for message in await _read(reader, 2):
            await reader.commit_with_ack(message, timeout=10)
        ours = (await driver.topic.describe_consumer("shared", "c")).partitions[0]
        theirs = (await official.topic_client.describe_consumer("shared", "c", include_stats=True)).partitions[0]  # type: ignore[attr-defined]
    stats = theirs.partition_consumer_stats
    assert (stats.committed_offset, stats.last_read_offset) == (ours.committed_offset, ours.last_read_offset) == (2, 2)
    assert stats.read_session_id == ours.read_session_id
    assert stats.bytes_read.per_minute == ours.bytes_read_per_minute == 14
    assert ours.last_read_time is not None
    assert stats.last_read_time == ours.last_read_time.replace(tzinfo=None)  # the official SDK's are naive UTC
    assert stats.max_committed_time_lag == ours.max_committed_time_lag
