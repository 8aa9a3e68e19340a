"""Fixtures for transactions: topics with a consumer."""

from __future__ import annotations

import pytest

from ydb_topic_async import Driver

from .._helpers import create_topic_with_consumer


@pytest.fixture
async def source(driver: Driver, topic_name: str) -> str:
    """A topic with the consumer ``consumer`` (one partition)."""
    return await create_topic_with_consumer(driver, f"{topic_name}-source")


@pytest.fixture
async def target(driver: Driver, topic_name: str) -> str:
    """A topic with one partition and the consumer ``consumer``."""
    return await create_topic_with_consumer(driver, f"{topic_name}-target")


@pytest.fixture
async def pair(driver: Driver, topic_name: str) -> str:
    """A topic with two partitions and the consumer ``consumer``."""
    return await create_topic_with_consumer(driver, f"{topic_name}-pair", partitions=2)
