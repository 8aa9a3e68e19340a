"""The read streams' server messages on the local server: how each is built, and data encoded by hand.

Every ``FromServer`` message a read session sends is made here, from plain values, for StreamRead
and for StreamDirectRead (``direct_*``); what to send and when is the session's business
(``read_session``, ``read_stream``, ``direct_read``).

Data is serialized here rather than by gRPC, once: a ReadResponse's ``bytes_size`` (the
serialized size of the whole response, what the client's credit pays, as in YDB) is known only
after the rest is serialized, so it is appended to the bytes as one more field; a
DirectReadResponse carries the same PartitionData and its own ``bytes_size`` the same way. The
messages of a part are set field by field, and the ``created_at`` they share is merged in as bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf import timestamp_pb2

from .._proto import ydb_topic_pb2 as pb
from ._replies import SUCCESS, failure, issues, status_code, timestamp
from .storage import Partition
from .stored import StoredRow

FromServer = pb.StreamReadMessage.FromServer
ReadResponse = pb.StreamReadMessage.ReadResponse
PartitionData = ReadResponse.PartitionData
DirectFromServer = pb.StreamDirectReadMessage.FromServer
DirectReadResponse = pb.StreamDirectReadMessage.DirectReadResponse


def error(status: str, message: str) -> Any:
    """A FromServer message ending the session with ``status`` (a YDB status name) and one issue."""
    return failure(FromServer, status, message)


def init_response(read_session_id: str) -> Any:
    message = FromServer(status=SUCCESS)
    message.init_response.session_id = read_session_id
    return message


def update_token_response() -> Any:
    message = FromServer(status=SUCCESS)
    message.update_token_response.SetInParent()
    return message


def start_partition_session(
    partition_session_id: int, path: str, partition: Partition, committed: int, *, located: bool = False
) -> Any:
    """StartPartitionSessionRequest: the committed offset is also the partition's start as the reader
    sees it. ``located``: the session reads directly, so the partition's node and tablet generation
    go with it (YDB fills ``partition_location`` only then)."""
    message = FromServer(status=SUCCESS)
    request = message.start_partition_session_request
    request.partition_session.partition_session_id = partition_session_id
    request.partition_session.path = path
    request.partition_session.partition_id = partition.partition_id
    request.committed_offset = committed
    request.partition_offsets.start = committed
    request.partition_offsets.end = partition.end_offset
    if located:
        request.partition_location.node_id = partition.node_id
        request.partition_location.generation = partition.generation
    return message


def stop_partition_session(
    partition_session_id: int, graceful: bool, committed: int | None, last_direct_read_id: int | None = None
) -> Any:
    """StopPartitionSessionRequest; ``committed`` is left out when reading without a consumer,
    ``last_direct_read_id`` when the session does not read directly."""
    message = FromServer(status=SUCCESS)
    request = message.stop_partition_session_request
    request.partition_session_id = partition_session_id
    request.graceful = graceful
    if committed is not None:
        request.committed_offset = committed
    if last_direct_read_id is not None:
        request.last_direct_read_id = last_direct_read_id
    return message


def update_partition_session(partition_session_id: int, node_id: int, generation: int) -> Any:
    """UpdatePartitionSession: a directly read partition's tablet moved (another node, a new generation)."""
    message = FromServer(status=SUCCESS)
    update = message.update_partition_session
    update.partition_session_id = partition_session_id
    update.partition_location.node_id = node_id
    update.partition_location.generation = generation
    return message


def end_partition_session(
    partition_session_id: int, child_ids: Iterable[int], adjacent_ids: Iterable[int]
) -> Any:
    message = FromServer(status=SUCCESS)
    end = message.end_partition_session
    end.partition_session_id = partition_session_id
    end.child_partition_ids.extend(child_ids)
    end.adjacent_partition_ids.extend(adjacent_ids)
    return message


def partition_session_status(
    partition_session_id: int, committed: int, end_offset: int, read_offset: int, last_write_ns: int
) -> Any:
    """PartitionSessionStatusResponse; the write time high watermark is left out before the first write."""
    message = FromServer(status=SUCCESS)
    status = message.partition_session_status_response
    status.partition_session_id = partition_session_id
    status.partition_offsets.start = committed
    status.partition_offsets.end = end_offset
    status.read_offset = read_offset
    status.committed_offset = committed
    if last_write_ns:
        status.write_time_high_watermark.CopyFrom(timestamp(last_write_ns))
    return message


def commit_response(committed: Iterable[tuple[int, int]]) -> Any:
    """CommitOffsetResponse: ``(partition session id, new committed offset)`` of each partition session."""
    message = FromServer(status=SUCCESS)
    add = message.commit_offset_response.partitions_committed_offsets.add
    for partition_session_id, offset in committed:
        add(partition_session_id=partition_session_id, committed_offset=offset)
    return message


def read_response(partition_session_id: int, chunk: Sequence[StoredRow]) -> tuple[bytes, int]:
    """The serialized FromServer message carrying ``chunk`` of one partition session, and its
    ``bytes_size`` (what the client's credit is charged)."""
    data = partition_data(partition_session_id, chunk)
    body_size = len(_PARTITION_DATA_TAG) + len(_varint(len(data))) + len(data)
    bytes_size = len(_SUCCESS_HEADER) + len(_READ_RESPONSE_TAG) + len(_varint(body_size)) + body_size
    tail = _BYTES_SIZE_TAG + _varint(bytes_size)
    # One join: the data (up to a few MiB) is copied once more, not twice.
    return b"".join((
        _SUCCESS_HEADER, _READ_RESPONSE_TAG, _varint(body_size + len(tail)),
        _PARTITION_DATA_TAG, _varint(len(data)), data, tail,
    )), bytes_size


