"""Decoding compressed payloads as a receive takes them, and what a payload that cannot be
decoded becomes.

A receive decodes only the messages it is about to hand out (a single-message receive also the
following ones that decode cheaply along with it), so decoded payloads exist only from the moment
they are handed out, and a large response is never decoded whole ahead of its reader. The
payloads go through ``_codecs.transform_batch``: inline when there is little to do, otherwise in
worker threads, split into chunks that decode in parallel (a receive of many small batches, from
many producers, costs as much loop time as one large batch). A payload its decoder rejects
becomes a ``MessageDecodeError`` naming the topic, partition, offset and codec, which the receive
call that reaches the message raises; the other messages are unaffected.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .. import _codecs
from .._errors import MessageDecodeError
from .messages import PartitionSession, TopicMessage
from .wire import _ServerBatchInfo

RAW_CODECS = (0, _codecs.Codec.RAW)


async def decode_payloads(messages: Iterable[tuple[_ServerBatchInfo, Any]]) -> list[bytes | BaseException]:
    """The decoded payloads of the compressed ones among ``messages`` ((server batch, record)
    pairs, in order; raw ones are skipped), each a payload or the error that its decoder raised."""
    records: list[Any] = []  # each a record, or its payload left in the received bytes
    sizes: list[int] = []
    runs: list[tuple[int, int, _codecs.Transform]] = []  # per server batch: its range of records, its decoder
    for info, record in messages:
        fn = info.decoder
        if fn is None:
            continue
        if runs and runs[-1][2] is fn and runs[-1][1] == len(records):
            runs[-1] = (runs[-1][0], len(records) + 1, fn)
        else:
            runs.append((len(records), len(records) + 1, fn))
        records.append(info.view(record) or record)
        # The work is in producing the output: judge by the size the writer declared, as a
        # highly compressible payload is small on the wire.
        sizes.append(info.decoded_size(record))
    if not records:
        return []
    try:
        return list(
            await _codecs.transform_batch(
                sizes,
                lambda first, end: _decode_span(runs, records, first, end),
                serial=any(isinstance(fn, _codecs.SerialTransform) for _, _, fn in runs),
            )
        )
    except _codecs.PartialTransformError as exc:
        return [exc.failures[i] if data is None else data for i, data in enumerate(exc.results)]


def _decode_span(
    runs: Sequence[tuple[int, int, _codecs.Transform]], records: Sequence[Any], start: int, end: int
) -> list[bytes]:
    """The payloads of ``records[start:end]`` decoded, each by the decoder of its run.

    Where decoding runs in a worker thread, so does copying each payload out of its record:
    a response's compressed payloads are copied one at a time there, not all at once on the
    event loop. A payload left in the received bytes (a ``memoryview``) is not copied at all
    for the built-in decoders, which read any buffer; a user's decoder gets it as ``bytes``."""
    decoded: list[bytes | None] = []
    failures: dict[int, BaseException] = {}
    for run_start, run_end, fn in runs:
        if run_end > start and run_start < end:
            first = max(start, run_start)
            as_view = _codecs.reads_buffers(fn)
            payloads: Iterator[Any] = (
                record.data if type(record) is not memoryview else record if as_view else bytes(record)
                for record in records[first : min(end, run_end)]
            )
            try:
                decoded += _codecs.transform_all(fn, payloads)
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
