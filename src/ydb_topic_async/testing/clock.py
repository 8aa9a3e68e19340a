"""The local server's clock: wall time that tests can move forward.

Everything time-dependent on the server (write timestamps, retention, write quotas, lags) reads
this clock, so ``LocalTopicServer.advance_time`` can expire data at once instead of waiting hours.
"""

from __future__ import annotations

import time


class ServerClock:
    """Wall-clock and monotonic time, both shifted by what ``advance`` added."""

    __slots__ = ("_shift_ns",)

    def __init__(self) -> None:
        self._shift_ns = 0

    def now_ns(self) -> int:
        """Nanoseconds since the epoch, as the server sees them."""
        return time.time_ns() + self._shift_ns

    def monotonic(self) -> float:
        """Seconds on a monotonic scale that also moves with ``advance``."""
        return time.monotonic() + self._shift_ns / 1e9

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` (never backwards)."""
        if not seconds >= 0:
            raise ValueError("the server's clock only moves forward: seconds must be >= 0")
        self._shift_ns += int(seconds * 1_000_000_000)
