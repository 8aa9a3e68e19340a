"""Turning a ReadResponse into messages: decoding its compressed batches, and what a payload
that cannot be decoded becomes.

The payloads of every compressed batch of a response are decoded together, through
``_codecs.transform_batch``: inline when there is little to do, otherwise in worker threads,
split into chunks that decode in parallel (a response made of many small batches, from many
producers, costs as much loop time as one large batch). A payload its decoder rejects becomes a
``MessageDecodeError`` naming the topic, partition, offset and codec, which the receive call
that reaches the message raises; the other messages are unaffected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import _codecs
from .._errors import MessageDecodeError
from .messages import PartitionSession, TopicMessage

RAW_CODECS = (0, _codecs.Codec.RAW)


async def decode_payloads(
    parts: Sequence[Any], decoders: Mapping[int, _codecs.Transform]
) -> tuple[list[bytes | None], dict[int, BaseException]]:
    """The decoded payloads of every compressed batch of ``parts``, in order, and the payloads
    that failed (index -> exception; their result is None). A codec without a registered decoder
    raises ``UnsupportedCodecError``."""
    payloads: list[bytes] = []
    sizes: list[int] = []
    runs: list[tuple[int, int, _codecs.Transform]] = []  # per batch: its range of payloads, its decoder
    for part in parts:
        for batch in part.batches:
            if batch.codec in RAW_CODECS:
                continue
            fn = _codecs.lookup(decoders, batch.codec, "decoder")
            first = len(payloads)
            for record in batch.message_data:
                data = record.data
                payloads.append(data)
                # The work is in producing the output: judge by the size the writer
                # declared, as a highly compressible payload is small on the wire.
                sizes.append(max(len(data), record.uncompressed_size))
            runs.append((first, len(payloads), fn))
    if not payloads:
        return [], {}
    try:
        decoded: list[bytes | None] = list(
            await _codecs.transform_batch(sizes, lambda start, end: _decode_span(runs, payloads, start, end))
        )
    except _codecs.PartialTransformError as exc:
        return exc.results, exc.failures
    return decoded, {}


def _decode_span(
    runs: Sequence[tuple[int, int, _codecs.Transform]], payloads: Sequence[bytes], start: int, end: int
) -> list[bytes]:
    """``payloads[start:end]`` decoded, each by the decoder of its run."""
    decoded: list[bytes | None] = []
    failures: dict[int, BaseException] = {}
    for run_start, run_end, fn in runs:
        if run_end > start and run_start < end:
            first = max(start, run_start)
            try:
                decoded += _codecs.transform_all(fn, payloads[first : min(end, run_end)])
            except _codecs.PartialTransformError as exc:
                offset = len(decoded)
                decoded += exc.results
                failures.update({offset + index: error for index, error in exc.failures.items()})
    if failures:
        raise _codecs.PartialTransformError(decoded, failures)
    return decoded  # type: ignore[return-value]  # no failures: no None left


def decode_error(message: TopicMessage, error: BaseException) -> MessageDecodeError:
    """The error a receive raises for ``message``, whose payload ``error`` prevented decoding."""
    session: PartitionSession = message.partition_session
    failure = MessageDecodeError(
        f"cannot decode the message at offset {message.offset} of partition {session.partition_id} of"
        f" {session.topic_path} (codec {_codecs.codec_name(message.codec)}, seq_no {message.seq_no},"
        f" producer {message.producer_id!r}): {error!r}; commit error.message to skip it",
        topic_path=session.topic_path,
        partition_id=session.partition_id,
        offset=message.offset,
        codec=message.codec,
        message=message,
    )
    failure.__cause__ = error
    return failure
