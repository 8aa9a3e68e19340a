"""Keys land where other producers put them: the partitioners against reference vectors.

``tests/data/key_placement.json`` was produced by the reference implementations, not by this
SDK (its ``about`` says which): YDB's Go SDK multi-partition writer (``BoundPartitionChooser``,
ydb-platform/ydb-go-sdk internal/topic/topicmultiwriter/partitionchooser/bound.go,
pkg/xhash/murmur2.go) and the C++ SDK's producer (ydb-platform/ydb
ydb/public/sdk/cpp/src/client/topic/impl/producer.cpp ``DefaultPartitioningKeyHasher``,
``TBoundPartitionChooser``), which agreed with each other on every key and layout; and Kafka's
default partitioner as aiokafka and kafka-python compute it. 492 keys: the empty key, text,
every single byte, lengths 2..10000 (every tail length of the 8- and 4-byte blocks) and random
byte strings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.writer.partitioning import kafka_murmur2, murmur64a, partition_key

VECTORS = Path(__file__).parent.parent / "data" / "key_placement.json"


@cache
def _vectors() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(VECTORS.read_text())
    return data


def _description(
    partitions: Sequence[yta.PartitionInfo], strategy: yta.AutoPartitioningStrategy
) -> yta.TopicDescription:
    return yta.TopicDescription(
        path="/local/t",
        partitions=tuple(partitions),
        min_active_partitions=1,
        max_active_partitions=0,
        partition_count_limit=0,
        auto_partitioning=yta.AutoPartitioningSettings(strategy=strategy),
        retention_period=None,
        retention_storage_mb=0,
        supported_codecs=(),
        partition_write_speed_bytes_per_second=0,
        partition_write_burst_bytes=0,
        attributes={},
        consumers=(),
        metering_mode=yta.MeteringMode.UNSPECIFIED,
    )


def _layout(layout: dict[str, Any]) -> yta.TopicDescription:
    def bound(value: str | None) -> bytes | None:
        return None if value is None else bytes.fromhex(value)

    partitions = [
        yta.PartitionInfo(p["id"], p["active"], from_bound=bound(p["from_bound"]), to_bound=bound(p["to_bound"]))
        for p in layout["partitions"]
    ]
    return _description(partitions, yta.AutoPartitioningStrategy.SCALE_UP)


def test_the_vectors_cover_what_they_should() -> None:
    vectors = _vectors()["vectors"]
    assert len(vectors) == 492
    assert {len(bytes.fromhex(v["key"])) % 8 for v in vectors} == set(range(8))
    assert len(_vectors()["layouts"]) == 15


def test_murmur64a_and_the_partition_key_match_ydbs_producers() -> None:
    for vector in _vectors()["vectors"]:
        key = bytes.fromhex(vector["key"])
        assert murmur64a(key).to_bytes(8, "big").hex() == vector["murmur64a"], vector["key"]
        assert partition_key(key).hex() == vector["partition_key"], vector["key"]


def test_kafka_murmur2_matches_kafkas_partitioner() -> None:
    for vector in _vectors()["vectors"]:
        assert kafka_murmur2(bytes.fromhex(vector["key"])) == vector["kafka_murmur2"], vector["key"]


def test_keys_land_where_ydbs_producers_put_them_in_every_layout() -> None:
    layouts = {layout["name"]: _layout(layout) for layout in _vectors()["layouts"]}
    for vector in _vectors()["vectors"]:
        key = bytes.fromhex(vector["key"])
        for name, expected in vector["ydb"].items():
            assert yta.partition_for_key(layouts[name], key) == expected, (vector["key"], name)


def test_keys_land_where_kafkas_partitioner_puts_them() -> None:
    for count in (1, 2, 3, 4, 5, 7, 8, 10, 16, 100):
        description = _description(
            [yta.PartitionInfo(i, True) for i in range(count)], yta.AutoPartitioningStrategy.DISABLED
        )
        for vector in _vectors()["vectors"]:
            got = yta.partition_for_key(description, bytes.fromhex(vector["key"]), "kafka")
            assert got == vector["kafka"][str(count)], (vector["key"], count)


def test_the_kafka_partitioner_refuses_an_auto_partitioned_topic() -> None:
    description = _description([yta.PartitionInfo(0, True)], yta.AutoPartitioningStrategy.SCALE_UP)
    with pytest.raises(yta.InvalidArgumentError, match="fixed number of partitions"):
        yta.partition_for_key(description, "k", "kafka")


def test_a_partitioner_function_must_choose_an_active_partition() -> None:
    description = _description(
        [
            yta.PartitionInfo(0, False, child_partition_ids=(1, 2)),
            yta.PartitionInfo(1, True),
            yta.PartitionInfo(2, True),
        ],
        yta.AutoPartitioningStrategy.DISABLED,
    )
    seen: list[tuple[bytes, list[int]]] = []

    def last(key: bytes, partitions: Sequence[yta.PartitionInfo]) -> int:
        seen.append((key, [p.partition_id for p in partitions]))
        return partitions[-1].partition_id

    assert yta.partition_for_key(description, "k", last) == 2
    assert seen == [(b"k", [1, 2])]
    with pytest.raises(yta.InvalidArgumentError, match="not one of the active partitions"):
        yta.partition_for_key(description, "k", lambda key, partitions: 0)
    with pytest.raises(yta.InvalidArgumentError, match="partitioner must be"):
        yta.partition_for_key(description, "k", "md5")  # type: ignore[arg-type]


@pytest.mark.timeout(60)
async def test_a_keyed_writer_stores_keys_where_the_vectors_say(server: LocalTopicServer, driver: yta.Driver) -> None:
    """Over the wire: a topic of 4 partitions (YDB's initial ranges) and one of 5 with Kafka's
    partitioner; every stored message is in the vectors' partition, and the default partitioner's
    messages carry their partition key."""
    vectors = [v for v in _vectors()["vectors"] if len(v["key"]) <= 64][:60]
    await driver.topic.create_topic("ydb-keys", min_active_partitions=4)
    await driver.topic.create_topic("kafka-keys", min_active_partitions=5)
    async with (
        driver.topic.keyed_writer("ydb-keys", producer_id="p") as ydb_writer,
        driver.topic.keyed_writer("kafka-keys", producer_id="p", partitioner="kafka") as kafka_writer,
    ):
        for vector in vectors:
            key = bytes.fromhex(vector["key"])
            await ydb_writer.write(vector["key"].encode(), key=key)
            await kafka_writer.write(vector["key"].encode(), key=key)

    def placed(topic: str) -> dict[str, tuple[int, dict[str, bytes]]]:
        """key (hex) -> (partition, metadata) of each stored message, whose payload is its key."""
        return {
            m.data.decode(): (p.partition_id, dict(m.metadata))
            for p in server.storage.topic(topic).partitions
            for m in p.messages
        }

    ydb, kafka = placed("ydb-keys"), placed("kafka-keys")
    assert {key: pid for key, (pid, _) in ydb.items()} == {v["key"]: v["ydb"]["initial_4"] for v in vectors}
    assert {key: pid for key, (pid, _) in kafka.items()} == {v["key"]: v["kafka"]["5"] for v in vectors}
    assert {key: md[yta.PARTITION_KEY_METADATA].hex() for key, (_, md) in ydb.items()} == {
        v["key"]: v["partition_key"] for v in vectors
    }
    assert all(yta.PARTITION_KEY_METADATA not in md for _, md in kafka.values())  # Kafka's sends none
