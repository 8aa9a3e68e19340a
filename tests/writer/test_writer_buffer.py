"""The writer's accumulator on its own: admission rule, FIFO waiting, timeouts, cancellation."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ydb_topic_async as yta
from ydb_topic_async.writer.buffer import MESSAGE_MEMORY, PendingMessage, WriteBuffer, seq_no_of


def _entry(seq_no: int, size: int = 1) -> PendingMessage:
    return PendingMessage(b"x" * size, seq_no, -1, None, size)


async def test_a_call_is_admitted_when_it_fits_or_the_buffer_is_empty() -> None:
    buffer = WriteBuffer(max_messages=3, max_bytes=None)
    assert buffer.try_reserve(10, 0)  # empty: one oversized call passes
    assert not buffer.try_reserve(1, 0)
    buffer.release(10, 0)
    assert buffer.try_reserve(2, 0)
    assert buffer.try_reserve(1, 0)
    assert not buffer.try_reserve(1, 0)  # 3 of 3
    assert buffer.messages == 3


async def test_waiters_are_admitted_in_fifo_order_and_block_later_calls() -> None:
    # Room for two messages of 10 payload bytes in all (each is charged MESSAGE_MEMORY too).
    buffer = WriteBuffer(max_messages=None, max_bytes=10 + 2 * MESSAGE_MEMORY)
    assert buffer.try_reserve(1, 10)
    order: list[str] = []

    async def wait(name: str, nbytes: int) -> None:
        await buffer.reserve(1, nbytes, None)
        order.append(name)

    big = asyncio.ensure_future(wait("big", 8))
    await asyncio.sleep(0)
    assert not buffer.try_reserve(1, 1)  # a small call may not overtake the waiting big one
    small = asyncio.ensure_future(wait("small", 1))
    await asyncio.sleep(0)
    buffer.release(1, 10)
    await asyncio.gather(big, small)
    assert order == ["big", "small"]
    assert buffer.nbytes == 9


async def test_timeout_leaves_no_reservation_and_unblocks_followers() -> None:
    buffer = WriteBuffer(max_messages=1, max_bytes=None)
    assert buffer.try_reserve(1, 0)
    with pytest.raises(yta.BufferFullTimeoutError):
        await buffer.reserve(1, 0, 0.05)
    assert buffer.messages == 1
    buffer.release(1, 0)
    assert buffer.try_reserve(1, 0)


async def test_a_grant_that_races_a_cancellation_is_given_back() -> None:
    buffer = WriteBuffer(max_messages=1, max_bytes=None)
    assert buffer.try_reserve(1, 0)
    waiter = asyncio.ensure_future(buffer.reserve(1, 0, None))
    await asyncio.sleep(0)
    buffer.release(1, 0)  # grants the waiter...
    waiter.cancel()  # ...which is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert buffer.messages == 0


async def test_rewind_puts_inflight_back_in_seq_order() -> None:
    buffer = WriteBuffer(None, None)
    buffer.push([_entry(1), _entry(2), _entry(3)])
    buffer.inflight.append(buffer.unsent.popleft())
    buffer.inflight.append(buffer.unsent.popleft())
    buffer.push([_entry(4)])
    buffer.rewind()
    assert [seq_no_of(e) for e in buffer.unsent] == [1, 2, 3, 4]
    assert not buffer.inflight


async def test_failure_reaches_futures_flushes_and_waiters() -> None:
    buffer = WriteBuffer(max_messages=1, max_bytes=None)
    entry = _entry(1)
    entry.future = asyncio.get_running_loop().create_future()
    assert buffer.try_reserve(1, 1)
    buffer.push([entry])
    space = asyncio.ensure_future(buffer.reserve(1, 1, None))
    flush = asyncio.ensure_future(buffer.wait_acked(1))
    await asyncio.sleep(0)
    error = yta.SchemeError("gone")
    assert buffer.fail(error) == 1
    for awaitable in (entry.future, space, flush):
        with pytest.raises(yta.SchemeError):
            await awaitable
    with pytest.raises(yta.SchemeError):
        await buffer.reserve(1, 1, None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 50)), min_size=1, max_size=30))
def test_admission_never_exceeds_the_limits_except_for_one_call_into_an_empty_buffer(
    calls: list[tuple[int, int]],
) -> None:
    async def scenario() -> None:
        limit = 60 + 4 * MESSAGE_MEMORY  # the bytes bind before the count at times, and at others not
        buffer = WriteBuffer(max_messages=6, max_bytes=limit)
        admitted: list[tuple[int, int]] = []
        for count, nbytes in calls:
            was_empty = buffer.messages == 0
            if buffer.try_reserve(count, nbytes):
                admitted.append((count, nbytes))
                charged = buffer.nbytes + buffer.messages * MESSAGE_MEMORY
                assert was_empty or (buffer.messages <= 6 and charged <= limit)
            elif admitted:
                # Full: acknowledging the oldest call makes room again.
                buffer.release(*admitted.pop(0))
        assert buffer.messages == sum(c for c, _ in admitted)

    asyncio.run(scenario())


async def test_plain_and_full_messages_are_kept_in_order_together() -> None:
    """Messages of both shapes (a hot-path tuple, a ``PendingMessage``) share the queues: a
    reconnect resends them in seq_no order, a failure reaches the futures among them."""
    buffer = WriteBuffer(max_messages=None, max_bytes=None)
    assert buffer.try_push_one((b"a", 1, -1))
    full = _entry(2)
    full.future = asyncio.get_running_loop().create_future()
    assert buffer.try_reserve(1, 1)
    buffer.push([full])
    assert buffer.try_push_one((b"c", 3, -1))
    assert (buffer.messages, buffer.nbytes) == (3, 3)
    buffer.inflight.extend([buffer.unsent.popleft(), buffer.unsent.popleft()])
    buffer.rewind()
    assert [seq_no_of(entry) for entry in buffer.unsent] == [1, 2, 3]
    error = yta.WriterClosedError("closed")
    assert buffer.fail(error) == 3
    assert full.future.exception() is error