def partition_data(partition_session_id: int, chunk: Sequence[StoredRow]) -> bytes:
    """The serialized PartitionData of ``chunk``: what a ReadResponse and a DirectReadResponse carry."""
    part = PartitionData(partition_session_id=partition_session_id)
    add_batch = part.batches.add
    add: Any = None
    last_written, last_producer, last_codec, last_meta = -1, "", -1, None
    last_created, created_field = 0, b""
    # Per message, only what differs between messages is set, field by field (several times
    # cheaper than keyword arguments); one Batch per run of messages that share a write
    # request's producer, codec, session metadata and write time, as YDB groups them.
    for offset, seq_no, created_at_ns, written_at, producer, group, codec, data, size, metadata, meta in chunk:
        if written_at != last_written or producer != last_producer or codec != last_codec or meta != last_meta:
            last_written, last_producer, last_codec, last_meta = written_at, producer, codec, meta
            batch = add_batch(producer_id=producer, codec=codec, write_session_meta=dict(meta))
            batch.written_at.CopyFrom(timestamp(written_at))
            add = batch.message_data.add
        item = add()
        item.offset = offset
        item.seq_no = seq_no
        item.data = data
        item.uncompressed_size = size
        item.message_group_id = group
        if created_at_ns:
            if created_at_ns != last_created:
                # Messages of one request often share a millisecond: their created_at field,
                # serialized once, is merged in as bytes.
                last_created, created_field = created_at_ns, _created_at_field(created_at_ns)
            item.MergeFromString(created_field)
        if metadata:
            items = item.metadata_items
            for key, value in metadata:
                items.add(key=key, value=value)
    return part.SerializeToString()


# --- StreamDirectRead ---------------------------------------------------------------------------


def direct_error(status: str, message: str) -> Any:
    """A direct stream's FromServer message ending it with ``status`` and one issue."""
    return failure(DirectFromServer, status, message)


def direct_init_response() -> Any:
    message = DirectFromServer(status=SUCCESS)
    message.init_response.SetInParent()
    return message


def direct_update_token_response() -> Any:
    message = DirectFromServer(status=SUCCESS)
    message.update_token_response.SetInParent()
    return message


def direct_start_response(partition_session_id: int, generation: int) -> Any:
    message = DirectFromServer(status=SUCCESS)
    response = message.start_direct_read_partition_session_response
    response.partition_session_id = partition_session_id
    response.generation = generation
    return message


def direct_stop(partition_session_id: int, status: str, reason: str) -> Any:
    """StopDirectReadPartitionSession: the stream no longer serves the partition session, for
    ``status`` (a YDB status name) and ``reason``; the stream itself goes on (its own status is SUCCESS)."""
    message = DirectFromServer(status=SUCCESS)
    stop = message.stop_direct_read_partition_session
    stop.partition_session_id = partition_session_id
    stop.status = status_code(status)  # type: ignore[assignment]
    stop.issues.extend(issues(reason))
    return message


def direct_read_response(partition_session_id: int, direct_read_id: int, data: bytes) -> tuple[bytes, int]:
    """The serialized FromServer message of a direct read (``data``: a serialized PartitionData),
    and its ``bytes_size`` (its serialized size, what the control stream's credit is charged)."""
    head = (
        _DIRECT_SESSION_TAG + _varint(partition_session_id)
        + _DIRECT_READ_ID_TAG + _varint(direct_read_id)
        + _DIRECT_DATA_TAG + _varint(len(data))
    )
    body_size = len(head) + len(data)
    bytes_size = len(_SUCCESS_HEADER) + len(_DIRECT_RESPONSE_TAG) + len(_varint(body_size)) + body_size
    tail = _DIRECT_BYTES_SIZE_TAG + _varint(bytes_size)
    return b"".join((
        _SUCCESS_HEADER, _DIRECT_RESPONSE_TAG, _varint(body_size + len(tail)), head, data, tail
    )), bytes_size


_SUCCESS_HEADER = FromServer(status=SUCCESS).SerializeToString()


def _tag(descriptor: Any, name: str) -> bytes:
    """The key of length-delimited or varint field ``name`` (wire type from its kind)."""
    field_descriptor = descriptor.fields_by_name[name]
    wire_type = 2 if field_descriptor.message_type is not None else 0
    return _varint(field_descriptor.number << 3 | wire_type)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _created_at_field(ns: int) -> bytes:
    """A ReadResponse.MessageData's ``created_at`` field, serialized."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    value = timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos).SerializeToString()
    return _CREATED_AT_TAG + _varint(len(value)) + value


_READ_RESPONSE_TAG = _tag(FromServer.DESCRIPTOR, "read_response")
_PARTITION_DATA_TAG = _tag(ReadResponse.DESCRIPTOR, "partition_data")
_BYTES_SIZE_TAG = _tag(ReadResponse.DESCRIPTOR, "bytes_size")
_DIRECT_RESPONSE_TAG = _tag(DirectFromServer.DESCRIPTOR, "direct_read_response")
_DIRECT_SESSION_TAG = _tag(DirectReadResponse.DESCRIPTOR, "partition_session_id")
_DIRECT_READ_ID_TAG = _tag(DirectReadResponse.DESCRIPTOR, "direct_read_id")
_DIRECT_DATA_TAG = _tag(DirectReadResponse.DESCRIPTOR, "partition_data")
_DIRECT_BYTES_SIZE_TAG = _tag(DirectReadResponse.DESCRIPTOR, "bytes_size")
_CREATED_AT_TAG = _tag(ReadResponse.MessageData.DESCRIPTOR, "created_at")
