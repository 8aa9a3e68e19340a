"""Fixtures for transactions: topics with a consumer."""

from __future__ import annotations

import pytest

from ydb_topic_async import Driver


@pytest.fixture
async def source(driver: Driver, topic_name: str) -> str:
    """A topic with the consumer ``consumer`` (one partition)."""
    name = f"{topic_name}-source"
    await driver.topic.create_topic(name, consumers=["consumer"])
    return name


@pytest.fixture
async def target(driver: Driver, topic_name: str) -> str:
    """A topic with one partition and the consumer ``consumer``."""
    name = f"{topic_name}-target"
    await driver.topic.create_topic(name, consumers=["consumer"])
    return name


@pytest.fixture
async def pair(driver: Driver, topic_name: str) -> str:
    """A topic with two partitions and the consumer ``consumer``."""
    name = f"{topic_name}-pair"
    await driver.topic.create_topic(name, min_active_partitions=2, consumers=["consumer"])
    return name
