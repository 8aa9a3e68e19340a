"""Parsing the read streams' responses, leaving large payloads where they arrived.

``grpc.aio`` hands the reader each response as one ``bytes`` object, on the event loop's
thread. Parsing it with protobuf copies every payload into the message's arena, and reading a
payload (``record.data``) copies it once more: for a response of large messages, two copies of
megabytes, both holding the GIL, before the payload even reaches its decoder. So a large response
is first walked here, in Python, down to its messages' ``data`` fields (a walk of a few dozen
fields: the payloads themselves are skipped by their length prefixes). The large payloads stay in
the received bytes, as ``memoryview`` slices the decoders read directly; protobuf parses what is
left, a copy of the response without them.

Only responses that are large, made of few messages and mostly of large payloads are split
(``LARGE_RESPONSE``, ``MAX_WALKED_MESSAGES``): a response of many small messages is parsed by
protobuf alone, as before, and so is anything the walk does not expect (a field repeated where
the parse would merge it, an unknown wire type): the walk then gives up, and its result would
have been the same. The direct read stream's responses (``DIRECT_READ``) are walked the same way:
their one PartitionData counts as the response's part 0.
"""

from __future__ import annotations

from typing import Any, cast

from .._proto import ydb_topic_pb2 as pb
from .._stream import StreamMethod

LARGE_RESPONSE = 1 << 20
"""Responses at least this large (serialized) are walked for large payloads."""

LARGE_PAYLOAD = 128 << 10
"""Payloads at least this large are left in the received bytes."""

MAX_WALKED_MESSAGES = 64
"""The walk gives up past this many messages (parsing them in Python would cost more than the
copies it saves), or past ``_GIVE_UP_WITHOUT_LARGE`` without a large payload among them."""

_GIVE_UP_WITHOUT_LARGE = 8

ExternalPayloads = dict[tuple[int, ...], memoryview]
"""Payloads left in the received bytes, by (partition data, batch, message) index in the
response, each counted in the order of the wire (every occurrence, empty ones too)."""

# Field numbers (Ydb.Topic.StreamReadMessage): FromServer.read_response, then the path down to
# the messages (ReadResponse.partition_data, PartitionData.batches, Batch.message_data), and
# MessageData.data. StreamDirectReadMessage.FromServer.direct_read_response has the same number,
# and its path starts with DirectReadResponse.partition_data (3, not repeated).
_READ_RESPONSE = 4
_PATH = (1, 2, 1)
_DIRECT_PATH = (3, 2, 1)
_DATA = 5
_LENGTH_DELIMITED = 2
_OTHER_SERVER_MESSAGES = frozenset(range(3, 12)) - {_READ_RESPONSE}
"""FromServer's other ``server_message`` members."""
_OTHER_DIRECT_MESSAGES = frozenset({3, 5, 6, 7})


STREAM_READ = StreamMethod(
    "/Ydb.Topic.V1.TopicService/StreamRead",
    pb.StreamReadMessage.FromClient,
    pb.StreamReadMessage.FromServer,
    "read stream",
)
"""The read stream's method (its responses parsed by a ``ReadResponseParser``)."""

DIRECT_READ = StreamMethod(
    "/Ydb.Topic.V1.TopicService/StreamDirectRead",
    pb.StreamDirectReadMessage.FromClient,
    pb.StreamDirectReadMessage.FromServer,
    "direct read stream",
)
"""The direct read stream's method (its responses parsed by a ``ReadResponseParser(direct=True)``)."""


class _GiveUp(Exception):
    """The walk met something it does not handle: protobuf parses the whole response instead."""


class ReadResponseParser:
    """A read stream's response deserializer (one per stream: the reader connection's read
    stream, or, ``direct``, one direct read stream).

    Returns each ``FromServer`` message; for one whose large payloads were left in the received
    bytes, ``payloads_of`` gives them (once).
    """

    __slots__ = ("_cls", "_direct", "_message", "_payloads")

    def __init__(self, *, direct: bool = False) -> None:
        self._direct = direct
        self._cls: Any = pb.StreamDirectReadMessage.FromServer if direct else pb.StreamReadMessage.FromServer
        self._message: Any = None
        self._payloads: ExternalPayloads | None = None

    def __call__(self, raw: bytes) -> Any:
        if len(raw) >= LARGE_RESPONSE:
            try:
                stripped, payloads = _Walk(raw, self._direct).strip()
            except (_GiveUp, IndexError):
                pass  # IndexError: a length prefix past the end; protobuf reports it as it would
            else:
                # protobuf reads any buffer: the stripped copy is not copied again
                message = self._cls.FromString(cast(bytes, stripped))
                self._message, self._payloads = message, payloads
                return message
        return self._cls.FromString(raw)

    def payloads_of(self, message: object) -> ExternalPayloads | None:
        """The payloads left out of ``message`` (None: it holds all of its own)."""
        if self._message is None:
            return None
        payloads = self._payloads if message is self._message else None
        self.forget()  # a stale one (its read failed) is dropped too
        return payloads

    def forget(self) -> None:
        """Drop what a response nobody asked about left (a new stream starts)."""
        self._message = self._payloads = None


