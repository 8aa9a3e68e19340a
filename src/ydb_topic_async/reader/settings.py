"""A reader's options, checked once: ``ReaderSettings``.

``driver.topic.reader(topics, consumer=..., **options)`` and the supervised ``Consumer`` turn
their keyword options into one ``ReaderSettings``, which checks every value when it is made
(``InvalidArgumentError`` naming the option; an unknown option is a ``TypeError``, as for any
call). What depends on the driver (the default reconnect policy, the topics' full paths) and a
name for the reader when none is given are filled in when a reader is built from the settings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from .. import _codecs
from .._errors import InvalidArgumentError
from .._retry import RetryPolicy
from .._validate import check_int, check_optional_int, check_seconds
from .messages import CommitAck, PartitionSession, StartOffsets

DEFAULT_BUFFER_SIZE = 50 * 1024 * 1024

StartResult = int | StartOffsets | None
OnPartitionStart = Callable[[PartitionSession], StartResult | Awaitable[StartResult]]
"""``on_partition_start(session)``: may return a read offset, ``StartOffsets`` or None; may be a coroutine."""
OnPartitionStop = Callable[[PartitionSession], Awaitable[None] | None]
"""``on_partition_stop(session)``: told when a partition session ends; may be a coroutine."""
OnCommit = Callable[[CommitAck], None]
"""``on_commit(ack)``: told each time the server moves a partition session's committed offset."""


class ReaderOptions(TypedDict, total=False):
    """The keyword arguments of ``driver.topic.reader`` after ``consumer`` (the fields of
    ``ReaderSettings`` but ``consumer``)."""

    buffer_size_bytes: int
    decoders: _codecs.CodecFunctions | None
    on_partition_start: OnPartitionStart | None
    on_partition_stop: OnPartitionStop | None
    reader_name: str | None
    retry: RetryPolicy | None
    auto_partitioning_support: bool
    graceful_stop_timeout: float
    credit_release_fraction: float
    token_refresh_interval: float
    init_timeout: float
    partition_max_in_flight_bytes: int | None
    on_commit: OnCommit | None
    direct_read: bool


@dataclass(frozen=True)
class ReaderSettings:
    """The options of one reader, each checked when the settings are made
    (``InvalidArgumentError`` naming the option).

    The fields are ``consumer`` and the keyword options of ``driver.topic.reader``
    (``TopicClient.reader`` describes each); ``driver.topic.reader(topics, consumer=c,
    **options)`` makes one from them, and ``settings.options()`` turns settings back into those
    keywords (all but ``consumer``).
    """

    consumer: str | None
    buffer_size_bytes: int = DEFAULT_BUFFER_SIZE
    decoders: _codecs.CodecFunctions | None = None
    on_partition_start: OnPartitionStart | None = None
    on_partition_stop: OnPartitionStop | None = None
    reader_name: str | None = None
    retry: RetryPolicy | None = None
    auto_partitioning_support: bool = True
    graceful_stop_timeout: float = 10.0
    credit_release_fraction: float = 0.25
    token_refresh_interval: float = 5.0
    init_timeout: float = 30.0
    partition_max_in_flight_bytes: int | None = None
    on_commit: OnCommit | None = None
    direct_read: bool = False
    decoder_table: Mapping[int, _codecs.Transform] = field(init=False, repr=False, compare=False)
    """Every decoder the reader has: the built-in ones and ``decoders``."""

    def __post_init__(self) -> None:
        assign = object.__setattr__  # frozen: the checked (normalised) values replace the given ones
        consumer = self.consumer
        if consumer is not None and (not isinstance(consumer, str) or not consumer):
            raise InvalidArgumentError(f"consumer must be a non-empty string or None, got {consumer!r}")
        check_int(self.buffer_size_bytes, "buffer_size_bytes", minimum=1024)
        fraction = self.credit_release_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise InvalidArgumentError("credit_release_fraction must be in (0, 1]")
        assign(self, "graceful_stop_timeout", check_seconds(self.graceful_stop_timeout, "graceful_stop_timeout"))
        assign(self, "token_refresh_interval", check_seconds(self.token_refresh_interval, "token_refresh_interval"))
        assign(self, "init_timeout", check_seconds(self.init_timeout, "init_timeout", positive=True))
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a RetryPolicy or None, got {self.retry!r}")
        if self.reader_name is not None and not isinstance(self.reader_name, str):
            raise InvalidArgumentError(f"reader_name must be a string or None, got {self.reader_name!r}")
        limit = check_optional_int(self.partition_max_in_flight_bytes, "partition_max_in_flight_bytes")
        for name, fn in (
            ("on_partition_start", self.on_partition_start),
            ("on_partition_stop", self.on_partition_stop),
            ("on_commit", self.on_commit),
        ):
            if fn is not None and not callable(fn):
                raise InvalidArgumentError(f"{name} must be callable")
        if consumer is None and limit:
            # Without a consumer nothing is committed: the limit would never free again and
            # the reader would stop for good after the first ``partition_max_in_flight_bytes``.
            raise InvalidArgumentError(
                "partition_max_in_flight_bytes needs a consumer: a reader without one commits"
                " nothing, so the bytes it counts would never be freed"
            )
        if not isinstance(self.direct_read, bool):
            raise InvalidArgumentError(f"direct_read must be True or False, got {self.direct_read!r}")
        assign(self, "decoder_table", _codecs.merge_codecs(_codecs.BUILTIN_DECODERS, self.decoders))
        assign(self, "auto_partitioning_support", bool(self.auto_partitioning_support))

    def replace(self, **changes: Any) -> ReaderSettings:
        """These settings with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def options(self) -> ReaderOptions:
        """The settings as keyword options for ``driver.topic.reader`` (``consumer`` apart)."""
        return cast(
            ReaderOptions,
            {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init and f.name != "consumer"},
        )


__all__ = ["DEFAULT_BUFFER_SIZE", "OnCommit", "OnPartitionStart", "OnPartitionStop", "ReaderOptions", "ReaderSettings"]
