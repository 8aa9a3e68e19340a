"""``MessageBatch.columns``: a batch's fields one list per field, without a ``TopicMessage`` each."""

from __future__ import annotations

import datetime as dt
import gc

import pytest

import ydb_topic_async as yta

from .._helpers import fill

pytestmark = pytest.mark.timeout(60)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _live_messages() -> int:
    gc.collect()
    return sum(isinstance(o, yta.TopicMessage) for o in gc.get_objects())


def _micros(value: dt.datetime) -> int:
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def _as_columns(messages: list[yta.TopicMessage]) -> dict[str, list[object]]:
    """What ``columns`` must hold, field by field, from the messages themselves."""
    return {
        "offset": [m.offset for m in messages],
        "seq_no": [m.seq_no for m in messages],
        "producer_id": [m.producer_id for m in messages],
        "message_group_id": [m.message_group_id for m in messages],
        "created_at_us": [_micros(m.created_at) for m in messages],
        "written_at_us": [_micros(m.written_at) for m in messages],
        "data": [m.data for m in messages],
    }


def _fields(columns: yta.MessageColumns) -> dict[str, list[object]]:
    return {name: list(getattr(columns, name)) for name in _as_columns([])}


async def _one_batch(driver: yta.Driver, topic: str, count: int) -> yta.MessageBatch:
    selector = yta.TopicSelector(topic, start_offsets={0: 0})
    async with driver.topic.reader(selector, consumer=None) as reader:
        batch = await reader.receive_batch(timeout=10)
        assert len(batch) == count, "the test needs every message in one batch"
        return batch


async def test_columns_hold_every_field_of_every_message_without_building_them(
    driver: yta.Driver, topic: str
) -> None:
    """Three producers' runs in one batch (the second compressed, the third with metadata on some
    messages): each column holds what the messages built afterwards say, payloads decoded."""
    await fill(driver, topic, [b"a%d" % i for i in range(40)], producer_id="alpha")
    await fill(driver, topic, [b"b%d" % i * 50 for i in range(30)], producer_id="beta", codec=yta.Codec.ZSTD)
    await fill(driver, topic, [b"c%d" % i for i in range(20)], producer_id="gamma", metadata={"k": b"v"})
    await fill(driver, topic, [b"d%d" % i for i in range(10)], producer_id="alpha")
    batch = await _one_batch(driver, topic, 100)
    assert _live_messages() == 0

    columns = batch.columns()
    assert _live_messages() == 0  # no TopicMessage was built for them
    assert len(columns) == 100
    messages = batch.messages
    assert _fields(columns) == _as_columns(messages)
    assert columns.producer_id == ["alpha"] * 40 + ["beta"] * 30 + ["gamma"] * 20 + ["alpha"] * 10
    assert columns.data[40:70] == [b"b%d" % i * 50 for i in range(30)]
    assert columns.metadata == [m.metadata_items for m in messages]
    assert columns.metadata[70:90] == [{"k": b"v"}] * 20 and columns.metadata[:70] == [{}] * 70
    assert batch.columns() == columns  # the same from the messages once they are built


async def test_columns_say_no_metadata_when_no_message_has_any(driver: yta.Driver, topic: str) -> None:
    await fill(driver, topic, [b"m%d" % i for i in range(25)])
    batch = await _one_batch(driver, topic, 25)
    columns = batch.columns()
    assert columns.metadata is None
    assert columns.offset == list(range(25)) and columns.seq_no == list(range(1, 26))
    assert _fields(columns) == _as_columns(list(batch))
