"""Message codecs shared by the writer and the reader.

raw, gzip and zstd are built in. lz4 is a custom codec (YDB reserves ids 10000-19999 for
those): pass ``{LZ4_CODEC: lz4_encode}`` to a writer's ``encoders`` and
``{LZ4_CODEC: lz4_decode}`` to a reader's ``decoders``. Batches of payloads that are large in
bytes or in count are encoded and decoded in worker threads (these libraries release the GIL),
split into chunks that run in parallel, so the event loop keeps running. A transform a user
registers runs in one thread at a time unless marked ``ThreadSafe``.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import IntEnum
from typing import TypeVar

import anyio.to_thread
import lz4.frame
import zstandard

from ._errors import InvalidArgumentError, InvalidCodecError, UnsupportedCodecError

Transform = Callable[[bytes], bytes]


class Codec(IntEnum):
    """Codec ids of the YDB topic protocol."""

    RAW = 1
    GZIP = 2
    LZOP = 3
    ZSTD = 4


CodecFunctions = Mapping[int, Transform] | Mapping[Codec, Transform]
"""Codec functions by codec id, as users give them (``{Codec.ZSTD: fn}`` or ``{10000: fn}``)."""

CUSTOM_CODEC_MIN = 10000
CUSTOM_CODEC_MAX = 19999
LZ4_CODEC = 10001
"""The custom codec id this SDK uses for lz4 frames."""

OFF_LOOP_THRESHOLD = 16 * 1024
"""Payloads (or, on the writer, batches of payloads) at least this large are (de)compressed in
worker threads."""

def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


CODEC_THREADS = max(1, _usable_cpus() - 1)
"""How many worker threads (per event loop) the SDK lets (de)compress at once: one CPU fewer than
the process may use, so that the event loop's thread keeps one to itself (on two CPUs, two
codec threads and a server starved it for 10 ms at a time)."""

INLINE_MAX_PAYLOADS = 256
"""Fewer payloads than this (together smaller than ``OFF_LOOP_THRESHOLD``) are transformed on the
event loop: cheaper than a thread hop. Past a few hundred, the per-call overhead of a codec (a
gzip header and trailer, a context) outweighs the bytes."""

PARALLELISM = min(8, CODEC_THREADS)
"""How many worker threads one batch of payloads is spread across (the codecs release the GIL)."""

_T = TypeVar("_T")
_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


def codec_limiter() -> anyio.CapacityLimiter:
    """The SDK's own limit on codec worker threads for the running event loop.

    Not anyio's default thread limiter: that one is shared with the application (FastAPI runs
    its sync routes and dependencies through it), and compression must neither starve them nor
    wait behind them.
    """
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(CODEC_THREADS)
    return limiter


async def run_in_codec_thread(fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` in a worker thread, within ``codec_limiter``."""
    return await anyio.to_thread.run_sync(fn, *args, limiter=codec_limiter())


class _PerThread(threading.local):
    # zstandard's (de)compressor objects must not be shared between threads, and building one
    # per message costs as much as compressing a small message: each thread keeps its own.
    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor()
        self.decompressor = zstandard.ZstdDecompressor()


_per_thread = _PerThread()


def _zstd_compress(data: bytes) -> bytes:
    return _per_thread.compressor.compress(data)


_ONE_SHOT_MAX = 1 << 30
"""A zstd frame declaring at most this many bytes is decoded in one call."""


def _zstd_decompress(data: bytes) -> bytes:
    decompressor = _per_thread.decompressor
    if 0 <= zstandard.frame_content_size(data) <= _ONE_SHOT_MAX:
        # One call into a buffer of the size the frame declares (writers declare it by default):
        # the output is neither grown nor copied, and the GIL is not held while it is written.
        return decompressor.decompress(data)
    # A frame without a declared size (or an implausible one) needs the streaming reader.
    with decompressor.stream_reader(data) as reader:
        return reader.read()


def _identity(data: bytes) -> bytes:
    return data


def lz4_encode(data: bytes) -> bytes:
    """Compress one message as an lz4 frame."""
    return bytes(lz4.frame.compress(data))


def lz4_decode(data: bytes) -> bytes:
    """Decompress one lz4 frame."""
    return bytes(lz4.frame.decompress(data))


BUILTIN_ENCODERS: Mapping[int, Transform] = {
    Codec.RAW: _identity,
    Codec.GZIP: lambda data: gzip.compress(data, compresslevel=6, mtime=0),
    Codec.ZSTD: _zstd_compress,
}
BUILTIN_DECODERS: Mapping[int, Transform] = {
    Codec.RAW: _identity,
    Codec.GZIP: gzip.decompress,
    Codec.ZSTD: _zstd_decompress,
}


_BUFFER_READERS = frozenset({_zstd_decompress, gzip.decompress, lz4_decode, bytes})


def reads_buffers(fn: Transform) -> bool:
    """Whether ``fn`` (a decoder) takes any buffer, such as a ``memoryview``, not only ``bytes``:
    the built-in decoders do; users' decoders are given ``bytes``, as documented."""
    return fn in _BUFFER_READERS


