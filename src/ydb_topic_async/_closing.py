"""``async with`` for writers and readers: one rule for leaving the block."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any, ClassVar, Self


class ClosesOnExit:
    """Mixed into writers and readers: ``async with`` opens on entry and closes on exit.

    Leaving the block normally awaits ``close()`` (which waits for acknowledgements or commits)
    and raises its failure. Leaving it by cancellation stops at once (``_stop_now``): the caller
    is going away and must not wait for the server. When the block is already raising, a failure
    of ``close`` is logged instead of raised, so it does not mask the block's error; the owner's
    own failure is not logged again (it was logged when it happened).
    """

    _logger: ClassVar[logging.Logger]
    _failure: BaseException | None

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self, timeout: float | None = None) -> None:
        raise NotImplementedError

    async def _stop_now(self) -> None:
        """Stop without waiting for the server: the caller was cancelled."""
        raise NotImplementedError

    def _exit_log_fields(self) -> Mapping[str, Any]:
        """The ``extra`` of the warning logged when closing fails after an error."""
        return {}

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, asyncio.CancelledError):
            await self._stop_now()
            return
        try:
            await self.close()
        except Exception as close_error:
            if exc is None:
                raise
            if close_error is not self._failure:
                self._logger.warning(
                    "closing %r after an error also failed", self, exc_info=True, extra=self._exit_log_fields()
                )
