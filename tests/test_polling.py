"""The suite's polling helper fails the test when the condition never comes true."""

from __future__ import annotations

import time

import pytest

from ._polling import eventually


async def test_eventually_fails_when_never_true() -> None:
    async def never() -> bool:
        return False

    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"not reached within 0\.05s: the answer"):
        await eventually(never, "the answer", timeout=0.05)
    with pytest.raises(AssertionError, match=r"not reached within 0\.05s"):
        await eventually(lambda: False, timeout=0.05, interval=0)
    assert time.monotonic() - started < 1


async def test_eventually_returns_once_true() -> None:
    calls: list[None] = []

    def third_time() -> bool:
        calls.append(None)
        return len(calls) == 3

    await eventually(third_time, timeout=5)
    assert len(calls) == 3
