"""TopicWriter against the local server: results, numbering, input forms, codecs, errors, close."""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import threading
import time
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async import _codecs

from .._codec_probes import use_codec_threads
from .._helpers import stored, stored_data
from .._polling import eventually
from .._streams import record_requests

pytestmark = pytest.mark.timeout(30)


async def test_write_with_ack_reports_partition_offset_and_seq_no(driver: yta.Driver, topic: str) -> None:
    async with driver.topic.writer(topic, producer_id="p") as writer:
        first = await writer.write_with_ack(b"a")
        rest = await writer.write_with_ack([b"b", "c", yta.Message(b"d")])
    assert first == yta.Written(partition_id=0, offset=0, seq_no=1)
    assert rest == [
        yta.Written(partition_id=0, offset=1, seq_no=2),
        yta.Written(partition_id=0, offset=2, seq_no=3),
        yta.Written(partition_id=0, offset=3, seq_no=4),
    ]


async def test_the_handshake_names_the_producer_as_its_message_group(
    server: Any, driver: yta.Driver, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older YDB versions refuse a producer id without a message group or partition; the official
    SDKs send ``message_group_id = producer_id``, and so does this writer."""
    sent = record_requests(monkeypatch, "init_request")
    async with driver.topic.writer(topic, producer_id="p") as writer:
        await writer.write_with_ack(b"x")
    async with driver.topic.writer(topic, producer_id="q", partition_id=0) as writer:
        await writer.write_with_ack(b"y")
    inits = [request.init_request for request in sent]
    assert [(i.producer_id, i.WhichOneof("partitioning"), i.message_group_id) for i in inits] == [
        ("p", "message_group_id", "p"), ("q", "partition_id", "")
    ]


async def test_wait_init_describes_the_session(driver: yta.Driver, topic: str) -> None:
    async with driver.topic.writer(topic, producer_id="fresh") as writer:
        info = await writer.wait_init(timeout=5)
        assert info.last_seq_no == 0
        assert info.partition_id == 0
        assert info.supported_codecs == ()
        assert info.session_id
        assert writer.init_info is info


async def test_write_returns_before_acks_and_flush_waits_for_them(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    async with driver.topic.writer(topic, producer_id="p") as writer:
        futures = await writer.write_with_ack_future([b"%d" % i for i in range(50)])
        await writer.write([b"tail-1", b"tail-2"])
        await writer.flush(timeout=5)
        assert all(f.done() for f in futures)
        assert writer.buffered_messages == 0
        assert writer.buffered_bytes == 0
    assert stored_data(server, topic) == [b"%d" % i for i in range(50)] + [b"tail-1", b"tail-2"]
    assert [m.seq_no for m in stored(server, topic)] == list(range(1, 53))


async def test_seq_no_continues_across_writer_restarts(server: Any, driver: yta.Driver, topic: str) -> None:
    async with driver.topic.writer(topic, producer_id="restart") as writer:
        await writer.write([b"1", b"2", b"3"])
    async with driver.topic.writer(topic, producer_id="restart") as writer:
        # Written before the handshake: numbered after the stored last seq_no once it arrives.
        early = await writer.write_with_ack_future([b"4", b"5"])
        info = await writer.wait_init(timeout=5)
        assert info.last_seq_no == 3
        late = await writer.write_with_ack(b"6")
        assert [(await f).seq_no for f in early] == [4, 5]
        assert late == yta.Written(partition_id=0, offset=5, seq_no=6)
    assert [(m.seq_no, m.data) for m in stored(server, topic)] == [
        (1, b"1"), (2, b"2"), (3, b"3"), (4, b"4"), (5, b"5"), (6, b"6")
    ]


async def test_manual_seq_no_must_increase_and_duplicates_are_skipped(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    async with driver.topic.writer(topic, producer_id="manual", auto_seqno=False) as writer:
        assert await writer.write_with_ack(yta.Message(b"ten", seq_no=10)) == yta.Written(0, 0, 10)
        for bad in (10, 9):
            with pytest.raises(yta.InvalidArgumentError, match="strictly increase"):
                await writer.write(yta.Message(b"x", seq_no=bad))
        with pytest.raises(yta.InvalidArgumentError, match="strictly increase"):
            # One bad message rejects the whole call.
            await writer.write([yta.Message(b"ok", seq_no=20), yta.Message(b"bad", seq_no=15)])
        with pytest.raises(yta.InvalidArgumentError, match="explicit seq_no"):
            await writer.write(b"no number")
        assert writer.buffered_messages == 0
        assert await writer.write_with_ack(yta.Message(b"gap", seq_no=12)) == yta.Written(0, 1, 12)
    async with driver.topic.writer(topic, producer_id="manual", auto_seqno=False) as writer:
        assert (await writer.wait_init()).last_seq_no == 12
        results = await writer.write_with_ack([yta.Message(b"old", seq_no=11), yta.Message(b"new", seq_no=13)])
        assert results == [yta.Skipped(0, 11), yta.Written(0, 2, 13)]
    assert [(m.seq_no, m.data) for m in stored(server, topic)] == [(10, b"ten"), (12, b"gap"), (13, b"new")]


async def test_mixing_auto_and_manual_numbering_is_rejected(driver: yta.Driver, topic: str) -> None:
    async with driver.topic.writer(topic) as writer:
        with pytest.raises(yta.InvalidArgumentError, match="auto_seqno"):
            await writer.write(yta.Message(b"x", seq_no=5))
        assert writer.buffered_messages == 0


async def test_metadata_created_at_and_session_metadata_are_stored(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    created = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)
    metadata: dict[str, str | bytes] = {"k": "v", "bin": b"\x00\x01"}
    async with driver.topic.writer(topic, producer_id="meta", session_metadata={"app": "billing"}) as writer:
        await writer.write_with_ack(
            [
                yta.Message("привет", metadata=metadata, created_at=created),
                yta.Message(b"pairs", metadata=[("a", "1"), ("b", "2")]),
            ]
        )
    first, second = stored(server, topic)
    assert first.data == "привет".encode()
    assert first.metadata == (("k", b"v"), ("bin", b"\x00\x01"))
    assert first.created_at_ns == 1714979289_123000000  # 2024-05-06T07:08:09.123Z: YDB keeps milliseconds
    assert second.metadata == (("a", b"1"), ("b", b"2"))
    assert abs(second.created_at_ns - time.time_ns()) < 30 * 10**9
    assert dict(first.write_session_meta) == {"app": "billing"}


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        ([("k", "1"), ("k", "2")], "duplicate metadata key"),
        ({"k": "x" * 4096}, "4096"),
        ({"ключ": "я" * 2046}, "4096"),  # 2,050 characters, but 4,100 bytes: YDB counts bytes
        ({"": "v"}, "non-empty"),
        ({"k": 5}, "bytes or str"),
    ],
)
async def test_bad_metadata_is_rejected_at_the_call(driver: yta.Driver, topic: str, metadata: Any, match: str) -> None:
    async with driver.topic.writer(topic) as writer:
        with pytest.raises(yta.InvalidArgumentError, match=match):
            await writer.write([b"fine", yta.Message(b"x", metadata=metadata)])
        assert writer.buffered_messages == 0
        # Exactly at the limit is fine.
        await writer.write_with_ack(yta.Message(b"x", metadata={"k": "v" * 4095}))


async def test_bad_input_types_are_rejected(driver: yta.Driver, topic: str) -> None:
    async with driver.topic.writer(topic) as writer:
        with pytest.raises(yta.InvalidArgumentError):
            await writer.write(123)  # type: ignore[arg-type]
        with pytest.raises(yta.InvalidArgumentError):
            await writer.write([b"ok", None])  # type: ignore[list-item]
        with pytest.raises(yta.InvalidArgumentError):
            await writer.write(bytearray(b"not bytes"))  # type: ignore[arg-type]
        with pytest.raises(yta.InvalidArgumentError):
            await writer.write({b"a set"})  # type: ignore[arg-type]
        assert await writer.write_with_ack([]) == []
        assert writer.buffered_messages == 0


async def test_any_sequence_of_messages_is_one_call(server: Any, driver: yta.Driver, topic: str) -> None:
    """A list, a tuple or another sequence (a deque, say) of messages, each a list of results."""
    async with driver.topic.writer(topic) as writer:
        results = await writer.write_with_ack(collections.deque([b"a", "b"]))
        results += await writer.write_with_ack((yta.Message("c"),))
    assert [type(r) for r in results] == [yta.Written] * 3
    assert stored_data(server, topic) == [b"a", b"b", b"c"]


async def test_a_message_too_large_for_any_request_raises_at_write(driver: yta.Driver, topic: str) -> None:
    async with driver.topic.writer(topic, max_request_size=64 * 1024) as writer:
        with pytest.raises(yta.MessageTooLargeError):
            await writer.write(b"x" * (64 * 1024))
        with pytest.raises(yta.MessageTooLargeError):
            await writer.write([b"small", yta.Message(b"y" * 70_000)])
        assert writer.buffered_messages == 0
        await writer.write_with_ack(b"x" * 60_000)


async def test_large_batches_are_split_into_requests_under_the_limit(
    server: Any, driver: yta.Driver, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = record_requests(monkeypatch, "write_request")
    limit = 100 * 1024
    payloads = [bytes([i]) * 9_000 for i in range(60)]
    async with driver.topic.writer(topic, producer_id="split", max_request_size=limit) as writer:
        await writer.wait_init()
        results = await writer.write_with_ack(payloads)  # one call: queued at once
    assert [r.seq_no for r in results] == list(range(1, 61))
    sizes = [request.ByteSize() for request in requests]
    assert all(size <= limit for size in sizes), sizes
    assert len(sizes) == 6  # 11 messages of ~9 KB fit in 100 KiB; as few requests as possible
    assert stored_data(server, topic) == payloads


@pytest.mark.parametrize(
    ("codec", "encoders"),
    [
        (_codecs.Codec.RAW, None),
        (_codecs.Codec.GZIP, None),
        (_codecs.Codec.ZSTD, None),
        (yta.LZ4_CODEC, {yta.LZ4_CODEC: yta.lz4_encode}),
    ],
)
async def test_codec_round_trip(server: Any, driver: yta.Driver, topic: str, codec: int, encoders: Any) -> None:
    decode = {**_codecs.BUILTIN_DECODERS, yta.LZ4_CODEC: yta.lz4_decode}[codec]
    # Small payloads are encoded inline, large ones (>= 16 KiB) in worker threads.
    payloads = [b"small %d " % i * 3 for i in range(5)] + [bytes(range(256)) * 300 for _ in range(3)] + [b""]
    async with driver.topic.writer(topic, producer_id="codec", codec=codec, encoders=encoders) as writer:
        results = await writer.write_with_ack(payloads)
    assert [r.seq_no for r in results] == list(range(1, 10))
    messages = stored(server, topic)
    assert {m.codec for m in messages} == {codec}
    assert [decode(m.data) for m in messages] == payloads
    if codec != _codecs.Codec.RAW:
        assert len(messages[5].data) < len(payloads[5]) // 10


async def test_lz4_must_be_registered(driver: yta.Driver, topic: str) -> None:
    with pytest.raises(yta.UnsupportedCodecError, match="lz4"):
        driver.topic.writer(topic, codec=yta.LZ4_CODEC)
    with pytest.raises(yta.InvalidArgumentError, match="range"):
        driver.topic.writer(topic, codec=30000, encoders={30000: yta.lz4_encode})


async def test_a_codec_the_topic_does_not_allow_fails_before_sending(
    server: Any, driver: yta.Driver, topic_name: str
) -> None:
    await driver.topic.create_topic(topic_name, supported_codecs=[_codecs.Codec.RAW, _codecs.Codec.ZSTD])
    writer = driver.topic.writer(topic_name, codec=_codecs.Codec.GZIP)
    future = await writer.write_with_ack_future(b"never sent")
    with pytest.raises(yta.UnsupportedCodecError, match="gzip"):
        await writer.wait_init(timeout=5)
    with pytest.raises(yta.UnsupportedCodecError):
        await future
    with pytest.raises(yta.UnsupportedCodecError):
        await writer.write(b"later")
    with pytest.raises(yta.UnsupportedCodecError):
        await writer.close()
    await writer.close()  # second close: no-op
    assert stored(server, topic_name) == []
    async with driver.topic.writer(topic_name, codec=_codecs.Codec.ZSTD) as allowed:
        assert (await allowed.wait_init()).supported_codecs == (_codecs.Codec.RAW, _codecs.Codec.ZSTD)
        await allowed.write_with_ack(b"ok")


async def test_non_retriable_failure_reaches_every_future_and_every_later_call(driver: yta.Driver) -> None:
    writer = driver.topic.writer("no-such-topic", producer_id="p")
    futures = await writer.write_with_ack_future([b"1", b"2", b"3"])
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, yta.SchemeError) for r in results), results
    for call in (writer.write(b"x"), writer.write_with_ack(b"x"), writer.flush(), writer.wait_init()):
        with pytest.raises(yta.SchemeError):
            await call
    with pytest.raises(yta.SchemeError):
        await writer.close()
    with pytest.raises(yta.WriterClosedError):
        await writer.write(b"after close")


async def test_close_waits_for_acks_and_later_calls_raise(server: Any, driver: yta.Driver, topic: str) -> None:
    writer = driver.topic.writer(topic, producer_id="p")
    futures = await writer.write_with_ack_future([b"x"] * 200)
    await writer.close()
    assert all(f.done() and isinstance(f.result(), yta.Written) for f in futures)
    assert len(stored(server, topic)) == 200
    assert writer.closed
    for call in (writer.write(b"x"), writer.write_with_ack(b"x"), writer.flush(), writer.wait_init()):
        with pytest.raises(yta.WriterClosedError, match="closed"):
            await call
    await writer.close()  # a second close is a no-op


async def test_async_with_flushes_on_exit_even_when_the_body_raises(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    with pytest.raises(RuntimeError, match="user error"):
        async with driver.topic.writer(topic, producer_id="p") as writer:
            await writer.write([b"1", b"2"])
            raise RuntimeError("user error")
    assert stored_data(server, topic) == [b"1", b"2"]


async def test_closing_the_driver_closes_its_writers(server: Any, topic_name: str) -> None:
    driver = yta.Driver(server.endpoint, server.database)
    async with driver:
        await driver.topic.create_topic(topic_name)
        writer = driver.topic.writer(topic_name)
        await writer.wait_init()
        await writer.write(b"flushed by driver close")
    assert writer.closed
    assert stored_data(server, topic_name) == [b"flushed by driver close"]


async def test_statistics_of_the_last_ack(driver: yta.Driver, topic: str) -> None:
    async with driver.topic.writer(topic) as writer:
        before_any_ack = writer.last_write_statistics
        assert before_any_ack is None
        await writer.write_with_ack([b"a", b"b"])
        stats = writer.last_write_statistics
        assert stats is not None
        assert stats.partition_id == 0
        assert stats.messages >= 1
        assert stats.persisting_time >= dt.timedelta(0)


async def test_explicit_partition_and_direct_write(server: Any, driver: yta.Driver, topic_name: str) -> None:
    await driver.topic.create_topic(topic_name, min_active_partitions=3)
    async with driver.topic.writer(topic_name, partition_id=2) as writer:
        assert (await writer.write_with_ack(b"explicit")).partition_id == 2
    async with driver.topic.writer(topic_name, partition_id=1, direct_write=True, producer_id="d") as writer:
        assert (await writer.wait_init()).partition_id == 1
        assert await writer.write_with_ack(b"direct") == yta.Written(1, 0, 1)
    assert stored_data(server, topic_name, partition=2) == [b"explicit"]
    assert stored_data(server, topic_name, partition=1) == [b"direct"]
    with pytest.raises(yta.InvalidArgumentError, match="partition_id"):
        driver.topic.writer(topic_name, direct_write=True)


async def test_tokens_are_refreshed_in_band(
    server: Any, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    updates = record_requests(monkeypatch, "update_token_request")

    def sent() -> list[str]:
        return [request.update_token_request.token for request in updates]

    current = "t1"

    async def provider() -> str:
        return current

    async def wait_sent(token: str) -> None:
        await eventually(lambda: token in sent(), f"{token} sent")

    credentials = yta.TokenProviderCredentials(provider)
    async with yta.Driver(server.endpoint, server.database, credentials, discovery=False) as driver:
        await driver.topic.create_topic(topic_name)
        async with driver.topic.writer(topic_name, token_refresh_interval=0.02) as writer:
            await writer.write_with_ack(b"before")
            await asyncio.sleep(0.1)
            assert sent() == []  # an unchanged token is not resent
            current = "t2"
            await wait_sent("t2")
            current = "t3"
            await wait_sent("t3")
            await writer.write_with_ack(b"after")  # the stream survived the updates
    assert sent() == ["t2", "t3"]


@pytest.mark.parametrize(
    ("size", "thread_safe"), [(100, True), (20_000, True), (100, False)], ids=["inline", "worker-thread", "serial"]
)
async def test_a_failing_custom_encoder_fails_only_its_own_messages(
    server: Any, driver: yta.Driver, topic: str, size: int, thread_safe: bool
) -> None:
    def picky(data: bytes) -> bytes:
        if data.startswith(b"bad"):
            raise RuntimeError("encoder bug")
        return b"enc:" + data

    good = [b"good-%d " % i * (size // 8) for i in range(3)]
    encoders = {10005: yta.ThreadSafe(picky) if thread_safe else picky}
    async with driver.topic.writer(topic, producer_id="p", codec=10005, encoders=encoders) as writer:
        futures = await writer.write_with_ack_future([good[0], b"bad" * (size // 3), good[1]])
        first, bad, second = await asyncio.gather(*futures, return_exceptions=True)
        assert isinstance(bad, yta.MessageEncodeError) and "encoder bug" in str(bad)
        assert isinstance(bad.__cause__, RuntimeError)
        assert first == yta.Written(0, 0, 1) and second == yta.Written(0, 1, 3)
        await writer.flush(timeout=10)  # the dropped message counts as settled
        assert writer.failure is None
        assert await writer.write_with_ack(good[2]) == yta.Written(0, 2, 4)
    assert stored_data(server, topic) == [b"enc:" + g for g in good]


async def test_large_payloads_are_encoded_off_the_loop_in_parallel(
    server: Any, driver: yta.Driver, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_codec_threads(monkeypatch, 4)  # the default depends on the machine (one on two CPUs)
    loop_thread = threading.get_ident()
    threads: set[int] = set()
    running = 0
    peak = 0
    lock = threading.Lock()

    def slow_encoder(data: bytes) -> bytes:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            threads.add(threading.get_ident())
        time.sleep(0.05)  # stands in for CPU-heavy compression that releases the GIL
        with lock:
            running -= 1
        return data[::-1]

    payloads = [bytes([i]) * 20_000 + b"end" for i in range(8)]
    async with driver.topic.writer(topic, codec=10007, encoders={10007: yta.ThreadSafe(slow_encoder)}) as writer:
        await writer.wait_init()
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        tick_task = asyncio.ensure_future(ticker())
        try:
            await writer.write_with_ack(payloads)
        finally:
            tick_task.cancel()
            await asyncio.gather(tick_task, return_exceptions=True)
    assert loop_thread not in threads
    assert peak >= 2  # several messages were being encoded at the same time
    assert ticks >= 5  # the loop kept running meanwhile
    assert stored_data(server, topic) == [p[::-1] for p in payloads]