def codec_name(codec: int) -> str:
    """A readable name for a codec id."""
    if codec == LZ4_CODEC:
        return "lz4 (custom 10001)"
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return f"custom {codec}" if CUSTOM_CODEC_MIN <= codec <= CUSTOM_CODEC_MAX else f"unknown {codec}"


_MAX_CODEC_ID = 2**31 - 1
"""Codec ids are int32 on the wire."""


def check_codec_id(value: object, what: str = "codec") -> int:
    """``value`` if it is a codec id (a positive int such as ``Codec.ZSTD``); ``InvalidCodecError``
    otherwise (a float, a bool, a name)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_CODEC_ID:
        hint = f" (use Codec.{value.upper()})" if isinstance(value, str) and value.upper() in Codec.__members__ else ""
        raise InvalidCodecError(f"{what} must be a codec id such as Codec.ZSTD, got {value!r}{hint}")
    return int(value)


def merge_codecs(builtin: Mapping[int, Transform], extra: CodecFunctions | None) -> dict[int, Transform]:
    """The built-in transforms plus user-registered ones; custom ids must be in the user range.

    A user's transform becomes a ``SerialTransform``, unless it is marked ``ThreadSafe``
    (``lz4_encode``/``lz4_decode`` keep no state: they stay as they are). Output other than
    bytes fails the one payload it was given, naming the codec.
    """
    merged = dict(builtin)
    if extra is not None and not isinstance(extra, Mapping):
        raise InvalidArgumentError(f"codecs must be a mapping of codec id to a callable, not {type(extra).__name__}")
    for codec, fn in (extra or {}).items():
        codec = check_codec_id(codec, "codec id")
        if codec not in builtin and not CUSTOM_CODEC_MIN <= codec <= CUSTOM_CODEC_MAX and codec not in set(Codec):
            raise InvalidArgumentError(
                f"custom codec id {codec} is outside the range {CUSTOM_CODEC_MIN}-{CUSTOM_CODEC_MAX}"
            )
        if not callable(fn):
            raise InvalidArgumentError(f"codec {codec_name(codec)} needs a callable bytes -> bytes")
        if fn in (lz4_encode, lz4_decode):
            merged[codec] = fn
        elif isinstance(fn, ThreadSafe):
            merged[codec] = _checked(fn.fn, codec)
        else:
            merged[codec] = SerialTransform(fn, codec)
    return merged


class ThreadSafe:
    """Marks an encoder or decoder that may run in several threads at once, so that the SDK
    spreads a large batch over its codec threads: ``encoders={10007: ThreadSafe(my_encode)}``.

    Without it, a transform you register runs in one thread at a time (see ``SerialTransform``):
    right for objects such as ``zstandard.ZstdDecompressor().decompress``, which corrupt data
    when two threads use one at once.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Transform) -> None:
        if not callable(fn):
            raise InvalidArgumentError(f"ThreadSafe needs a callable bytes -> bytes, not {type(fn).__name__}")
        self.fn = fn

    def __call__(self, data: bytes) -> bytes:
        return self.fn(data)

    def __repr__(self) -> str:
        return f"ThreadSafe({self.fn!r})"


def _as_bytes(out: object, codec: int) -> bytes:
    """A transform's output as bytes; ``TypeError`` naming the codec for anything else."""
    if type(out) is bytes:
        return out
    if isinstance(out, (bytearray, memoryview)):
        return bytes(out)
    raise TypeError(f"the transform for codec {codec_name(codec)} returned {type(out).__name__}, not bytes")


def _checked(fn: Transform, codec: int) -> Transform:
    def transform(data: bytes) -> bytes:
        return _as_bytes(fn(data), codec)

    return transform


