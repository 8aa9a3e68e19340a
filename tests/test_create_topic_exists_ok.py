"""``create_topic(exists_ok=True)``: a script or a service start-up can create its topics every time."""

from __future__ import annotations

import pytest

from ydb_topic_async import AlreadyExistsError, Driver, SchemeError
from ydb_topic_async.testing import LocalTopicServer


async def test_second_create_succeeds_and_changes_nothing(driver: Driver) -> None:
    """YDB answers SUCCESS to creating a topic that exists (the local server does the same)."""
    await driver.topic.create_topic("twice", min_active_partitions=2)
    await driver.topic.create_topic("twice", min_active_partitions=5)
    assert len((await driver.topic.describe_topic("twice")).partitions) == 2


async def test_already_exists_raises_without_exists_ok(server: LocalTopicServer, driver: Driver) -> None:
    """A server that answers ALREADY_EXISTS instead: an error without ``exists_ok``, success with it."""
    await driver.topic.create_topic("strict")
    server.faults.fail_next("CreateTopic", "ALREADY_EXISTS")
    with pytest.raises(AlreadyExistsError):
        await driver.topic.create_topic("strict")
    server.faults.fail_next("CreateTopic", "ALREADY_EXISTS")
    await driver.topic.create_topic("strict", exists_ok=True)


async def test_exists_ok_leaves_an_existing_topic_as_it_is(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("kept", min_active_partitions=3, consumers=["a"])
    await driver.topic.create_topic("kept", min_active_partitions=1, consumers=["b"], exists_ok=True)
    described = await driver.topic.describe_topic("kept")
    assert len(described.partitions) == 3
    assert [c.name for c in described.consumers] == ["a"]


async def test_exists_ok_creates_a_missing_topic(driver: Driver) -> None:
    await driver.topic.create_topic("fresh", min_active_partitions=2, exists_ok=True)
    assert len((await driver.topic.describe_topic("fresh")).partitions) == 2


async def test_exists_ok_accepts_success_for_an_existing_topic(server: LocalTopicServer, driver: Driver) -> None:
    """A server may answer SUCCESS when the topic exists already (as an idempotent create would)."""
    await driver.topic.create_topic("quiet")
    server.faults.fail_next("CreateTopic", "SUCCESS")
    await driver.topic.create_topic("quiet", exists_ok=True)


async def test_exists_ok_accepts_scheme_error_for_an_existing_path(server: LocalTopicServer, driver: Driver) -> None:
    await driver.topic.create_topic("scheme")
    server.faults.fail_next("CreateTopic", "SCHEME_ERROR")
    await driver.topic.create_topic("scheme", exists_ok=True)


async def test_exists_ok_still_raises_a_scheme_error_when_nothing_exists(
    server: LocalTopicServer, driver: Driver
) -> None:
    server.faults.fail_next("CreateTopic", "SCHEME_ERROR")
    with pytest.raises(SchemeError):
        await driver.topic.create_topic("nowhere", exists_ok=True)
    with pytest.raises(SchemeError):
        await driver.topic.describe_topic("nowhere")


async def test_exists_ok_retries_transient_failures(server: LocalTopicServer, driver: Driver) -> None:
    """Repeating the create is harmless with exists_ok, so a lost answer is retried, not raised."""
    server.faults.fail_next("CreateTopic", "UNDETERMINED")
    await driver.topic.create_topic("retried", exists_ok=True)
    assert (await driver.topic.describe_topic("retried")).path == "/local/retried"
