"""The life of writers and readers: ``closed``, ``failure``, the check every call makes first,
and one rule for leaving ``async with``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any, ClassVar, Self

from ._errors import ClosedError


class ClosesOnExit:
    """Mixed into writers and readers: ``closed``/``failure``, ``_check_usable``, and ``async with``
    that opens on entry and closes on exit.

    ``_check_usable`` (first thing of every call) raises the closed error once ``close`` was
    called (with the failure, if any, as its cause), else the failure that ended the object.

    Leaving the block normally awaits ``close()`` (which waits for acknowledgements or commits)
    and raises its failure. Leaving it by cancellation stops at once (``_stop_now``): the caller
    is going away and must not wait for the server. When the block is already raising, a failure
    of ``close`` is logged instead of raised, so it does not mask the block's error; the owner's
    own failure is not logged again (it was logged when it happened).
    """

    _logger: ClassVar[logging.Logger]
    _closed: bool = False
    _failure: BaseException | None = None

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed

    @property
    def failure(self) -> BaseException | None:
        """The error that ended this object for good (every later call raises it), or None."""
        return self._failure

    def _closed_error(self) -> ClosedError:
        """What a call after ``close`` raises."""
        raise NotImplementedError

    def _check_usable(self) -> None:
        if self._closed:
            raise self._closed_error() from self._failure
        if self._failure is not None:
            self._failure_raised()
            raise self._failure.with_traceback(None)  # the same error for every call; do not grow its traceback

    def _failure_raised(self) -> None:
        """Told when a call is about to raise the failure (a reader then need not raise it at close)."""

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