class _Walk:
    """One response walked: ``strip`` returns it without its large payloads, and those.

    The walk only records edits to the received bytes: the large payloads' fields cut out, and
    the length prefixes of the messages around them rewritten. The stripped copy is then made in
    one pass, each byte kept copied once.
    """

    __slots__ = ("edits", "messages", "others", "path", "payload_bytes", "payloads", "view")

    def __init__(self, raw: bytes, direct: bool = False) -> None:
        self.path = _DIRECT_PATH if direct else _PATH
        self.others = _OTHER_DIRECT_MESSAGES if direct else _OTHER_SERVER_MESSAGES
        self.view = memoryview(raw)
        self.payloads: ExternalPayloads = {}
        self.payload_bytes = 0
        self.messages = 0
        self.edits: list[tuple[int, int, bytes]] = []
        """(start, end, replacement): ``view[start:end]`` becomes ``replacement``."""

    def strip(self) -> tuple[bytearray, ExternalPayloads]:
        view = self.view
        seen = False
        for number, wire_type, _, length_at, body, end in self._fields(0, len(view)):
            if number == _READ_RESPONSE:
                if wire_type != _LENGTH_DELIMITED or seen:
                    raise _GiveUp  # a second one would be merged into the first
                seen = True
                self._resize(length_at, body, end, self._container(body, end, ()))
            elif number in self.others:
                raise _GiveUp  # another member of the oneof: protobuf keeps the last one only
        if self.payload_bytes * 2 < len(view):
            raise _GiveUp  # mostly small payloads: copying the rest would cost more than it saves
        out = bytearray()
        pos = 0
        for start, end, replacement in sorted(self.edits):
            out += view[pos:start]
            out += replacement
            pos = end
        out += view[pos:]
        return out, self.payloads

    def _container(self, start: int, end: int, where: tuple[int, ...]) -> int:
        """Walk the message at ``[start, end)`` that ``where`` leads to (``()``: the ReadResponse,
        then a partition data's and a batch's indexes) down to its ``MessageData``; return how
        many bytes it loses."""
        path = self.path
        depth = len(where)
        child_number = path[depth]
        removed = 0
        index = 0
        for number, wire_type, _, length_at, body, field_end in self._fields(start, end):
            if number == child_number and wire_type == _LENGTH_DELIMITED:
                if index and path is _DIRECT_PATH and not depth:
                    raise _GiveUp  # a second PartitionData would be merged into the first
                child = (*where, index)
                walk = self._container if depth + 1 < len(path) else self._message
                removed += self._resize(length_at, body, field_end, walk(body, field_end, child))
                index += 1
        return removed

    def _message(self, start: int, end: int, where: tuple[int, ...]) -> int:
        """Cut the ``data`` field out of the ``MessageData`` at ``[start, end)`` if it is large;
        return how many bytes the message loses."""
        self.messages += 1
        if self.messages > MAX_WALKED_MESSAGES or (self.messages > _GIVE_UP_WITHOUT_LARGE and not self.payloads):
            raise _GiveUp
        removed = 0
        has_data = False
        for number, wire_type, field_start, _, body, field_end in self._fields(start, end):
            if number == _DATA and wire_type == _LENGTH_DELIMITED:
                if has_data:
                    raise _GiveUp  # the last one would win
                has_data = True
                if field_end - body >= LARGE_PAYLOAD:
                    self.payloads[where] = self.view[body:field_end]
                    self.payload_bytes += field_end - body
                    self.edits.append((field_start, field_end, b""))
                    removed = field_end - field_start
        return removed

    def _resize(self, length_at: int, body: int, end: int, removed: int) -> int:
        """A nested message at ``[body, end)`` lost ``removed`` bytes: rewrite its length prefix
        (at ``length_at``); return how many bytes its parent lost with it."""
        if not removed:
            return 0
        prefix = _varint_bytes(end - body - removed)
        self.edits.append((length_at, body, prefix))
        return removed + (body - length_at) - len(prefix)

    def _fields(self, start: int, end: int) -> Any:
        """(number, wire type, field start, where a length prefix would start, value start, field
        end) of each field in ``[start, end)``."""
        view = self.view
        pos = start
        while pos < end:
            tag, value = _varint(view, pos)
            wire_type = tag & 7
            length_at = value
            if wire_type == 0:
                _, field_end = _varint(view, value)
            elif wire_type == _LENGTH_DELIMITED:
                size, value = _varint(view, value)
                field_end = value + size
            elif wire_type == 1:
                field_end = value + 8
            elif wire_type == 5:
                field_end = value + 4
            else:
                raise _GiveUp  # groups: not in this protocol
            if field_end > end:
                raise _GiveUp
            yield tag >> 3, wire_type, pos, length_at, value, field_end
            pos = field_end


def _varint(view: memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    result = shift = 0
    while True:
        byte = view[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _GiveUp


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def external_of(payloads: ExternalPayloads, part: int, batch: int, records: Any) -> dict[int, memoryview] | None:
    """The payloads left out of one server batch's ``records``, by their messages' offsets.

    Offsets that repeat within the batch (a malformed response) would make that lookup ambiguous:
    the payloads are then put back into their records, as protobuf would have parsed them."""
    found = [(message, view) for (p, b, message), view in payloads.items() if p == part and b == batch]
    if not found:
        return None
    offsets = [record.offset for record in records]
    if len(set(offsets)) < len(offsets):
        for message, view in found:
            records[message].data = bytes(view)
        return None
    return {offsets[message]: view for message, view in found}
