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

from .._codec_probes import RecordingTransform, loop_slices, thread_cpu

pytestmark = pytest.mark.timeout(60)


def _payloads(count: int, size: int = 1024) -> list[bytes]:
    rng = random.Random(7)
    words = [b"user", b"click", b"amount", b"page", b"session", b"%d"]
    out = []
    for i in range(count):
        text = b" ".join(rng.choice(words) for _ in range(size // 4)) + b"#%d" % i
        out.append(text[:size])
    return out


@pytest.mark.parametrize("codec", [yta.Codec.ZSTD, yta.Codec.GZIP])
async def test_a_batch_of_small_messages_is_encoded_off_the_loop(
    server: Any, driver: yta.Driver, topic: str, codec: int
) -> None:
    encoder = RecordingTransform(_codecs.BUILTIN_ENCODERS[codec])
    decode = _codecs.BUILTIN_DECODERS[codec]
    loop_thread = threading.get_ident()
    payloads = _payloads(4000)
    async with driver.topic.writer(topic, producer_id="small", codec=codec, encoders={codec: encoder}) as writer:
        await writer.write(payloads)
        await writer.flush(timeout=30)
        batch_threads = set(encoder.threads)
        encoder.threads.clear()
        await writer.write_with_ack(b"tiny")  # a few bytes: not worth a thread hop
    assert len(batch_threads) >= 1 and loop_thread not in batch_threads
    assert encoder.threads == [loop_thread]
    messages = list(server.storage.read(topic, 0))
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

    payloads = _payloads(4000)
    # The loop thread's CPU time that encoding half of them inline would take at a stretch.
    inline_half = thread_cpu(lambda: [costly_zstd(data) for data in payloads[:2000]])
    assert inline_half > 0.02

    async with driver.topic.writer(topic, codec=yta.Codec.ZSTD, encoders={yta.Codec.ZSTD: costly_zstd}) as writer:
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
    async with driver.topic.writer(topic, codec=yta.Codec.GZIP, encoders={yta.Codec.GZIP: encoder}) as writer:
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
            results = await asyncio.wait_for(writer.write_with_ack(_payloads(200, 1024)), timeout=10)
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
