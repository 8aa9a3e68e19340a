"""A reader's options are checked once, into one ``ReaderSettings``, at the call that gives them:
``driver.topic.reader``, the supervised ``Consumer`` and ``ReaderSettings`` itself raise the same
specific error for a bad option, before any reader exists."""

from __future__ import annotations

import re
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.integrations import Consumer, TopicRuntime
from ydb_topic_async.testing import LocalTopicServer

from .._polling import eventually


def _never(*_: object) -> None:
    pass


BAD_OPTIONS: list[tuple[str, object, str]] = [
    ("buffer_size_bytes", 1023, "buffer_size_bytes must be an int of at least 1024, got 1023"),
    ("buffer_size_bytes", True, "buffer_size_bytes must be an int of at least 1024, got True"),
    ("decoders", [_never], "codecs must be a mapping of codec id to a callable, not list"),
    ("decoders", {10001: "zstd"}, "needs a callable bytes -> bytes"),
    ("decoders", {5: _never}, "custom codec id 5 is outside the range"),
    ("on_partition_start", "print", "on_partition_start must be callable"),
    ("on_partition_stop", 1, "on_partition_stop must be callable"),
    ("on_commit", "print", "on_commit must be callable"),
    ("reader_name", 7, "reader_name must be a string or None, got 7"),
    ("retry", 3, "retry must be a RetryPolicy or None, got 3"),
    ("graceful_stop_timeout", -1, "graceful_stop_timeout must be >= 0, got -1"),
    ("graceful_stop_timeout", "10", "graceful_stop_timeout must be a number of seconds, got '10'"),
    ("credit_release_fraction", 0, "credit_release_fraction must be in (0, 1]"),
    ("credit_release_fraction", 1.5, "credit_release_fraction must be in (0, 1]"),
    ("credit_release_fraction", True, "credit_release_fraction must be in (0, 1]"),
    ("token_refresh_interval", float("nan"), "token_refresh_interval must be a number of seconds, got nan"),
    ("init_timeout", 0, "init_timeout must be positive, got 0"),
    ("partition_max_in_flight_bytes", -1, "partition_max_in_flight_bytes must be a non-negative int or None"),
    ("partition_max_in_flight_bytes", 1.5, "partition_max_in_flight_bytes must be a non-negative int or None"),
]


async def _handle(message: yta.TopicMessage) -> None:
    pass


@pytest.mark.parametrize(("option", "value", "message"), BAD_OPTIONS, ids=[f"{o}={v!r}" for o, v, _ in BAD_OPTIONS])
async def test_each_bad_option_raises_its_error_at_the_call(option: str, value: object, message: str) -> None:
    options: dict[str, Any] = {option: value}
    expected = re.escape(message)
    with pytest.raises(yta.InvalidArgumentError, match=expected):
        yta.ReaderSettings("consumer", **options)
    with pytest.raises(yta.InvalidArgumentError, match=expected):
        Consumer("t", "consumer", _handle, **options)
    async with yta.Driver("grpc://127.0.0.1:1", "/local", discovery=False) as driver:
        with pytest.raises(yta.InvalidArgumentError, match=expected):
            driver.topic.reader("t", consumer="consumer", **options)


async def test_the_consumer_name_and_the_options_that_need_one_are_checked_at_the_call() -> None:
    with pytest.raises(yta.InvalidArgumentError, match="consumer must be a non-empty string or None, got ''"):
        Consumer("t", "", _handle)
    needs_one = "partition_max_in_flight_bytes needs a consumer"
    with pytest.raises(yta.InvalidArgumentError, match=needs_one):
        yta.ReaderSettings(None, partition_max_in_flight_bytes=1000)
    async with yta.Driver("grpc://127.0.0.1:1", "/local", discovery=False) as driver:
        with pytest.raises(yta.InvalidArgumentError, match="consumer must be a non-empty string or None, got 5"):
            driver.topic.reader("t", consumer=5)  # type: ignore[arg-type]
        with pytest.raises(yta.InvalidArgumentError, match=needs_one):
            driver.topic.reader(yta.TopicSelector("t", partitions=[0]), consumer=None, partition_max_in_flight_bytes=1)


async def test_a_misspelt_option_fails_at_the_call_too() -> None:
    """Python's own error for an unknown keyword, raised where it was given: ``Consumer(...)``
    fails at once instead of every time its supervised loop opens a reader."""
    with pytest.raises(TypeError, match="bufer_size_bytes"):
        Consumer("t", "consumer", _handle, bufer_size_bytes=2048)  # type: ignore[call-arg]
    async with yta.Driver("grpc://127.0.0.1:1", "/local", discovery=False) as driver:
        with pytest.raises(TypeError, match="bufer_size_bytes"):
            driver.topic.reader("t", consumer="consumer", bufer_size_bytes=2048)  # type: ignore[call-arg]


def test_settings_are_the_factory_options_normalised_and_frozen() -> None:
    """The fields of ``ReaderSettings`` are ``consumer`` and exactly the keywords of
    ``driver.topic.reader`` (``ReaderOptions``); ``options()`` gives them back, so settings can be
    turned into a reader's keywords and made again unchanged."""
    settings = yta.ReaderSettings(
        "consumer", buffer_size_bytes=4096, graceful_stop_timeout=3, init_timeout=2, reader_name="r", on_commit=print
    )
    options = settings.options()
    assert set(options) == yta.ReaderOptions.__optional_keys__
    assert yta.ReaderSettings("consumer", **options) == settings
    assert settings.replace(buffer_size_bytes=8192).buffer_size_bytes == 8192
    with pytest.raises(yta.InvalidArgumentError, match="buffer_size_bytes"):
        settings.replace(buffer_size_bytes=1)  # checked again
    assert isinstance(settings.graceful_stop_timeout, float) and settings.graceful_stop_timeout == 3.0
    assert set(settings.decoder_table) >= {yta.Codec.RAW, yta.Codec.GZIP, yta.Codec.ZSTD}
    with pytest.raises(AttributeError):
        settings.buffer_size_bytes = 1  # type: ignore[misc]


async def test_a_consumer_reads_with_its_settings_and_calls_the_users_on_partition_stop_too(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    """The supervised consumer's readers get its checked options (here the reader name the server
    shows) and an ``on_partition_stop`` of its own that also calls the user's."""
    async with driver.topic.writer(topic, producer_id="seed") as writer:
        await writer.write(b"a")
        await writer.write(b"b")
    stopped: list[yta.PartitionSession] = []
    consumer = Consumer(topic, "consumer", _handle, reader_name="audit-reader", on_partition_stop=stopped.append)
    assert consumer.reader_settings.reader_name == "audit-reader"

    async def reader_names() -> list[str]:
        described = await driver.topic.describe_consumer(topic, "consumer", include_stats=True)
        return [p.reader_name for p in described.partitions]

    async with TopicRuntime(server.endpoint, server.database, consumers=[consumer]):
        await eventually(lambda: consumer.handled == 2, "both messages handled")
        assert await reader_names() == ["audit-reader"]
        assert server.faults.drop_read_streams() == 1
        await eventually(lambda: len(stopped) == 1, "the user's on_partition_stop called for the lost session")
        assert stopped[0].closed and stopped[0].topic_path.endswith(topic)
        async with driver.topic.writer(topic, producer_id="seed") as writer:
            await writer.write(b"c")
        await eventually(lambda: consumer.handled == 3, "the next reader handled the next message")
        assert await reader_names() == ["audit-reader"]
