"""Topic administration against the local server over gRPC, and interop with the official SDK."""

from __future__ import annotations

import datetime as dt
import socket

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer


async def test_create_describe_alter_drop(driver: yta.Driver) -> None:
    await driver.topic.create_topic(
        "orders",
        min_active_partitions=3,
        retention_period=dt.timedelta(hours=6),
        retention_storage_mb=512,
        supported_codecs=[yta.Codec.RAW, yta.Codec.ZSTD],
        partition_write_speed_bytes_per_second=1 << 20,
        partition_write_burst_bytes=2 << 20,
        attributes={"_abc_slug": "billing"},
        consumers=[yta.ConsumerSettings("analytics", important=True), "audit"],
    )
    d = await driver.topic.describe_topic("orders", include_stats=True)
    assert d.path == f"{driver.database}/orders"
    assert d.active_partition_ids == [0, 1, 2]
    assert d.retention_period == dt.timedelta(hours=6)
    assert d.retention_storage_mb == 512
    assert d.supported_codecs == (yta.Codec.RAW, yta.Codec.ZSTD)
    assert d.partition_write_speed_bytes_per_second == 1 << 20
    assert d.partition_write_burst_bytes == 2 << 20
    assert d.attributes == {"_abc_slug": "billing"}
    assert [c.name for c in d.consumers] == ["analytics", "audit"]
    analytics = d.consumer("analytics")
    assert analytics is not None and analytics.important
    assert all(p.stats is not None and p.stats.end_offset == 0 for p in d.partitions)

    await driver.topic.alter_topic(
        "orders",
        set_min_active_partitions=4,
        set_retention_period=dt.timedelta(hours=1),
        set_supported_codecs=[yta.Codec.GZIP],
        alter_attributes={"_abc_slug": "payments", "_federation_account": "gold"},
        add_consumers=["fraud"],
        drop_consumers=["audit"],
        alter_consumers=[yta.AlterConsumerSettings("analytics", important=False)],
    )
    d = await driver.topic.describe_topic("orders")
    assert len(d.active_partition_ids) == 4
    assert d.retention_period == dt.timedelta(hours=1)
    assert d.supported_codecs == (yta.Codec.GZIP,)
    assert d.attributes == {"_abc_slug": "payments", "_federation_account": "gold"}
    assert sorted(c.name for c in d.consumers) == ["analytics", "fraud"]
    assert d.consumer("analytics") is not None and not d.consumer("analytics").important  # type: ignore[union-attr]

    consumer = await driver.topic.describe_consumer("orders", "fraud")
    assert consumer.consumer.name == "fraud"
    assert [p.partition_id for p in consumer.partitions] == [0, 1, 2, 3]
    assert consumer.total_lag == 0

    partition = await driver.topic.describe_partition("orders", 2, include_location=True)
    assert partition.partition_id == 2 and partition.active
    assert partition.location is not None

    await driver.topic.drop_topic("orders")
    with pytest.raises(yta.SchemeError):
        await driver.topic.describe_topic("orders")


async def test_server_errors_map_to_classes(driver: yta.Driver, topic: str) -> None:
    await driver.topic.create_topic(topic)  # already there: YDB accepts it and changes nothing
    with pytest.raises(yta.BadRequestError, match="Attribute team is not supported"):
        await driver.topic.create_topic("other", attributes={"team": "x"})
    with pytest.raises(yta.SchemeError):
        await driver.topic.drop_topic("missing")
    with pytest.raises(yta.SchemeError):
        await driver.topic.describe_consumer(topic, "nobody")
    with pytest.raises(yta.NotFoundError):
        await driver.topic.alter_topic(topic, drop_consumers=["nobody"])


async def test_commit_offset_moves_the_consumer(server: LocalTopicServer, driver: yta.Driver) -> None:
    await driver.topic.create_topic("t", consumers=["c"])
    log = server.storage
    assert log is not None
    await driver.topic.commit_offset("t", 0, "c", 0)
    consumer = await driver.topic.describe_consumer("t", "c")
    assert consumer.partitions[0].committed_offset == 0


