"""Retry policy: exponential backoff with full jitter, bounded by attempts and total time."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import grpc

from ._errors import InvalidArgumentError, YdbTopicError, error_from_grpc

T = TypeVar("T")


@dataclass(frozen=True)
class BackoffSchedule:
    """Delay before retry ``n`` (0-based) is uniform in ``[0, min(cap, base * 2**n)]`` (full jitter)."""

    base: float
    cap: float

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        return float(rand()) * min(self.cap, self.base * (2.0 ** min(attempt, 32)))


FAST_BACKOFF = BackoffSchedule(base=0.01, cap=1.0)
"""For transient unavailability: a lost connection, an aborted operation."""

SLOW_BACKOFF = BackoffSchedule(base=0.5, cap=10.0)
"""For overload: give the server room to recover."""


@dataclass(frozen=True)
class RetryPolicy:
    """How failed operations are retried.

    ``max_attempts`` counts every try, the first included (``None``: unbounded);
    ``max_elapsed`` bounds the total time in seconds (``None``: unbounded).
    Errors are retried only when they say a retry is safe (see ``YdbTopicError.is_retriable``).
    """

    max_attempts: int | None = 10
    max_elapsed: float | None = 60.0
    fast: BackoffSchedule = field(default=FAST_BACKOFF)
    slow: BackoffSchedule = field(default=SLOW_BACKOFF)

    def __post_init__(self) -> None:
        attempts, elapsed = self.max_attempts, self.max_elapsed
        if attempts is not None and (not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1):
            raise InvalidArgumentError(f"max_attempts must be an int of at least 1 or None, got {attempts!r}")
        if elapsed is not None and (
            not isinstance(elapsed, (int, float)) or isinstance(elapsed, bool) or not elapsed >= 0
        ):
            raise InvalidArgumentError(f"max_elapsed must be a number >= 0 or None, got {elapsed!r}")

    @classmethod
    def no_retries(cls) -> RetryPolicy:
        """A policy that tries exactly once."""
        return cls(max_attempts=1, max_elapsed=None)

    def next_delay(self, error: BaseException, attempt: int, started: float, *, idempotent: bool) -> float | None:
        """Seconds to wait before retrying after ``error`` on try ``attempt`` (1-based), or None to give up.

        ``started`` is the ``time.monotonic()`` of the first try.
        """
        err = as_ydb_error(error)
        if err is None or not err.is_retriable(idempotent=idempotent):
            return None
        if self.max_attempts is not None and attempt >= self.max_attempts:
            return None
        schedule = self.slow if err.backoff == "slow" else self.fast
        delay = schedule.delay(attempt - 1)
        if self.max_elapsed is not None and time.monotonic() + delay - started > self.max_elapsed:
            return None
        return delay


DEFAULT_RETRY = RetryPolicy()


def as_ydb_error(error: BaseException) -> YdbTopicError | None:
    """The SDK error for ``error`` (translating gRPC errors), or None for anything else."""
    if isinstance(error, YdbTopicError):
        return error
    if isinstance(error, grpc.RpcError):
        return error_from_grpc(error)
    return None


async def retry_call(
    fn: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    idempotent: bool,
    on_retry: Callable[[BaseException, float], None] | None = None,
) -> T:
    """Await ``fn()`` until it succeeds or ``policy`` gives up; the last error is raised.

    ``on_retry(error, delay)`` is told about each failure that is going to be retried.
    """
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await fn()
        except Exception as exc:
            delay = policy.next_delay(exc, attempt, started, idempotent=idempotent)
            if delay is None:
                raise
            if on_retry is not None:
                on_retry(exc, delay)
        await anyio.sleep(delay)
