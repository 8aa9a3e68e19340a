"""A writer's options, checked once: ``WriterSettings``.

``driver.topic.writer(path, **options)``, the keyed writer, the transactional writer and the
Spark sink all turn their keyword options into one ``WriterSettings``, which checks every value
when it is made (``InvalidArgumentError`` naming the option) and resolves what follows from the
options alone (the codec: a fixed one, or ``"auto"``'s choice per batch). What a kind of writer
refuses (``check_keyed``, ``check_transactional``, ``check_partition_writer``) and what depends
on the driver (``resolve``: the topic's full path, the request size limit under the channel's
message size limit, the default reconnect policy) are checked here too, by the writer's
constructor, so every option fails at the user's call. The writer's machinery (the sender, the
batcher) takes the settings and the resolved values as they are.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict, cast

from .. import _codecs
from .._errors import InvalidArgumentError
from .._limits import MAX_PRODUCER_ID_LENGTH, MIN_MAX_MESSAGE_SIZE, REQUEST_SIZE_MARGIN
from .._retry import RetryPolicy
from .._validate import check_optional_int, check_seconds, check_timeout, check_utf8, check_wait

if TYPE_CHECKING:
    from .._context import ClientContext

AUTO_CODEC: Final = "auto"
"""``codec="auto"``: the writer picks, batch by batch, the codec that makes its batches smallest."""
DEFAULT_MAX_BUFFER_MESSAGES = 100_000
DEFAULT_MAX_BUFFER_BYTES = 64 * 1024 * 1024
LANE_SUFFIX_ROOM = 11
"""Characters a keyed writer's partition writer adds to the producer id: ``_`` and a partition
id (up to 10 digits)."""


class KeyedWriterOptions(TypedDict, total=False):
    """The keyword arguments of ``driver.topic.keyed_writer``: those of ``driver.topic.writer``
    except ``partition_id``, ``message_group_id`` and ``auto_seqno`` (the keyed writer picks
    partitions and numbers messages itself)."""

    producer_id: str | None
    direct_write: bool
    session_metadata: Mapping[str, str] | None
    codec: int | Literal["auto"] | None
    encoders: _codecs.CodecFunctions | None
    auto_created_at: bool
    max_buffer_messages: int | None
    max_buffer_bytes: int | None
    buffer_wait_timeout: float | None
    retry: RetryPolicy | None
    max_request_size: int | None
    token_refresh_interval: float
    init_timeout: float
    wait_for_topic: float | None


class WriterOptions(KeyedWriterOptions, total=False):
    """The keyword arguments of ``driver.topic.writer`` (the fields of ``WriterSettings``)."""

    partition_id: int | None
    message_group_id: str | None
    auto_seqno: bool


@dataclass(frozen=True)
class WriterSettings:
    """The options of one writer, each checked when the settings are made
    (``InvalidArgumentError`` naming the option).

    The fields are the keyword options of ``driver.topic.writer`` (``TopicClient.writer``
    describes each); ``driver.topic.writer(path, **options)`` makes one from its options, and
    ``settings.options()`` turns settings back into those keywords.
    """

    producer_id: str | None = None
    partition_id: int | None = None
    message_group_id: str | None = None
    direct_write: bool = False
    session_metadata: Mapping[str, str] | None = None
    codec: int | Literal["auto"] | None = None
    encoders: _codecs.CodecFunctions | None = None
    auto_seqno: bool = True
    auto_created_at: bool = True
    max_buffer_messages: int | None = DEFAULT_MAX_BUFFER_MESSAGES
    max_buffer_bytes: int | None = DEFAULT_MAX_BUFFER_BYTES
    buffer_wait_timeout: float | None = None
    retry: RetryPolicy | None = None
    max_request_size: int | None = None
    token_refresh_interval: float = 5.0
    init_timeout: float = 30.0
    wait_for_topic: float | None = None
    picks_codec: bool = field(init=False, repr=False, compare=False)
    """``codec="auto"``: each batch's codec is picked among ``encoder_table``'s."""
    batch_codec: int = field(init=False, repr=False, compare=False)
    """The codec a batch goes with unless one is picked for it: ``codec``, RAW with ``"auto"``."""
    encoder: _codecs.Transform = field(init=False, repr=False, compare=False)
    """The function of ``batch_codec`` (from ``encoders`` or the built-in ones)."""
    encoder_table: Mapping[int, _codecs.Transform] = field(init=False, repr=False, compare=False)
    """Every encoder the writer has: the built-in ones and ``encoders``."""

    def __post_init__(self) -> None:
        assign = object.__setattr__  # frozen: the checked (normalised) values replace the given ones
        producer_id = self.producer_id
        group = self.message_group_id
        if group is not None:
            if not isinstance(group, str) or not group or len(group) > MAX_PRODUCER_ID_LENGTH:
                raise InvalidArgumentError(
                    f"message_group_id must be a non-empty string of at most {MAX_PRODUCER_ID_LENGTH} characters"
                )
            check_utf8(group, "message_group_id")
            if self.partition_id is not None:
                raise InvalidArgumentError(
                    "message_group_id and partition_id exclude each other: a write session is placed by one of them"
                )
            if producer_id is None:
                producer_id = ""  # the message group is the deduplication identity
                assign(self, "producer_id", producer_id)
            elif producer_id and producer_id != group:
                raise InvalidArgumentError(
                    "YDB accepts a message_group_id only without a producer_id or equal to it (it refuses other"
                    f" pairs with BAD_REQUEST): got producer_id={producer_id!r}, message_group_id={group!r}"
                )
        if producer_id is None:
            assign(self, "producer_id", uuid.uuid4().hex)
        elif not isinstance(producer_id, str) or len(producer_id) > MAX_PRODUCER_ID_LENGTH:
            raise InvalidArgumentError(f"producer_id must be a string of at most {MAX_PRODUCER_ID_LENGTH} characters")
        else:
            check_utf8(producer_id, "producer_id")
        check_optional_int(self.partition_id, "partition_id")
        metadata = dict(self.session_metadata or {})
        for meta_key, meta_value in metadata.items():
            if not isinstance(meta_key, str) or not isinstance(meta_value, str):
                raise InvalidArgumentError("session_metadata must map str to str")
            check_utf8(meta_key, "a session_metadata key")
            check_utf8(meta_value, f"session_metadata[{meta_key!r}]")
        assign(self, "session_metadata", metadata)
        check_optional_int(self.max_buffer_messages, "max_buffer_messages", minimum=1)
        check_optional_int(self.max_buffer_bytes, "max_buffer_bytes", minimum=1)
        assign(self, "buffer_wait_timeout", check_timeout(self.buffer_wait_timeout, "buffer_wait_timeout"))
        assign(self, "token_refresh_interval", check_seconds(self.token_refresh_interval, "token_refresh_interval"))
        assign(self, "init_timeout", check_seconds(self.init_timeout, "init_timeout", positive=True))
        assign(self, "wait_for_topic", check_wait(self.wait_for_topic, "wait_for_topic"))
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a RetryPolicy or None, got {self.retry!r}")
        check_optional_int(self.max_request_size, "max_request_size", minimum=MIN_MAX_MESSAGE_SIZE)
        encoders = _codecs.merge_codecs(_codecs.BUILTIN_ENCODERS, self.encoders)
        assign(self, "encoder_table", encoders)
        # The one place ``codec="auto"`` is resolved: batches start as RAW, and the batcher picks.
        picks = self.codec == AUTO_CODEC
        assign(self, "picks_codec", picks)
        if picks:
            codec = int(_codecs.Codec.RAW)
        else:
            codec = int(_codecs.Codec.RAW) if self.codec is None else _codecs.check_codec_id(self.codec)
            assign(self, "codec", codec)
        assign(self, "batch_codec", codec)
        assign(self, "encoder", _codecs.lookup(encoders, codec, "encoder"))
        assign(self, "auto_seqno", bool(self.auto_seqno))
        assign(self, "auto_created_at", bool(self.auto_created_at))
        assign(self, "direct_write", bool(self.direct_write))

    def replace(self, **changes: Any) -> WriterSettings:
        """These settings with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def options(self) -> WriterOptions:
        """The settings as keyword options for ``driver.topic.writer``."""
        return cast(WriterOptions, {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init})

    def request_limit(self, channel_limit: int) -> int:
        """``max_request_size``, or its default under ``channel_limit`` (the driver's
        ``max_message_size``); a given size above the channel's limit is refused."""
        size = self.max_request_size
        if size is None:
            return channel_limit - REQUEST_SIZE_MARGIN
        if size > channel_limit:
            raise InvalidArgumentError(
                f"max_request_size must be an int between {MIN_MAX_MESSAGE_SIZE} and the driver's"
                f" max_message_size ({channel_limit})"
            )
        return size

    def resolve(self, context: ClientContext, path: str) -> ResolvedSettings:
        """What these settings come to on the driver of ``context`` for the topic ``path``
        (``InvalidArgumentError`` for a path or a ``max_request_size`` it refuses)."""
        return ResolvedSettings(
            path=context.full_path(path),
            max_request_size=self.request_limit(context.max_message_size),
            retry=self.retry or context.stream_retry,
        )

    # --- what each kind of writer refuses ------------------------------------------------

    def check_partition_writer(self) -> None:
        """Refuse what a writer of one partition (``TopicWriter``) cannot do with these settings."""
        if self.direct_write and self.partition_id is None:
            raise InvalidArgumentError("direct_write needs partition_id: it connects to that partition's location")

    def check_keyed(self) -> None:
        """Refuse the options a keyed writer does not take: it picks partitions and numbers
        messages itself, and each partition's writer adds ``_{partition_id}`` to the producer id."""
        if self.partition_id is not None or self.message_group_id is not None or not self.auto_seqno:
            raise InvalidArgumentError(
                "a keyed writer picks partitions and numbers messages itself:"
                " partition_id, message_group_id and auto_seqno are not its options"
            )
        producer_id = self.producer_id
        if not producer_id or len(producer_id) > MAX_PRODUCER_ID_LENGTH - LANE_SUFFIX_ROOM:
            raise InvalidArgumentError(
                f"producer_id must be a non-empty string of at most {MAX_PRODUCER_ID_LENGTH - LANE_SUFFIX_ROOM}"
                " characters (each partition's writer adds its partition id to it)"
            )

    def check_transactional(self) -> None:
        """Refuse retries without deduplication in a transaction (a message resent after a lost
        acknowledgement would be committed twice), and waiting for the topic inside one."""
        if self.wait_for_topic is not None:
            raise InvalidArgumentError(
                "a transactional writer does not wait for its topic (wait_for_topic): the transaction, its"
                " session and what it read would be held open meanwhile; wait before beginning it, e.g."
                " await driver.topic.describe_topic(path, wait_for_topic=...)"
            )
        deduplicated = bool(self.producer_id or self.message_group_id)
        if not deduplicated and (self.retry is None or self.retry.max_attempts != 1):
            raise InvalidArgumentError(
                "a transactional writer retries only with a producer id: without one, a message resent"
                " after a lost acknowledgement would be committed twice (pass producer_id=..., or no retry)"
            )


@dataclass(frozen=True)
class ResolvedSettings:
    """What a writer's settings come to on one driver (``WriterSettings.resolve``), resolved once
    when the writer is made and given, with the settings, to its sender and batcher."""

    path: str
    """The topic's full path."""
    max_request_size: int
    """The most bytes one WriteRequest may hold: ``max_request_size``, or its default under the
    driver's ``max_message_size``."""
    retry: RetryPolicy
    """The reconnect policy: ``retry``, or the driver's ``stream_retry``."""


__all__ = [
    "AUTO_CODEC",
    "DEFAULT_MAX_BUFFER_BYTES",
    "DEFAULT_MAX_BUFFER_MESSAGES",
    "KeyedWriterOptions",
    "ResolvedSettings",
    "WriterOptions",
    "WriterSettings",
]
