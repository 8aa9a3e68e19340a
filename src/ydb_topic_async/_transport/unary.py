"""Unary calls: one total deadline across attempts, backoff and token fetching, and the parsing
of YDB's answers (an ``Operation`` with a status and a packed result, or a status of its own)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import DeadlineExceededError, OperationTimeoutError, YdbTopicError, raise_for_status
from .._futures import wait_within
from .._retry import DEFAULT_RETRY, RetryPolicy, retry_call
from ..observability.logging import sdk_logger
from .channels import Route

if TYPE_CHECKING:
    from google.protobuf.message import Message

logger = sdk_logger("driver")

R = TypeVar("R")
M = TypeVar("M", bound="Message")

Attempt = Callable[[float | None, list[Route]], Awaitable[Any]]
"""One attempt of a call: given the time left (None: unbounded) and a list to put the call's
route in, the raw response."""


def operation_result(result_cls: type[M] | None) -> Callable[[Any], M | None]:
    """Parse an ``Operation``-carrying response: raise for its status, unpack its result.

    The result's ``Any`` is parsed into ``result_cls`` whatever package its type URL names.
    """

    def parse(response: Any) -> M | None:
        operation = response.operation
        raise_for_status(operation.status, operation.issues)
        if result_cls is None:
            return None
        result: M = result_cls()
        result.ParseFromString(operation.result.value)
        return result

    return parse


def status_result(response: R) -> R:
    """Parse a response that carries ``status`` and ``issues`` itself (QueryService)."""
    raise_for_status(response.status, response.issues)  # type: ignore[attr-defined]
    return response


def call_bound(timeout: float | None, policy: RetryPolicy, fallback: RetryPolicy) -> tuple[float | None, bool]:
    """How long a unary call may take in all, and whether that is a retry budget (not the
    caller's ``timeout``). A policy that limits its attempts but not its time gets ``fallback``'s
    time budget (or the default policy's): each of its attempts could otherwise wait forever."""
    if timeout is not None:
        return timeout, False
    if policy.max_elapsed is not None:
        return policy.max_elapsed, True
    if policy.max_attempts is not None:
        budget = fallback.max_elapsed if fallback.max_elapsed is not None else DEFAULT_RETRY.max_elapsed
        return budget, True
    return None, False


async def call_within(
    method: str,
    attempt: Attempt,
    parse: Callable[[Any], R],
    *,
    bound: float | None,
    by_budget: bool,
    policy: RetryPolicy,
    idempotent: bool,
    timed_out_on: Callable[[Route], None],
    on_retry: Callable[[str, BaseException], None] | None,
) -> R:
    """Run ``attempt`` until one answers, retrying by ``policy``, all within ``bound`` seconds
    (None: unbounded), and return ``parse(response)``.

    When the bound passes (during an attempt, or before the next one would start), the call
    raises ``OperationTimeoutError`` naming ``method`` and the last failure; the route of an
    attempt cut short by it is told to ``timed_out_on`` (its node may be at fault).
    """
    loop = asyncio.get_running_loop()
    deadline = None if bound is None else loop.time() + bound
    last: BaseException | None = None

    async def one() -> R:
        remaining = None if deadline is None else deadline - loop.time()
        routes: list[Route] = []
        try:
            if remaining is not None and remaining <= 0:
                raise TimeoutError
            response = await wait_within(attempt(remaining, routes), remaining)
            return parse(response)
        except DeadlineExceededError as exc:
            if remaining is not None:
                raise timed_out(method, bound, by_budget, exc) from exc  # gRPC applied our deadline
            raise
        except YdbTopicError:
            raise
        except TimeoutError:  # wait_within's: the deadline passed during an attempt
            if routes:
                timed_out_on(routes[0])
            raise timed_out(method, bound, by_budget, last) from last

    def before_retry(error: BaseException, delay: float) -> None:
        nonlocal last
        if deadline is not None and loop.time() + delay >= deadline:
            raise timed_out(method, bound, by_budget, error) from error
        last = error
        logger.debug("retrying %s in %.3fs after %r", method, delay, error)
        if on_retry is not None:
            on_retry(method, error)

    return await retry_call(one, policy, idempotent=idempotent, on_retry=before_retry)


def timed_out(method: str, bound: float | None, by_budget: bool, last: BaseException | None) -> OperationTimeoutError:
    assert bound is not None
    budget = " (the retry policy's max_elapsed: pass timeout= to choose another bound)" if by_budget else ""
    return OperationTimeoutError(
        f"{method} did not complete within {bound:g}s{budget}"
        + (f" (last error: {last})" if last is not None else "")
    )
