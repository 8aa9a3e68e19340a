"""``codec="auto"``: the writer picks the codec that makes its batches smallest.

As the official SDKs do (ydb-python-sdk ``WriterAsyncIOReconnector._get_available_codecs`` and
``_codec_selector``; ydb-go-sdk ``topicwritercommon.EncoderSelector``): the candidates are the
topic's supported codecs that the writer can encode, RAW and GZIP when the topic lists none,
measured on real batches and measured again periodically. Unlike them, a sample of the batch is
measured before a codec is used (a large batch is never compressed whole just to find out that
RAW was smaller), and a compressing codec must save at least ``MIN_SAVING`` over RAW.
"""

from __future__ import annotations

import os
import random
import threading
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async import _codecs
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import proxy_to
from ydb_topic_async.writer import batching

from .._codec_probes import RecordingTransform
from .._polling import eventually

pytestmark = pytest.mark.timeout(60)


def text(count: int, size: int = 1024, seed: int = 7) -> list[bytes]:
    """Compressible payloads (gzip takes them to about a fifth)."""
    rng = random.Random(seed)
    words = [b"user", b"click", b"amount", b"page", b"session", b"order"]
    return [(b" ".join(rng.choice(words) for _ in range(size // 4)) + b"#%d" % i)[:size] for i in range(count)]


def noise(count: int, size: int = 1024) -> list[bytes]:
    """Incompressible payloads."""
    return [os.urandom(size) for _ in range(count)]


def selected(writer: yta.TopicWriter) -> int | None:
    """The writer's codec now (a function, so that a type checker does not narrow it between reads)."""
    return writer.selected_codec


def decoded(server: LocalTopicServer, topic: str) -> list[tuple[int, bytes]]:
    return [(m.codec, _codecs.BUILTIN_DECODERS[m.codec](m.data)) for m in server.storage.read(topic, 0)]


async def test_compressible_batches_get_gzip_and_incompressible_ones_raw(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    await driver.topic.create_topic("auto")  # lists no codecs: RAW and GZIP are the candidates
    compressible = text(200)
    async with driver.topic.writer("auto", codec="auto") as writer:
        assert writer.codec == "auto" and selected(writer) is None
        await writer.write_with_ack(compressible)
        assert selected(writer) == yta.Codec.GZIP
    assert decoded(server, "auto") == [(yta.Codec.GZIP, p) for p in compressible]

    await driver.topic.create_topic("random")
    random_payloads = noise(100)
    async with driver.topic.writer("random", codec="auto") as writer:
        await writer.write_with_ack(random_payloads)
        assert writer.selected_codec == yta.Codec.RAW
    assert decoded(server, "random") == [(yta.Codec.RAW, p) for p in random_payloads]


async def test_the_candidates_are_the_topics_codecs_the_writer_can_encode(
    server: LocalTopicServer, driver: yta.Driver
) -> None:
    await driver.topic.create_topic("zstd", supported_codecs=[yta.Codec.RAW, yta.Codec.ZSTD])
    async with driver.topic.writer("zstd", codec="auto") as writer:
        await writer.write_with_ack(text(50))
    assert {codec for codec, _ in decoded(server, "zstd")} == {yta.Codec.ZSTD}

    await driver.topic.create_topic("gzip-only", supported_codecs=[yta.Codec.GZIP])
    async with driver.topic.writer("gzip-only", codec="auto") as writer:
        await writer.write_with_ack(noise(5))  # the only candidate, even where it does not help
    assert {codec for codec, _ in decoded(server, "gzip-only")} == {yta.Codec.GZIP}

    await driver.topic.create_topic("lz4", supported_codecs=[yta.LZ4_CODEC])
    writer = driver.topic.writer("lz4", codec="auto")
    with pytest.raises(yta.UnsupportedCodecError, match="encoder for none of them"):
        await writer.write_with_ack(b"x")
    with pytest.raises(yta.UnsupportedCodecError):
        await writer.close()
    async with driver.topic.writer("lz4", codec="auto", encoders={yta.LZ4_CODEC: yta.lz4_encode}) as writer:
        await writer.write_with_ack(b"y" * 1000)
    assert [m.codec for m in server.storage.read("lz4", 0)] == [yta.LZ4_CODEC]


async def test_the_choice_is_measured_again_and_resent_messages_keep_their_codec(
    server: LocalTopicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batching, "MEASURE_EVERY", 1)  # every batch (100 by default)
    async with proxy_to(server) as flaky, yta.Driver(flaky.endpoint, server.database, discovery=False) as driver:
        await driver.topic.create_topic("mixed")
        async with driver.topic.writer("mixed", producer_id="p", codec="auto") as writer:
            first = text(20, seed=1)
            await writer.write_with_ack(first)
            assert writer.selected_codec == yta.Codec.GZIP
            # Nothing reaches the server now: the next two batches, one compressible and one not,
            # are encoded (each with its own codec) and sent into the void.
            flaky.blackhole()
            compressible, incompressible = text(20, seed=2), noise(20)
            await writer.write(compressible)
            await eventually(lambda: writer.selected_codec == yta.Codec.GZIP and not writer._buffer.unsent)
            await writer.write(incompressible)
            await eventually(lambda: writer.selected_codec == yta.Codec.RAW and not writer._buffer.unsent)
            assert flaky.dropped_bytes > 0
            assert not server.storage.read("mixed", 0)[20:]
            flaky.cut()  # the writer reconnects and resends both, each in its own codec
            await writer.flush(timeout=30)
    expected = [(yta.Codec.GZIP, p) for p in first + compressible] + [(yta.Codec.RAW, p) for p in incompressible]
    assert decoded(server, "mixed") == expected


async def test_a_large_batch_is_measured_off_the_event_loop(server: LocalTopicServer, driver: yta.Driver) -> None:
    await driver.topic.create_topic("large")
    recorder = RecordingTransform(_codecs.BUILTIN_ENCODERS[yta.Codec.GZIP])
    loop_thread = threading.get_ident()
    payloads = text(2000)
    encoders: dict[int, Any] = {yta.Codec.GZIP: yta.ThreadSafe(recorder)}
    async with driver.topic.writer("large", codec="auto", encoders=encoders) as writer:
        await writer.wait_init(timeout=10)
        await writer.write(payloads)
        await writer.flush(timeout=30)
    assert recorder.threads and loop_thread not in recorder.threads
    assert decoded(server, "large") == [(yta.Codec.GZIP, p) for p in payloads]


async def test_auto_is_refused_where_a_codec_id_is_expected(driver: yta.Driver) -> None:
    with pytest.raises(yta.InvalidCodecError, match=r"Codec\.ZSTD"):
        driver.topic.writer("t", codec="zstd")  # type: ignore[arg-type]
    with pytest.raises(yta.InvalidCodecError):
        driver.topic.writer("t", codec="AUTO")  # type: ignore[arg-type]


def test_the_settings_resolve_auto_once() -> None:
    """``WriterSettings`` is where ``codec="auto"`` is resolved: batches start as RAW and a codec
    is picked per batch among every encoder; a fixed codec is every batch's."""
    auto = yta.WriterSettings(codec="auto", encoders={10_000: bytes})
    assert (auto.codec, auto.picks_codec, auto.batch_codec) == ("auto", True, yta.Codec.RAW)
    assert auto.encoder is auto.encoder_table[yta.Codec.RAW] and 10_000 in auto.encoder_table
    fixed = auto.replace(codec=yta.Codec.GZIP)
    assert (fixed.codec, fixed.picks_codec, fixed.batch_codec) == (yta.Codec.GZIP, False, yta.Codec.GZIP)
    assert fixed.encoder is fixed.encoder_table[yta.Codec.GZIP]
    assert yta.WriterSettings().batch_codec == yta.Codec.RAW and not yta.WriterSettings().picks_codec
