"""Helpers for the SDK's internal futures."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


def suppress_future_errors(futures: list[asyncio.Future[Any]]) -> None:
    """Mark the failures of ``futures`` as retrieved, so asyncio does not log them when they are
    collected: their owner reports the error by other means."""
    for future in futures:
        if future.done() and not future.cancelled():
            with contextlib.suppress(BaseException):
                future.exception()
