"""Where the reader decompresses: a response of many small batches must not stall the event loop."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest
import zstandard

import ydb_topic_async as yta
from ydb_topic_async import _codecs
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.storage import NewMessage

from .._codec_probes import RecordingTransform, compressible_payloads, loop_slices, thread_cpu, use_codec_threads
from .._helpers import stored_data

pytestmark = pytest.mark.timeout(60)

PRODUCERS = 50


def _store_from_many_producers(server: LocalTopicServer, topic: str, payloads: list[bytes]) -> None:
    """Store zstd messages whose producers alternate, so that the server sends each one as a
    batch of its own (a batch is one producer's run of messages)."""
    log = server.storage.topic(topic).partition(0)
    compressor = zstandard.ZstdCompressor()
    for i, data in enumerate(payloads):
        log.append(NewMessage(seq_no=i // PRODUCERS + 1, created_at_ns=1, codec=yta.Codec.ZSTD,
                              data=compressor.compress(data), uncompressed_size=len(data),
                              producer_id=f"producer-{i % PRODUCERS}"))
    server.storage.notify()


async def _read_all(reader: yta.TopicReader, count: int) -> list[yta.TopicMessage]:
    got: list[yta.TopicMessage] = []
    while len(got) < count:
        batch = await reader.receive_batch(timeout=10)
        got.extend(batch)
        reader.commit(batch)
    return got


async def test_many_small_batches_of_one_response_are_decoded_off_the_loop(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    decoder = RecordingTransform(_codecs.BUILTIN_DECODERS[yta.Codec.ZSTD])
    loop_thread = threading.get_ident()
    payloads = compressible_payloads(2000, seed=11)  # each batch about 1 KiB decoded, 2 MiB in all
    _store_from_many_producers(server, topic, payloads)
    decoders: dict[int, yta.ThreadSafe] = {yta.Codec.ZSTD: yta.ThreadSafe(decoder)}
    async with driver.topic.reader(topic, consumer="consumer", decoders=decoders) as reader:
        got = await _read_all(reader, len(payloads))
        batch_threads = set(decoder.threads)
        decoder.threads.clear()
        _store_from_many_producers(server, topic, [b"tiny"])  # a few bytes: not worth a thread hop
        got += await _read_all(reader, 1)
    assert [m.data for m in got] == [*payloads, b"tiny"]
    assert len({m.producer_id for m in got}) == PRODUCERS
    assert batch_threads and loop_thread not in batch_threads
    assert decoder.threads == [loop_thread]


async def test_decoding_many_small_batches_does_not_stall_the_loop(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    local = threading.local()
    plain = _codecs.BUILTIN_DECODERS[yta.Codec.ZSTD]

    def costly_zstd(data: bytes) -> bytes:
        # Recompressing at a high level (the codec releases the GIL) makes decoding dominate the
        # reader's other per-message work, so the comparison below measures where decoding runs.
        compressor = getattr(local, "compressor", None)
        if compressor is None:
            compressor = local.compressor = zstandard.ZstdCompressor(level=15)
        out = plain(data)
        compressor.compress(out)
        return out

    payloads = compressible_payloads(2000, seed=11)
    _store_from_many_producers(server, topic, payloads)
    wire = stored_data(server, topic)
    # The loop thread's CPU time that decoding half of them inline would take at a stretch.
    inline_half = thread_cpu(lambda: [costly_zstd(data) for data in wire[:1000]])
    assert inline_half > 0.02

    async with loop_slices() as slices, driver.topic.reader(
        topic, consumer="consumer", decoders={yta.Codec.ZSTD: yta.ThreadSafe(costly_zstd)}
    ) as reader:
        got = await _read_all(reader, len(payloads))
    assert [m.data for m in got] == payloads
    assert max(slices) < inline_half / 3, (max(slices), inline_half)


async def test_a_payload_its_decoder_rejects_fails_alone_and_names_where_it_is(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    """A corrupt payload fails the receive that reaches it with ``MessageDecodeError`` (topic,
    partition, offset, codec, the message as received); the other messages are delivered, and
    committing the failed message skips it."""

    class CorruptData(Exception):
        pass

    payloads = compressible_payloads(1000, seed=11)
    bad_offsets = [7, 500, 999]
    corrupt = {payloads[offset] for offset in bad_offsets}
    zstd = _codecs.BUILTIN_DECODERS[yta.Codec.ZSTD]

    def picky(data: bytes) -> bytes:
        out = zstd(data)
        if out in corrupt:
            raise CorruptData("cannot decode")
        return out

    _store_from_many_producers(server, topic, payloads)  # large: decoded in worker threads
    path = driver.topic.full_path(topic)
    got: list[yta.TopicMessage] = []
    errors: list[yta.MessageDecodeError] = []
    decoders: dict[int, yta.ThreadSafe] = {yta.Codec.ZSTD: yta.ThreadSafe(picky)}
    async with driver.topic.reader(topic, consumer="consumer", decoders=decoders) as reader:
        while len(got) + len(errors) < len(payloads):
            try:
                batch = await reader.receive_batch(timeout=10)
            except yta.MessageDecodeError as error:
                errors.append(error)
                reader.commit(error.message)  # processed: skip it
                continue
            got.extend(batch)
            reader.commit(batch)
        assert reader.failure is None
        await reader.commit_with_ack(got[-1], timeout=10)
    assert [e.offset for e in errors] == bad_offsets
    assert all((e.topic_path, e.partition_id, e.codec) == (path, 0, yta.Codec.ZSTD) for e in errors)
    assert all(isinstance(e.__cause__, CorruptData) for e in errors)
    assert all(f"offset {e.offset} of partition 0 of {path}" in str(e) and "zstd" in str(e) for e in errors)
    assert [e.message.data for e in errors] == [zstandard.ZstdCompressor().compress(payloads[o]) for o in bad_offsets]
    assert [m.data for m in got] == [p for i, p in enumerate(payloads) if i not in bad_offsets]
    assert [p.committed_offset for p in (await driver.topic.describe_consumer(topic, "consumer")).partitions] == [1000]


async def test_one_zstd_decompressor_given_as_decoder_is_never_used_by_two_threads_at_once(
    server: LocalTopicServer, driver: yta.Driver, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``zstandard.ZstdDecompressor`` objects must not be used by two threads at once (its
    documentation), and a large read decodes in several threads. A decoder that is a method of
    one, shared by two readers, still yields every payload intact: the SDK calls a registered
    decoder from one thread at a time (unless it is marked ``ThreadSafe``)."""
    use_codec_threads(monkeypatch, 4)
    rng = random.Random(5)
    payloads = [rng.randbytes(512) * 64 + b"#%d" % i for i in range(96)]  # 32 KiB each
    _store_from_many_producers(server, topic, payloads)  # 3 MiB decoded: several chunks, several threads
    decoders: dict[int, _codecs.Transform] = {yta.Codec.ZSTD: zstandard.ZstdDecompressor().decompress}

    async def read_all(reader: yta.TopicReader) -> list[bytes]:
        got: list[bytes] = []
        while len(got) < len(payloads):
            got += [m.data for m in await reader.receive_batch(timeout=10)]
        return got

    async with (
        driver.topic.reader(topic, consumer="consumer", decoders=decoders) as first,
        driver.topic.reader(yta.TopicSelector(topic, partitions=[0]), consumer=None, decoders=decoders) as second,
    ):
        got = await asyncio.gather(read_all(first), read_all(second))
    assert list(got) == [payloads, payloads]