class _OwnerLocks:
    """One lock per object behind users' transforms, for as long as a ``SerialTransform`` uses it.

    A transform is usually a bound method (``ZstdDecompressor().decompress``): the object it is
    bound to holds the state, so two transforms of one object (given to two readers, or for two
    codec ids) share a lock. Such objects may not support weak references, so locks are counted
    by their users and dropped with the last one (a ``SerialTransform`` keeps its object alive,
    so the id cannot be reused meanwhile).
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[int, tuple[threading.Lock, int]] = {}

    def take(self, fn: Callable[..., object], user: object) -> threading.Lock:
        owner = getattr(fn, "__self__", None)
        if owner is None or isinstance(owner, types.ModuleType):
            owner = fn  # a plain function (or a module's): its own lock
        key = id(owner)
        with self._guard:
            lock, users = self._locks.get(key) or (threading.Lock(), 0)
            self._locks[key] = (lock, users + 1)
        weakref.finalize(user, self._release, key)
        return lock

    def _release(self, key: int) -> None:
        with self._guard:
            lock, users = self._locks[key]
            if users > 1:
                self._locks[key] = (lock, users - 1)
            else:
                del self._locks[key]


_owner_locks = _OwnerLocks()


class SerialTransform:
    """A user's encoder or decoder, made safe to share: it runs in one thread at a time.

    Objects such as ``zstandard.ZstdDecompressor`` corrupt data when two threads use one at once,
    and the SDK (de)compresses in several worker threads: calls of transforms of one object are
    serialized (``transform_batch`` runs a batch that uses one in a single worker thread, never
    on the event loop, where waiting for the lock would stall it).
    """

    __slots__ = ("__weakref__", "codec", "fn", "lock")

    def __init__(self, fn: Transform, codec: int) -> None:
        self.fn = fn
        self.codec = codec
        self.lock = _owner_locks.take(fn, self)

    def __call__(self, data: bytes) -> bytes:
        with self.lock:
            out: object = self.fn(data)
        return _as_bytes(out, self.codec)


class PartialTransformError(Exception):
    """Some payloads of a batch could not be transformed.

    ``results`` has an entry per payload (None where it failed); ``failures`` maps the failed
    payloads' indexes to their exceptions.
    """

    def __init__(self, results: list[bytes | None], failures: dict[int, BaseException]) -> None:
        super().__init__(f"{len(failures)} of {len(results)} payloads failed")
        self.results = results
        self.failures = failures


def transform_all(fn: Transform, payloads: Iterable[bytes]) -> list[bytes]:
    """``fn`` applied to each payload, in order (one pass: ``payloads`` may be a generator);
    ``PartialTransformError`` when some fail."""
    results: list[bytes | None] = []
    append = results.append
    failures: dict[int, BaseException] = {}
    for index, data in enumerate(payloads):
        try:
            append(fn(data))
        except Exception as exc:
            append(None)
            failures[index] = exc
    if failures:
        raise PartialTransformError(results, failures)
    return results  # type: ignore[return-value]  # no failures: no None left


async def transform_batch(
    sizes: Sequence[int], work: Callable[[int, int], list[bytes]], *, serial: bool = False
) -> list[bytes]:
    """``work(0, len(sizes))``: the transformed payloads of a whole batch, in order.

    ``sizes`` are the payloads' costs in bytes. Inline when there is little to do (``fits_inline``),
    else in codec worker threads, the batch split into chunks of similar size (``split_evenly``)
    that run in parallel. ``serial`` (the batch uses a ``SerialTransform``): in one worker thread,
    whatever its size. The writer's encoding and the reader's decoding both run through here.
    ``work(start, end)`` may raise ``PartialTransformError`` for its range; the failures of every
    chunk are gathered into one for the whole batch.
    """
    count = len(sizes)
    total = sum(sizes)
    if serial:
        return await run_in_codec_thread(work, 0, count)
    if fits_inline(total, count):
        return work(0, count)
    bounds = split_evenly(sizes, total)
    chunks: list[list[bytes | None]] = [[] for _ in bounds]
    failures: dict[int, BaseException] = {}
    errors: list[BaseException] = []

    async def run_chunk(index: int, start: int, end: int) -> None:
        try:
            chunks[index] = list(await run_in_codec_thread(work, start, end))
        except PartialTransformError as exc:
            chunks[index] = exc.results
            failures.update({start + offset: error for offset, error in exc.failures.items()})
        except Exception as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for index, (start, end) in enumerate(bounds):
            tg.start_soon(run_chunk, index, start, end)
    if errors:
        raise errors[0]
    results = [data for chunk in chunks for data in chunk]
    if failures:
        raise PartialTransformError(results, failures)
    return results  # type: ignore[return-value]  # no failures: no None left


def fits_inline(size: int, count: int) -> bool:
    """Whether ``count`` payloads of ``size`` bytes in all are cheap enough to transform on the loop.

    Judged for a whole batch, not per payload: many small payloads cost as much loop time as one
    large one.
    """
    return size < OFF_LOOP_THRESHOLD and count < INLINE_MAX_PAYLOADS


def split_evenly(sizes: Sequence[int], total: int) -> list[tuple[int, int]]:
    """Index ranges ``[start, end)`` of consecutive chunks of ``sizes`` (summing to ``total``) for
    ``PARALLELISM`` threads: about ``total / PARALLELISM`` bytes or ``1 / PARALLELISM`` of the
    items each, whichever comes first, but never below the inline limits (a tiny chunk would pay
    a thread hop for nothing)."""
    target = max(OFF_LOOP_THRESHOLD, -(-total // PARALLELISM))
    target_count = max(INLINE_MAX_PAYLOADS, -(-len(sizes) // PARALLELISM))
    bounds: list[tuple[int, int]] = []
    start = 0
    size = 0
    for index, item in enumerate(sizes):
        size += item
        if size >= target or index + 1 - start >= target_count:
            bounds.append((start, index + 1))
            start, size = index + 1, 0
    if start < len(sizes):
        bounds.append((start, len(sizes)))
    return bounds


def lookup(table: Mapping[int, Transform], codec: int, what: str) -> Transform:
    """The transform for ``codec``; raise ``UnsupportedCodecError`` naming it when none is registered."""
    fn = table.get(codec)
    if fn is None:
        hint = " (register lz4_encode/lz4_decode for it)" if codec == LZ4_CODEC else ""
        raise UnsupportedCodecError(f"no {what} registered for codec {codec_name(codec)}{hint}")
    return fn

