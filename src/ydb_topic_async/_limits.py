"""Size and range limits: what fits in a gRPC message, a WriteRequest and a message's metadata.

Every limit the SDK enforces lives here, so the writer (which packs requests), tracing (which
adds a trace context to a message's metadata) and the driver (which sizes its channels) agree.
"""

from __future__ import annotations

DEFAULT_MAX_MESSAGE_SIZE = 64_000_000
"""gRPC send/receive limit set on every channel; topic write requests stay below it. It is YDB's
own gRPC limit (``DEFAULT_GRPC_MESSAGE_SIZE_LIMIT``, 64,000,000 bytes, not 64 MiB), so a message
too large for the server is refused at the call that gave it, not by the server."""

MIN_MAX_MESSAGE_SIZE = 1024
"""The smallest ``max_message_size`` (and ``max_request_size``) a driver (a writer) accepts."""

REQUEST_SIZE_MARGIN = 64 * 1024
"""A writer's default request limit stays this far below the channel's gRPC message limit."""

MESSAGE_OVERHEAD = 48
"""Upper bound of the protobuf framing of one MessageData besides payload and metadata
(seq_no, created_at, uncompressed_size, tags and lengths)."""

METADATA_ITEM_OVERHEAD = 12
"""Upper bound of the framing of one metadata item besides its key and value."""

REQUEST_OVERHEAD = 64
"""FromClient/WriteRequest framing and the codec field."""

BATCH_TARGET_BYTES = 4 * 1024 * 1024
"""Requests are closed at about this size even when ``max_request_size`` allows more: past a few
MiB the per-request cost is already negligible, while serializing tens of MiB at once costs about
twice the CPU per byte (fresh, page-faulting allocations). A larger message still goes alone in a
request of up to ``max_request_size``."""

MAX_MESSAGES_PER_REQUEST = 1000
"""Requests carry at most this many messages: building and serializing a larger one costs more
CPU per message (a request of 5000 small messages about a fifth more than five of 1000), and
it bounds the work done between two awaits when a huge backlog is sent."""

MAX_METADATA_BYTES = 4096
"""Bytes (keys in UTF-8 plus values) one message's metadata may carry, as YDB counts them."""

MAX_METADATA_ITEMS = 1000
"""Metadata items one message may carry."""

MAX_PRODUCER_ID_LENGTH = 2048
"""Characters of a producer id."""

MAX_SEQ_NO = 2**63 - 1
"""Sequence numbers are int64 on the wire."""


def wire_size(payload_len: int, metadata_bytes: int = 0, metadata_items: int = 0) -> int:
    """An upper bound of one message's encoded size inside a WriteRequest: a payload of
    ``payload_len`` bytes and ``metadata_items`` items of ``metadata_bytes`` bytes of keys and
    values. A message fits a request when this is at most ``max_request_size - REQUEST_OVERHEAD``."""
    size = payload_len + MESSAGE_OVERHEAD
    if metadata_items:
        size += metadata_bytes + METADATA_ITEM_OVERHEAD * metadata_items
    return size
