"""Where the writer compresses: batches of many small messages must not stall the event loop."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from typing import Any

import anyio
import anyio.to_thread
import pytest
import zstandard

import ydb_topic_async as yta
from ydb_topic_async import _codecs

from .._codec_probes import RecordingTransform, compressible_payloads, loop_slices, thread_cpu, use_codec_threads
from .._helpers import stored

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("codec", [yta.Codec.ZSTD, yta.Codec.GZIP])
async def test_a_batch_of_small_messages_is_encoded_off_the_loop(
    server: Any, driver: yta.Driver, topic: str, codec: int
) -> None:
    encoder = RecordingTransform(_codecs.BUILTIN_ENCODERS[codec])
    decode = _codecs.BUILTIN_DECODERS[codec]
    loop_thread = threading.get_ident()
    payloads = compressible_payloads(4000)
    encoders = {codec: yta.ThreadSafe(encoder)}
    async with driver.topic.writer(topic, producer_id="small", codec=codec, encoders=encoders) as writer:
        await writer.write(payloads)
        await writer.flush(timeout=30)
        batch_threads = set(encoder.threads)
        encoder.threads.clear()
        await writer.write_with_ack(b"tiny")  # a few bytes: not worth a thread hop
    assert len(batch_threads) >= 1 and loop_thread not in batch_threads
    assert encoder.threads == [loop_thread]
    messages = stored(server, topic)
    assert [decode(m.data) for m in messages] == [*payloads, b"tiny"]
    assert {m.codec for m in messages} == {codec}


async def test_encoding_many_small_messages_does_not_stall_the_loop(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    local = threading.local()

    def costly_zstd(data: bytes) -> bytes:
        # A high level makes compression dominate the writer's other per-message work, so the
        # comparison below measures where compression runs and nothing else.
        compressor = getattr(local, "compressor", None)
        if compressor is None:
            compressor = local.compressor = zstandard.ZstdCompressor(level=15)
        return compressor.compress(data)

    payloads = compressible_payloads(4000)
    # The loop thread's CPU time that encoding half of them inline would take at a stretch.
    inline_half = thread_cpu(lambda: [costly_zstd(data) for data in payloads[:2000]])
    assert inline_half > 0.02

    encoders: dict[int, yta.ThreadSafe] = {yta.Codec.ZSTD: yta.ThreadSafe(costly_zstd)}
    async with driver.topic.writer(topic, codec=yta.Codec.ZSTD, encoders=encoders) as writer:
        await writer.wait_init()
        async with loop_slices() as slices:
            await writer.write(payloads)  # about one 4 MiB request's worth
            await writer.flush(timeout=30)
    assert len(server.storage.read(topic, 0)) == 4000
    assert max(slices) < inline_half / 3, (max(slices), inline_half)


async def test_many_tiny_messages_are_encoded_off_the_loop(server: Any, driver: yta.Driver, topic: str) -> None:
    encoder = RecordingTransform(_codecs.BUILTIN_ENCODERS[yta.Codec.GZIP])
    loop_thread = threading.get_ident()
    payloads = [bytes([i % 256]) for i in range(16_000)]  # 16 KB in all, but 16,000 gzip calls
    encoders: dict[int, yta.ThreadSafe] = {yta.Codec.GZIP: yta.ThreadSafe(encoder)}
    async with driver.topic.writer(topic, codec=yta.Codec.GZIP, encoders=encoders) as writer:
        await writer.wait_init()
        await writer.write(payloads)
        await writer.flush(timeout=30)
        batch_threads = set(encoder.threads)
        encoder.threads.clear()
        await writer.write_with_ack([b"a", b"few"])  # few and small: encoded inline
    assert loop_thread not in batch_threads
    assert encoder.threads == [loop_thread, loop_thread]
    messages = server.storage.read(topic, 0)
    assert [_codecs.BUILTIN_DECODERS[yta.Codec.GZIP](m.data) for m in messages] == [*payloads, b"a", b"few"]


async def test_encoding_does_not_use_the_applications_thread_limiter(
    server: Any, driver: yta.Driver, topic: str
) -> None:
    # The application's default thread pool is exhausted, e.g. by slow sync FastAPI routes.
    default = anyio.to_thread.current_default_thread_limiter()
    default.total_tokens = 1
    holder = object()
    await default.acquire_on_behalf_of(holder)
    try:
        async with driver.topic.writer(topic, codec=yta.Codec.ZSTD) as writer:
            results = await asyncio.wait_for(writer.write_with_ack(compressible_payloads(200, 1024)), timeout=10)
        assert len(results) == 200
        assert _codecs.codec_limiter().total_tokens == _codecs.CODEC_THREADS
    finally:
        default.release_on_behalf_of(holder)
    assert len(server.storage.read(topic, 0)) == 200


def test_codec_threads_leave_a_cpu_to_the_event_loop() -> None:
    """Compression and decompression run in at most one thread fewer than the CPUs the process
    may use (one at least), so that the event loop's thread is not starved by them."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    assert max(1, cpus - 1) == _codecs.CODEC_THREADS
    assert 1 <= _codecs.PARALLELISM <= _codecs.CODEC_THREADS


async def test_one_zstd_compressor_given_as_encoder_is_never_used_by_two_threads_at_once(
    server: Any, driver: yta.Driver, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``zstandard.ZstdCompressor`` must not be used by two threads at once, and a large batch
    is encoded in several: an encoder that is a method of one (here shared by two writers) is
    called from one thread at a time, so every message is stored as a valid frame of its own."""
    use_codec_threads(monkeypatch, 4)
    rng = random.Random(3)
    payloads = [rng.randbytes(512) * 64 + b"#%d" % i for i in range(96)]  # 32 KiB each, 3 MiB in all
    encoders: dict[int, _codecs.Transform] = {yta.Codec.ZSTD: zstandard.ZstdCompressor().compress}
    async with (
        driver.topic.writer(topic, producer_id="a", codec=yta.Codec.ZSTD, encoders=encoders) as first,
        driver.topic.writer(topic, producer_id="b", codec=yta.Codec.ZSTD, encoders=encoders) as second,
    ):
        await asyncio.gather(first.write_with_ack(payloads), second.write_with_ack(payloads))
    decode = zstandard.ZstdDecompressor().decompress
    messages = stored(server, topic)
    for producer in ("a", "b"):
        assert [decode(m.data) for m in messages if m.producer_id == producer] == payloads, producer
