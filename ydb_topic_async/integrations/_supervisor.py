"""Supervised background consumers shared by the framework integrations."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .._driver import Driver
from ..reader import TopicMessage

logger = logging.getLogger("ydb_topic_async.integrations")

Handler = Callable[[TopicMessage], Awaitable[None]]


@dataclass
class Consumer:
    """Read ``path`` as ``consumer`` and pass each message to ``handler``, committing after it.

    A failure (of the handler or the reader) is logged and the consumer restarts after a backoff
    that doubles up to ``max_backoff`` seconds; uncommitted messages are delivered again.
    """

    path: str
    consumer: str
    handler: Handler
    reader_options: dict[str, Any] = field(default_factory=dict)
    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    restarts: int = 0
    """How many times this consumer was restarted after a failure."""

    async def run(self, driver: Driver) -> None:
        """Consume until cancelled; never returns on its own."""
        backoff = self.initial_backoff
        while True:
            try:
                async with driver.topic.reader(self.path, consumer=self.consumer, **self.reader_options) as reader:
                    async for message in reader:
                        await self.handler(message)
                        reader.commit(message)
                        backoff = self.initial_backoff
            except asyncio.CancelledError:
                raise
            except Exception:
                self.restarts += 1
                delay = random.uniform(backoff / 2, backoff)
                logger.exception(
                    "consumer %r of %s failed; restarting in %.2fs (restart %d)",
                    self.consumer, self.path, delay, self.restarts,
                )
                await asyncio.sleep(delay)
                backoff = min(self.max_backoff, backoff * 2)
