"""Mistakes a newcomer makes are refused at the call, with a specific ``UsageError``.

Nothing is sent and nothing already accepted is lost: each test writes good messages first,
makes the mistake, and checks that the good messages are still delivered and the object still
works.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer

from .._helpers import stored_data

pytestmark = pytest.mark.timeout(30)

LONE_SURROGATE = "caf\udce9"  # bytes decoded with errors="surrogateescape": not valid Unicode


@pytest.mark.parametrize(
    ("codec", "hint"),
    [(2.0, "got 2.0"), (True, "got True"), ("zstd", "use Codec.ZSTD"), (-4, "got -4"), (2**40, "got")],
)
def test_a_codec_that_is_not_a_codec_id_is_refused(driver: yta.Driver, codec: Any, hint: str) -> None:
    with pytest.raises(yta.InvalidCodecError, match=hint) as raised:
        driver.topic.writer("t", codec=codec)
    assert isinstance(raised.value, yta.UnsupportedCodecError) and isinstance(raised.value, yta.UsageError)
    with pytest.raises(yta.InvalidCodecError):
        driver.topic.writer("t", codec=10001, encoders={codec: yta.lz4_encode})
    with pytest.raises(yta.InvalidCodecError):
        driver.topic.reader("t", consumer="c", decoders={codec: yta.lz4_decode})


async def test_text_that_is_not_valid_unicode_is_refused_at_the_call(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    with pytest.raises(yta.InvalidArgumentError, match="producer_id is not valid Unicode"):
        driver.topic.writer(topic, producer_id=LONE_SURROGATE)
    with pytest.raises(yta.InvalidArgumentError, match="session_metadata"):
        driver.topic.writer(topic, session_metadata={"user": LONE_SURROGATE})
    async with driver.topic.writer(topic, producer_id="p") as writer:
        await writer.write(b"first")
        with pytest.raises(yta.InvalidArgumentError, match="a message is not valid Unicode"):
            await writer.write(LONE_SURROGATE)
        with pytest.raises(yta.InvalidArgumentError, match=r"Message\.data is not valid Unicode"):
            await writer.write([yta.Message("fine"), yta.Message(LONE_SURROGATE)])
        with pytest.raises(yta.InvalidArgumentError, match="metadata value for 'k'"):
            await writer.write(yta.Message(b"x", metadata={"k": LONE_SURROGATE}))
        with pytest.raises(yta.InvalidArgumentError, match="metadata key"):
            await writer.write(yta.Message(b"x", metadata={LONE_SURROGATE: "v"}))
        await writer.write("second")
    assert stored_data(server, topic) == [b"first", b"second"]


async def test_a_seq_no_out_of_int64_range_is_refused_at_the_call(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    """It used to be accepted, then to fail inside the send loop and take every message with it."""
    async with driver.topic.writer(topic, producer_id="manual", auto_seqno=False) as writer:
        first = await writer.write_with_ack_future(yta.Message(b"first", seq_no=1))
        with pytest.raises(yta.InvalidArgumentError, match="2\\*\\*63-1"):
            await writer.write(yta.Message(b"huge", seq_no=2**63))
        with pytest.raises(yta.InvalidArgumentError):
            await writer.write([yta.Message(b"ok", seq_no=2), yta.Message(b"huge", seq_no=2**64)])
        assert await writer.write_with_ack(yta.Message(b"second", seq_no=2)) == yta.Written(0, 1, 2)
        assert await first == yta.Written(0, 0, 1)
    assert stored_data(server, topic) == [b"first", b"second"]


async def test_timeouts_of_the_wrong_type_are_refused_at_the_call(
    server: LocalTopicServer, driver: yta.Driver, topic: str
) -> None:
    async with driver.topic.writer(topic, producer_id="p") as writer:
        await writer.write(b"before")
        bad: Any  # of a type or value the calls refuse
        for bad in ("5", -1, float("nan"), True):
            with pytest.raises(yta.InvalidArgumentError, match="timeout"):
                await writer.flush(timeout=bad)
            with pytest.raises(yta.InvalidArgumentError, match="timeout"):
                await writer.wait_init(timeout=bad)
            with pytest.raises(yta.InvalidArgumentError, match="timeout"):
                await driver.topic.describe_topic(topic, timeout=bad)
            with pytest.raises(yta.InvalidArgumentError, match="timeout"):
                await driver.wait_ready(timeout=bad)
        await writer.flush(timeout=10)
    with pytest.raises(yta.InvalidArgumentError, match="init_timeout"):
        driver.topic.writer(topic, init_timeout="30")  # type: ignore[arg-type]
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        first = await reader.receive_message(timeout=10)
        for bad in ("5", -1, [1]):
            with pytest.raises(yta.InvalidArgumentError, match="timeout"):
                await reader.receive_batch(timeout=bad)
            with pytest.raises(yta.InvalidArgumentError, match="timeout"):
                await reader.receive_message(timeout=bad)
            with pytest.raises(yta.InvalidArgumentError, match="timeout"):
                await reader.commit_with_ack(first, timeout=bad)
        await reader.commit_with_ack(first, timeout=10)
    assert first.data == b"before"


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ("grpc://127.0.0.1:0", "port 0"),
        ("grpc://[::1", "malformed"),
        ("grpc://[::1]:99999", "malformed"),
        ("grpc://host:notaport", "malformed"),
        ("http://host:2136", "scheme"),
        ("grpc://:2136", "no host"),
    ],
)
def test_a_malformed_endpoint_is_refused_when_the_driver_is_made(endpoint: str, problem: str) -> None:
    with pytest.raises(yta.InvalidEndpointError, match=problem) as raised:
        yta.Driver(endpoint, "/local")
    assert isinstance(raised.value, yta.InvalidArgumentError)


async def test_a_token_provider_that_fails_is_named_and_retried_by_writers(
    server: LocalTopicServer, topic: str
) -> None:
    class TokenServiceDown(Exception):
        pass

    failures = 2

    async def provider() -> str:
        nonlocal failures
        if failures:
            failures -= 1
            raise TokenServiceDown("HTTP 503")
        return "token-of-the-day"

    credentials = yta.TokenProviderCredentials(provider)
    once = yta.RetryPolicy.no_retries()
    async with yta.Driver(server.endpoint, server.database, credentials, discovery=False, retry=once) as driver:
        with pytest.raises(yta.TokenProviderError, match="HTTP 503") as raised:
            await driver.topic.describe_topic(topic)
        assert isinstance(raised.value.__cause__, TokenServiceDown)
        # A token service that is down is not a wrong call: a CredentialsError, not a UsageError.
        assert isinstance(raised.value, yta.CredentialsError) and not isinstance(raised.value, yta.UsageError)
        # Retried like an overloaded server (the token service may come back): by unary calls
        # and, here, by a writer.
        async with driver.topic.writer(topic, producer_id="p", retry=yta.RetryPolicy.forever()) as writer:
            assert await writer.write_with_ack(b"x") == yta.Written(0, 0, 1)
            assert writer.reconnects == 1 and isinstance(writer.last_error, yta.TokenProviderError)
        # Without retries the writer fails with it, the provider's exception still chained.
        failures = 1
        doomed = driver.topic.writer(topic, producer_id="q", retry=once)
        with pytest.raises(yta.TokenProviderError) as raised:
            await doomed.wait_init(timeout=10)
        assert isinstance(raised.value.__cause__, TokenServiceDown)
        with pytest.raises(yta.TokenProviderError):
            await doomed.close()


@pytest.mark.parametrize(
    ("token", "problem"),
    [(b"bytes-token", "gave a bytes"), ("line\nbreak", "'\\\\n'"), ("tab\ttoken", "'\\\\t'"), ("токен", "'т'")],
)
async def test_a_token_that_cannot_be_a_header_is_refused_with_its_problem(
    server: LocalTopicServer, topic: str, token: Any, problem: str
) -> None:
    async def provider() -> Any:
        return token

    async with yta.Driver(
        server.endpoint, server.database, yta.TokenProviderCredentials(provider), discovery=False
    ) as driver:
        with pytest.raises(yta.InvalidTokenError, match=problem) as invalid:
            await driver.topic.describe_topic(topic)
        assert isinstance(invalid.value, yta.UsageError)  # the credentials' own mistake
        writer = driver.topic.writer(topic)
        with pytest.raises(yta.InvalidTokenError):  # not retried: it will not get better
            await writer.wait_init(timeout=10)
        with pytest.raises(yta.InvalidTokenError):
            await writer.close()
    if isinstance(token, str):
        with pytest.raises(yta.InvalidTokenError):
            yta.AccessTokenCredentials(token)


async def test_one_static_credentials_object_serves_two_drivers() -> None:
    async with LocalTopicServer(users={"alice": "secret"}) as server:
        credentials = yta.StaticCredentials("alice", "secret")
        first = yta.Driver(server.endpoint, server.database, credentials, discovery=False)
        async with yta.Driver(server.endpoint, server.database, credentials, discovery=False) as second:
            async with first:
                await first.topic.create_topic("shared")
                await second.topic.describe_topic("shared")
            # Closing the first driver leaves the second one able to log in and call.
            await asyncio.sleep(0)
            assert (await second.topic.describe_topic("shared")).path == "/local/shared"
            assert await credentials.auth_token()  # answered through the driver still open
        with pytest.raises(yta.InvalidArgumentError, match="open Driver"):
            await credentials.auth_token()
