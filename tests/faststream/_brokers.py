"""What the FastStream broker tests share: a broker on the local server, and a recorder of handler calls."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from ydb_topic_async.faststream import YdbBroker
from ydb_topic_async.testing import LocalTopicServer


def broker_for(server: LocalTopicServer, **options: Any) -> YdbBroker:
    """A broker on ``server``, quick to restart its subscribers and without the access log."""
    return YdbBroker(server.endpoint, database=server.database, logger=None, **options)


@contextlib.asynccontextmanager
async def running(broker: YdbBroker) -> AsyncIterator[YdbBroker]:
    """The broker started (its subscribers reading) and stopped at the end."""
    async with broker:
        await broker.start()
        yield broker


class Seen:
    """What the handlers saw, with a way to wait for a count."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._changed = asyncio.Event()

    def add(self, item: Any) -> None:
        self.items.append(item)
        self._changed.set()

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Any]:
        async def reached() -> None:
            while len(self.items) < count:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(reached(), timeout)
        return self.items
