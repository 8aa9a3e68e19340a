"""A writer that waits for its topic (``wait_for_topic``): started before the topic exists, it
buffers, and writes everything once the topic is created; the bound passing, or a close, ends
the wait with ``TopicNotFoundError``; without the option a missing topic fails at once.

What YDB answers (files of github.com/ydb-platform/ydb):

- a write session naming a path that does not exist: SCHEME_ERROR with issue code
  UNKNOWN_TOPIC (500017), "You do not have access permissions or the '<path>' does not exist"
  (``ydb/services/persqueue_v1/actors/write_session_actor``: ``ErrorCodeFromDescriberStatus``
  maps the describer's NOT_FOUND to UNKNOWN_TOPIC, with ``NDescriber::Description`` from
  ``ydb/core/persqueue/public/describer``); before the describer, "no path '<path>', Marker#
  PQ15" (``persqueue_v1/actors/persqueue_utils.cpp``, ``ProcessMetaCacheTopicResponse``);
- DescribeTopic of such a path: SCHEME_ERROR, the same words (``ydb/core/persqueue/public/
  schema/describe_operation.cpp``, issue code ACCESS_DENIED);
- a path that is not a topic (a directory): SCHEME_ERROR, "The '<path>' path is not a topic"
  (before: "item '<path>' is not a topic, Marker# PQ13"), at the write session and at
  DescribeTopic alike;
- a partition id the topic does not have: BAD_REQUEST, "Prefered partition N is not exists or
  inactive." (``ydb/core/persqueue/writer/partition_chooser_impl__old_chooser_actor.h``); before
  the partition chooser, SCHEME_ERROR "no partition N in topic '<path>', Marker# PQ4".

Only the first two are "the topic does not exist"; the others fail at once, option or not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import stored, stored_by_partition, stored_fields
from .._polling import eventually

pytestmark = pytest.mark.timeout(30)


def _waiting(writer: yta.TopicWriter) -> bool:
    """The writer was told its topic does not exist and is waiting for it."""
    return isinstance(writer.last_error, yta.TopicNotFoundError) and writer.init_info is None


# --- the topic appears while the writer waits ------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [{}, {"producer_id": "orders"}, {"producer_id": "direct", "partition_id": 0, "direct_write": True}],
    ids=["random-producer-id", "producer-id", "direct-write"],
)
async def test_a_writer_started_before_its_topic_stores_every_message_once(
    server: LocalTopicServer, driver: yta.Driver, topic_name: str, options: dict[str, Any]
) -> None:
    writer = driver.topic.writer(topic_name, wait_for_topic=20, **options)
    await writer.write([b"before-0", b"before-1"])  # buffered: nothing waits for the topic
    early = await writer.write_with_ack_future(b"before-2")
    await eventually(lambda: _waiting(writer), "the writer waits for its topic")
    await asyncio.sleep(0.2)  # a few tries more, each answered "does not exist"
    assert _waiting(writer) and not early.done() and writer.buffered_messages == 3
    assert writer.connection_state is not yta.ConnectionState.FAILED

    await driver.topic.create_topic(topic_name)
    await writer.write(b"after-0")
    late = await writer.write_with_ack(b"after-1")
    await writer.close()

    assert await early == yta.Written(0, 2, 3)
    assert late == yta.Written(0, 4, 5)
    assert stored_fields(server, topic_name, "data", "seq_no") == [
        (b"before-0", 1), (b"before-1", 2), (b"before-2", 3), (b"after-0", 4), (b"after-1", 5),
    ]


async def test_a_keyed_writer_started_before_its_topic_places_every_message_once(
    server: LocalTopicServer, driver: yta.Driver, topic_name: str
) -> None:
    keys = [f"user-{i}" for i in range(8)]
    async with driver.topic.keyed_writer(topic_name, producer_id="keyed", wait_for_topic=20) as writer:
        # Entering returned although the topic does not exist: the keyed writer waits in the background.
        before = [await writer.write_with_ack_future(f"{key}/0", key=key) for key in keys]
        await writer.write([f"{key}/1" for key in keys[:4]], key="user-0")
        await asyncio.sleep(0.3)
        assert writer.buffered_messages == len(keys) + 4 and not any(f.done() for f in before)
        assert writer.partition_writers == {} and writer.connection_state is yta.ConnectionState.CONNECTING

        await driver.topic.create_topic(topic_name, min_active_partitions=3)
        for key in keys:
            await writer.write(f"{key}/2", key=key)
        await writer.flush(timeout=10)
        description = await driver.topic.describe_topic(topic_name)

    results = [await f for f in before]
    assert all(isinstance(r, yta.Written) for r in results)
    by_partition = {pid: [m.data.decode() for m in messages] for pid, messages in stored_by_partition(
        server, topic_name).items()}
    everything = [data for messages in by_partition.values() for data in messages]
    assert sorted(everything) == sorted(
        [f"{key}/0" for key in keys] + [f"{key}/1" for key in keys[:4]] + [f"{key}/2" for key in keys]
    )  # each once
    for key in keys:
        pid = yta.partition_for_key(description, key.encode(), "ydb")
        own = [data for data in by_partition[pid] if data.startswith(f"{key}/")]
        assert own == sorted(own), f"{key}'s messages out of order: {own}"
    assert [d for d in by_partition[yta.partition_for_key(description, b"user-0", "ydb")] if "/1" in d] == [
        f"{key}/1" for key in keys[:4]
    ]  # the list written under one key stays together and in order


async def test_describe_topic_waits_for_a_topic_created_meanwhile(driver: yta.Driver, topic_name: str) -> None:
    """As Kafka's ``partitionsFor`` waits for the topic's metadata up to ``max.block.ms``."""
    waiting = asyncio.ensure_future(driver.topic.describe_topic(topic_name, wait_for_topic=20))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await driver.topic.create_topic(topic_name, min_active_partitions=2)
    description = await asyncio.wait_for(waiting, 10)
    assert [p.partition_id for p in description.partitions] == [0, 1]
    with pytest.raises(yta.TopicNotFoundError, match="waited for it"):
        await driver.topic.describe_topic("never-created", wait_for_topic=0.3)
    with pytest.raises(yta.OperationTimeoutError, match="does not exist yet"):
        await driver.topic.describe_topic("never-created", wait_for_topic=20, timeout=0.3)


# --- the wait ends ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["writer", "keyed"])
async def test_the_bound_passing_fails_the_writer_and_every_pending_write(
    driver: yta.Driver, topic_name: str, kind: str
) -> None:
    started = time.monotonic()
    writer: yta.TopicWriter | yta.KeyedWriter
    if kind == "writer":
        writer = driver.topic.writer(topic_name, wait_for_topic=0.6)
        pending = [await writer.write_with_ack_future(payload) for payload in (b"a", b"b")]
        await writer.write(b"c")
    else:
        writer = driver.topic.keyed_writer(topic_name, wait_for_topic=0.6)
        pending = [await writer.write_with_ack_future(payload, key="k") for payload in (b"a", b"b")]
        await writer.write(b"c", key="other")
    done, _ = await asyncio.wait(pending, timeout=10)
    waited = time.monotonic() - started
    assert len(done) == 2
    assert waited >= 0.6, "gave up before the bound"
    errors = [f.exception() for f in pending]
    error = errors[0]
    assert isinstance(error, yta.TopicNotFoundError) and isinstance(error, yta.SchemeError)
    assert f"topic /local/{topic_name} does not exist" in str(error) and "waited for it" in str(error)
    assert all(type(e) is type(error) and str(e) == str(error) for e in errors)
    with pytest.raises(yta.TopicNotFoundError):
        await writer.flush()
    with pytest.raises(yta.TopicNotFoundError):
        if isinstance(writer, yta.KeyedWriter):
            await writer.write(b"d", key="k")
        else:
            await writer.write(b"d")
    with pytest.raises(yta.TopicNotFoundError):
        await writer.close()


@pytest.mark.parametrize("kind", ["writer", "keyed"])
async def test_closing_a_waiting_writer_ends_the_wait_at_once(driver: yta.Driver, topic_name: str, kind: str) -> None:
    writer: yta.TopicWriter | yta.KeyedWriter
    if kind == "writer":
        writer = driver.topic.writer(topic_name, wait_for_topic=60)
        pending = await writer.write_with_ack_future(b"never written")
        await eventually(lambda: _waiting(writer), "the writer waits for its topic")  # type: ignore[arg-type]
    else:
        writer = driver.topic.keyed_writer(topic_name, wait_for_topic=60)
        pending = await writer.write_with_ack_future(b"never written", key="k")
    await asyncio.sleep(0.2)
    started = time.monotonic()
    with pytest.raises(yta.TopicNotFoundError, match="closed after waiting"):
        await asyncio.wait_for(writer.close(), 10)
    assert time.monotonic() - started < 3.0, "close waited for the topic"
    with pytest.raises(yta.TopicNotFoundError, match="closed after waiting"):
        await pending

    # Nothing written: closing a waiting writer loses nothing, so it just closes.
    idle: yta.TopicWriter | yta.KeyedWriter
    if kind == "writer":
        idle = driver.topic.writer(topic_name, wait_for_topic=60)
        await idle.open()
        await eventually(lambda: _waiting(idle), "the writer waits for its topic")  # type: ignore[arg-type]
    else:
        idle = driver.topic.keyed_writer(topic_name, wait_for_topic=60)
        await idle.open()
    started = time.monotonic()
    await asyncio.wait_for(idle.close(), 10)
    assert time.monotonic() - started < 3.0


@pytest.mark.parametrize("kind", ["writer", "keyed"])
async def test_wait_init_and_flush_keep_their_timeouts_while_the_writer_waits(
    server: LocalTopicServer, driver: yta.Driver, topic_name: str, kind: str
) -> None:
    writer: yta.TopicWriter | yta.KeyedWriter
    if kind == "writer":
        writer = driver.topic.writer(topic_name, producer_id="p", wait_for_topic=20)
        await writer.write(b"x")
    else:
        writer = driver.topic.keyed_writer(topic_name, producer_id="p", wait_for_topic=20)
        await writer.write(b"x", key="k")
    with pytest.raises(yta.OperationTimeoutError, match=r"did not connect within 0\.2s"):
        await writer.wait_init(timeout=0.2)
    with pytest.raises(yta.OperationTimeoutError, match=r"flush timed out after 0\.2s"):
        await writer.flush(timeout=0.2)
    assert writer.failure is None
    await driver.topic.create_topic(topic_name)
    await writer.wait_init(timeout=10)
    await writer.flush(timeout=10)
    await writer.close()
    assert [m.data for m in stored(server, topic_name)] == [b"x"]


# --- what is not waited for ------------------------------------------------------------------------


async def test_without_the_option_a_missing_topic_fails_at_once(driver: yta.Driver, topic_name: str) -> None:
    writer = driver.topic.writer(topic_name, producer_id="p")
    pending = await writer.write_with_ack_future(b"x")
    started = time.monotonic()
    with pytest.raises(yta.TopicNotFoundError, match="does not exist"):
        await asyncio.wait_for(pending, 10)
    assert time.monotonic() - started < 3.0 and writer.reconnects == 0
    with pytest.raises(yta.TopicNotFoundError):
        await writer.close()

    keyed = driver.topic.keyed_writer(topic_name, producer_id="k")
    with pytest.raises(yta.TopicNotFoundError):
        await asyncio.wait_for(keyed.write(b"x", key="k"), 3.0)
    await keyed.close()


async def test_only_a_missing_topic_is_waited_for(driver: yta.Driver, topic_name: str) -> None:
    """A path that is not a topic and a partition the topic does not have fail at once, as
    without the option (see the module's docstring for what YDB answers to each)."""
    await driver.topic.create_topic(f"{topic_name}/inner")
    for path, partition_id in ((topic_name, None), (f"{topic_name}/inner", 5)):
        writer = driver.topic.writer(path, partition_id=partition_id, wait_for_topic=20)
        pending = await writer.write_with_ack_future(b"x")
        started = time.monotonic()
        with pytest.raises(yta.ServerError) as caught:
            await asyncio.wait_for(pending, 10)
        assert time.monotonic() - started < 3.0 and writer.reconnects == 0
        assert not isinstance(caught.value, yta.TopicNotFoundError)
        assert isinstance(caught.value, yta.SchemeError if partition_id is None else yta.BadRequestError)
        with pytest.raises(yta.ServerError):
            await writer.close()
    keyed = driver.topic.keyed_writer(topic_name, wait_for_topic=20)
    with pytest.raises(yta.SchemeError, match="path is not a topic") as refused:
        await asyncio.wait_for(keyed.open(), 3.0)
    assert not isinstance(refused.value, yta.TopicNotFoundError)
    await keyed.close()
    with pytest.raises(yta.SchemeError, match="path is not a topic"):
        await asyncio.wait_for(driver.topic.describe_topic(topic_name, wait_for_topic=20), 3.0)


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "5", True])
async def test_bad_values_fail_at_the_call(driver: yta.Driver, topic_name: str, value: Any) -> None:
    with pytest.raises(yta.InvalidArgumentError, match="wait_for_topic must be None"):
        driver.topic.writer(topic_name, wait_for_topic=value)
    with pytest.raises(yta.InvalidArgumentError, match="wait_for_topic must be None"):
        driver.topic.keyed_writer(topic_name, wait_for_topic=value)
    with pytest.raises(yta.InvalidArgumentError, match="wait_for_topic must be None"):
        await driver.topic.describe_topic(topic_name, wait_for_topic=value)


