"""Retries: the policy users configure, and the one state object every retry loop runs on.

``RetryPolicy`` says how long to keep trying (attempts, total time) and how to back off
(exponential with full jitter: a fast schedule for transient faults, a slow one for overload).
``RetryState`` applies a policy to one loop: unary calls, the writer's and the reader's
reconnects, ``retry_tx``, ``wait_ready`` and the integrations' consumer restarts all count their
failures, pick their delays and decide to give up through it. A loop that makes progress calls
``reset``, so a budget bounds one streak of failures, not the object's lifetime. A wait for a
topic to be created (``topic_wait``) is one more such state, run by the same loops: a writer's
stream keeper, and ``retry_call`` around DescribeTopic.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from ._errors import Backoff, InvalidArgumentError, TopicNotFoundError, YdbTopicError, error_from_grpc

T = TypeVar("T")


@dataclass(frozen=True)
class BackoffSchedule:
    """Delay before retry ``n`` (0-based) is uniform in ``[floor * d, d]`` with
    ``d = min(cap, base * 2**n)``: full jitter by default (``floor=0``), "equal jitter" with
    ``floor=0.5`` (never less than half the exponential delay)."""

    base: float
    cap: float
    floor: float = 0.0

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        bound = min(self.cap, self.base * (2.0 ** min(attempt, 32)))
        return bound * (self.floor + (1.0 - self.floor) * float(rand()))


FAST_BACKOFF = BackoffSchedule(base=0.01, cap=1.0)
"""For transient unavailability: a lost connection, an aborted operation."""

SLOW_BACKOFF = BackoffSchedule(base=0.5, cap=10.0)
"""For overload: give the server room to recover."""


@dataclass(frozen=True)
class RetryPolicy:
    """How failed operations are retried.

    ``max_attempts`` counts every try of one streak of failures, the first included (``None``:
    unbounded); ``max_elapsed`` bounds the streak's total time in seconds (``None``: unbounded).
    Errors are retried only when they say a retry is safe (see ``YdbTopicError.is_retriable``);
    ``fast`` is the backoff for transient faults, ``slow`` for overload.

    Unary calls use ``RetryPolicy()`` (a 60-second budget, further bounded by a call's
    ``timeout``); writers and readers reconnect for as long as they are open
    (``RetryPolicy.forever()``) unless given a policy with a budget, e.g.
    ``retry=RetryPolicy(max_elapsed=120)`` to fail after two minutes without a connection.
    """

    max_attempts: int | None = None
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
        for name, schedule in (("fast", self.fast), ("slow", self.slow)):
            if not isinstance(schedule, BackoffSchedule):
                raise InvalidArgumentError(f"{name} must be a BackoffSchedule, got {schedule!r}")

    @classmethod
    def no_retries(cls) -> RetryPolicy:
        """A policy that tries exactly once."""
        return cls(max_attempts=1, max_elapsed=None)

    @classmethod
    def forever(cls) -> RetryPolicy:
        """Retry retriable failures without limit: what writers and readers do by default, for as
        long as they are open."""
        return cls(max_attempts=None, max_elapsed=None)

    def next_delay(self, error: BaseException, attempt: int, started: float, *, idempotent: bool) -> float | None:
        """Seconds to wait before retrying after ``error`` on try ``attempt`` (1-based), or None to give up.

        ``started`` is the ``time.monotonic()`` of the first try.
        """
        return self._delay(ydb_backoff(error, idempotent=idempotent), attempt, started, time.monotonic())

    def _delay(
        self, backoff: Backoff | None, attempt: int, started: float, now: float, *, last_try_at_end: bool = False
    ) -> float | None:
        if backoff is None or backoff == "none":
            return None
        if self.max_attempts is not None and attempt >= self.max_attempts:
            return None
        schedule = self.slow if backoff == "slow" else self.fast
        delay = schedule.delay(attempt - 1)
        if self.max_elapsed is not None:
            left = self.max_elapsed - (now - started)
            if last_try_at_end:
                return min(delay, left) if left > 0 else None
            if delay > left:
                return None
        return delay


DEFAULT_RETRY = RetryPolicy()
"""For unary calls: a 60-second budget per call (and its ``timeout``, if shorter)."""

RECONNECT_FOREVER = RetryPolicy.forever()
"""For writers and readers: reconnect for as long as they are open."""


def as_ydb_error(error: BaseException) -> YdbTopicError | None:
    """The SDK error for ``error`` (translating gRPC errors), or None for anything else."""
    if isinstance(error, YdbTopicError):
        return error
    if isinstance(error, grpc.RpcError):
        return error_from_grpc(error)
    return None


def ydb_backoff(error: BaseException, *, idempotent: bool) -> Backoff | None:
    """The backoff schedule for retrying after ``error``, or None when a retry cannot help."""
    err = as_ydb_error(error)
    if err is None or not err.is_retriable(idempotent=idempotent):
        return None
    return err.backoff


Classify = Callable[[BaseException], "Backoff | None"]
"""Which backoff a failure calls for (``"fast"`` / ``"slow"``), or None when it is final."""


class RetryState:
    """The failures of one retry loop, judged by one policy.

    ``next_delay(error)`` records a failure and returns how long to wait before the next try,
    or None to give up (a final error, or the policy's budget is spent). ``reset()`` starts a new
    streak after progress. ``classify`` decides which failures are retriable (by default the SDK
    errors' own retriability, for an operation that is or is not ``idempotent``).
    ``last_try_at_end``: a delay that would pass the policy's ``max_elapsed`` is shortened so the
    last try comes as it ends (a wait for something to appear), instead of giving up before.
    """

    __slots__ = ("_classify", "_clock", "_last_try_at_end", "attempt", "failures", "policy", "streak_started")

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        idempotent: bool = True,
        classify: Classify | None = None,
        clock: Callable[[], float] = time.monotonic,
        last_try_at_end: bool = False,
    ) -> None:
        self.policy = policy
        self._classify: Classify = classify or (lambda error: ydb_backoff(error, idempotent=idempotent))
        self._clock = clock
        self._last_try_at_end = last_try_at_end
        self.attempt = 0
        """Failures in the current streak."""
        self.failures = 0
        """Failures since this state was made, across streaks."""
        self.streak_started: float | None = None
        """When the current streak's first failure happened (None: no streak)."""

    @property
    def failing(self) -> bool:
        """True from a failure until ``reset``."""
        return self.attempt > 0

    def retries(self, error: BaseException) -> bool:
        """Whether ``error`` is one of the failures this state retries (budget aside)."""
        return self._classify(error) is not None

    def next_delay(self, error: BaseException) -> float | None:
        """Record ``error``; the seconds to wait before trying again, or None to give up."""
        now = self._clock()
        if self.streak_started is None:
            self.streak_started = now
        self.attempt += 1
        self.failures += 1
        return self.policy._delay(
            self._classify(error), self.attempt, self.streak_started, now, last_try_at_end=self._last_try_at_end
        )

    def elapsed(self) -> float:
        """Seconds since the current streak started (0 without one)."""
        return 0.0 if self.streak_started is None else self._clock() - self.streak_started

    def reset(self) -> None:
        """Progress was made: the next failure starts a new streak with the full budget."""
        self.attempt = 0
        self.streak_started = None


def topic_wait(within: float, policy: RetryPolicy) -> RetryState:
    """The state of a wait for a topic to be created (``wait_for_topic``): only
    ``TopicNotFoundError`` is tried again, on ``policy``'s fast schedule but apart from its
    budget, for ``within`` seconds from the first such answer, the last try as they end."""
    schedule = RetryPolicy(max_attempts=None, max_elapsed=within, fast=policy.fast)
    return RetryState(schedule, classify=_topic_missing, last_try_at_end=True)


def _topic_missing(error: BaseException) -> Backoff | None:
    return "fast" if isinstance(error, TopicNotFoundError) else None


async def retry_call(
    fn: Callable[[], Awaitable[T]],
    retry: RetryPolicy | RetryState,
    *,
    idempotent: bool = True,
    classify: Classify | None = None,
    on_retry: Callable[[BaseException, float], None] | None = None,
) -> T:
    """Await ``fn()`` until it succeeds or the retry gives up; the last error is raised.

    This is the SDK's one retry loop for calls (unary calls, ``retry_tx``, the supervised
    consumers' restarts); a stream's reconnects run in ``StreamKeeper``. ``retry`` is a policy
    (a streak of its own) or a ``RetryState`` the caller keeps, to ``reset`` it after progress
    or to read its counts. ``classify`` decides which failures are retriable (by default the SDK
    errors' own retriability, for an operation that is or is not ``idempotent``).
    ``on_retry(error, delay)`` is told about each failure about to be retried, before the
    delay; it may raise instead, to stop (a deadline the delay would pass, say).
    """
    if isinstance(retry, RetryState):
        if classify is not None:
            raise InvalidArgumentError("classify belongs to the RetryState given")
        state = retry
    else:
        state = RetryState(retry, idempotent=idempotent, classify=classify)
    while True:
        try:
            return await fn()
        except Exception as exc:
            delay = state.next_delay(exc)
            if delay is None:
                raise
            if on_retry is not None:
                on_retry(exc, delay)
        await asyncio.sleep(delay)