async def test_describe_topic_retries_by_the_callers_policy(server: LocalTopicServer) -> None:
    """``describe_topic(retry=...)`` retries by the given policy instead of the driver's: one that
    outlasts the driver's budget gets through a streak of UNAVAILABLE the driver's policy gives up
    on (the keyed writer's split recovery relies on this), and ``RetryPolicy.no_retries()`` fails
    at the first."""
    fast = yta.BackoffSchedule(base=0.001, cap=0.01)
    async with yta.Driver(server.endpoint, server.database, retry=yta.RetryPolicy(max_attempts=2, fast=fast)) as driver:
        await driver.topic.create_topic("described")
        server.faults.fail_next("DescribeTopic", "UNAVAILABLE", times=5)
        with pytest.raises(yta.UnavailableError):
            await driver.topic.describe_topic("described")  # two attempts: three failures left
        patient = yta.RetryPolicy(max_attempts=4, max_elapsed=None, fast=fast)
        described = await driver.topic.describe_topic("described", retry=patient)
        assert described.path == f"{server.database}/described"
        server.faults.fail_next("DescribeTopic", "UNAVAILABLE")
        with pytest.raises(yta.UnavailableError):
            await driver.topic.describe_topic("described", retry=yta.RetryPolicy.no_retries())
        assert (await driver.topic.describe_topic("described")).path == described.path  # no failure left
        with pytest.raises(yta.InvalidArgumentError, match="retry must be a RetryPolicy"):
            await driver.topic.describe_topic("described", retry=3)  # type: ignore[arg-type]


def _closed_port_driver() -> yta.Driver:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return yta.Driver(f"grpc://127.0.0.1:{port}", "/local", discovery=False)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda t: t.create_topic("x", min_active_partitions=-1), "min_active_partitions"),
        (lambda t: t.create_topic("x", consumers=["a", "a"]), "duplicate consumer"),
        (lambda t: t.create_topic("x", supported_codecs=[0]), "codec"),
        (lambda t: t.create_topic("x", retention_period=dt.timedelta(seconds=-1)), "retention_period"),
        (lambda t: t.create_topic("x", min_active_partitions=5, max_active_partitions=2), "max_active_partitions"),
        (lambda t: t.create_topic(""), "topic path"),
        (lambda t: t.alter_topic("x", drop_consumers="a"), "drop_consumers"),
        (lambda t: t.describe_consumer("x", ""), "consumer"),
        (lambda t: t.commit_offset("x", 0, "c", -5), "offset"),
        (
            lambda t: t.create_topic(
                "x", auto_partitioning=yta.AutoPartitioningSettings(yta.AutoPartitioningStrategy.SCALE_UP, None, 150)
            ),
            "up_utilization_percent",
        ),
    ],
)
async def test_invalid_arguments_raise_before_sending(call, match: str) -> None:  # type: ignore[no-untyped-def]
    # Nothing listens on this port: reaching the network would give a transport error instead.
    async with _closed_port_driver() as driver:
        with pytest.raises(yta.InvalidArgumentError, match=match):
            await call(driver.topic)


async def test_official_sdk_and_ours_share_the_control_plane(server: LocalTopicServer, driver: yta.Driver) -> None:
    ydb_aio = pytest.importorskip("ydb.aio")

    official = ydb_aio.Driver(endpoint=server.endpoint, database=server.database)
    await official.wait(timeout=5)
    try:
        await official.topic_client.create_topic(
            "from-official", min_active_partitions=2, consumers=["c1"], retention_period=dt.timedelta(hours=2)
        )
        mine = await driver.topic.describe_topic("from-official")
        assert mine.active_partition_ids == [0, 1]
        assert [c.name for c in mine.consumers] == ["c1"]
        assert mine.retention_period == dt.timedelta(hours=2)

        await driver.topic.alter_topic("from-official", add_consumers=["c2"])
        theirs = await official.topic_client.describe_topic("from-official")
        assert sorted(c.name for c in theirs.consumers) == ["c1", "c2"]

        await driver.topic.create_topic("from-ours", min_active_partitions=3, supported_codecs=[yta.Codec.GZIP])
        theirs = await official.topic_client.describe_topic("from-ours")
        assert len(theirs.partitions) == 3
        assert [int(c) for c in theirs.supported_codecs] == [yta.Codec.GZIP]

        await official.topic_client.alter_topic("from-ours", add_consumers=["late"])
        assert [c.name for c in (await driver.topic.describe_topic("from-ours")).consumers] == ["late"]

        await official.topic_client.drop_topic("from-ours")
        with pytest.raises(yta.SchemeError):
            await driver.topic.describe_topic("from-ours")
    finally:
        await official.stop()