async def test_transactional_writers_do_not_wait(driver: yta.Driver, topic_name: str) -> None:
    """Refused at the call: a transaction waiting for a topic would be held open meanwhile."""
    tx = driver.query.transaction()
    with pytest.raises(yta.InvalidArgumentError, match="transactional writer does not wait"):
        driver.topic.tx_writer(tx, topic_name, wait_for_topic=5)
    with pytest.raises(yta.InvalidArgumentError, match="transactional writer does not wait"):
        driver.topic.keyed_tx_writer(tx, topic_name, producer_id="p", wait_for_topic=5)


async def test_each_try_is_logged_at_debug_and_the_give_up_as_an_error(
    driver: yta.Driver, topic_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ydb_topic_async.writer")
    writer = driver.topic.writer(topic_name, wait_for_topic=0.3)
    pending = await writer.write_with_ack_future(b"x")
    with pytest.raises(yta.TopicNotFoundError):
        await asyncio.wait_for(pending, 10)
    with pytest.raises(yta.TopicNotFoundError):
        await writer.close()
    ours = [r for r in caplog.records if r.name == "ydb_topic_async.writer"]
    tries = [r for r in ours if "the topic does not exist yet" in r.getMessage()]
    assert len(tries) >= 2 and {r.levelno for r in tries} == {logging.DEBUG}
    gave_up = [r for r in ours if r.levelno >= logging.WARNING]
    assert len(gave_up) == 1 and gave_up[0].levelno == logging.ERROR
    assert "did not appear in the" in gave_up[0].getMessage() and "1 unacknowledged" in gave_up[0].getMessage()
