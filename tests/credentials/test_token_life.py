"""Tokens that expire, over real gRPC and HTTP on loopback: every credentials kind keeps a
long-lived writer and reader working across several expiries; a token service that is down for
a while; credentials the token service refuses.

The local server checks a ticket when a call or stream starts and when a stream sends one
in-band, and refuses an expired one, as YDB does (``testing.auth``)."""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import textwrap
import time

import pytest

import ydb_topic_async as yta
from ydb_topic_async._credentials.refresh import IssuedToken, TokenCache, expiry_margin
from ydb_topic_async.testing import IamTokenService, LocalTopicServer, TokenExchangeService

from .._polling import eventually
from ._kinds import ACCESS_TOKEN_TYPE, CLOUD_KINDS, KINDS, SUBJECT_TOKEN, USER, setup
from ._pki import private_pem, rsa_key

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "authentication.md"
TTL = 2.0
"""Seconds each token lives in these tests."""
REFRESH_CHECK = 0.25
"""Writers and readers look for a new token this often (5 s by default)."""


@pytest.mark.parametrize("kind", KINDS)
async def test_writer_and_reader_keep_working_across_token_expiries(kind: str) -> None:
    async with (
        setup(kind, TTL) as s,
        yta.Driver(s.server.endpoint, s.server.database, s.credentials, discovery=False) as driver,
    ):
        await driver.topic.create_topic("long-lived", consumers=["c"])
        sent: list[bytes] = []
        received: list[bytes] = []
        async with (
            driver.topic.writer("long-lived", producer_id="p", token_refresh_interval=REFRESH_CHECK) as writer,
            driver.topic.reader("long-lived", consumer="c", token_refresh_interval=REFRESH_CHECK) as reader,
        ):
            ends = time.monotonic() + 3.5 * TTL  # three expiries, and more
            while time.monotonic() < ends:
                data = f"m{len(sent)}".encode()
                await asyncio.wait_for(writer.write_with_ack(data), 10)  # no call may fail
                sent.append(data)
                await driver.topic.describe_topic("long-lived", timeout=10)  # unary calls too
                message = await reader.receive_message(timeout=10)
                received.append(message.data)
                reader.commit(message)
                await asyncio.sleep(0.05)
            assert writer.reconnects == 0  # the new tokens went in-band, on the same streams
        assert received == sent
        assert s.server.stats.token_updates >= 4  # both streams, several times
        if s.service is not None:
            assert s.tokens_issued() >= 3
            assert s.service.tokens_issued <= s.service.requests


@pytest.mark.parametrize("kind", CLOUD_KINDS)
async def test_a_token_service_down_for_a_while(kind: str) -> None:
    """Calls go on with the valid token while the service is down; once it expired, calls fail
    with TokenRefreshError naming the credentials; once the service is back, they work again
    and what the writer accepted meanwhile is delivered."""
    ttl = 3.0
    async with (
        setup(kind, ttl) as s,
        yta.Driver(s.server.endpoint, s.server.database, s.credentials, discovery=False) as driver,
        # The same credentials, for calls that must not be retried.
        yta.Driver(
            s.server.endpoint, s.server.database, s.credentials, discovery=False, retry=yta.RetryPolicy.no_retries()
        ) as once,
    ):
        assert s.service is not None
        await driver.topic.create_topic("outage", consumers=["c"])
        async with driver.topic.writer("outage", producer_id="p", token_refresh_interval=REFRESH_CHECK) as writer:
            await asyncio.wait_for(writer.write_with_ack(b"before"), 10)
            # While the service is up, the token in use has at least half its lifetime left,
            # less the margin: ttl / 2 - ttl / 10.
            token = await s.credentials.auth_token()
            async with s.service.down():
                down = time.monotonic()
                # Calls go on with the valid token until it expires; then they fail, clearly.
                while True:
                    try:
                        await once.topic.describe_topic("outage", timeout=5)
                    except yta.TokenRefreshError as error:
                        failure = error
                        break
                    await asyncio.wait_for(writer.write_with_ack(b"during"), 5)
                    assert time.monotonic() < down + ttl, "a token outlived its lifetime"
                    await asyncio.sleep(0.05)
                assert time.monotonic() - down >= ttl * 0.4 - 0.1  # the old token served its time
                text = str(failure)
                assert repr(s.credentials) in text and "has no valid token" in text
                assert "expired" in text
                assert "could not reach" in text or "UNAVAILABLE" in text
                assert failure.retriable
                pending = writer.write_with_ack(b"after the token expired")
            # The service is back: the next attempts get a token, the calls work again.
            await eventually(
                lambda: _succeeds(driver.topic.describe_topic("outage", timeout=2)), "calls work again", timeout=20
            )
            await asyncio.wait_for(pending, 20)
        assert await s.credentials.auth_token() != token
        assert [m.data for m in s.server.storage.read("outage", 0)][-1] == b"after the token expired"


async def _succeeds(call: object) -> bool:
    try:
        await call  # type: ignore[misc]
    except (yta.CredentialsError, yta.OperationTimeoutError):
        return False
    return True


async def test_a_wrong_key_is_a_clear_error_without_a_retry_storm() -> None:
    async with IamTokenService(token_ttl=TTL) as iam, LocalTopicServer(token_services=[iam]) as server:
        key = iam.create_key("sa-writer")
        key["private_key"] = private_pem(rsa_key()).decode()  # not the registered key's
        credentials = yta.ServiceAccountCredentials.from_content(json.dumps(key), iam_endpoint=iam.endpoint)
        async with yta.Driver(server.endpoint, server.database, credentials) as driver:
            started = time.monotonic()
            for _ in range(30):
                with pytest.raises(yta.CredentialsRejectedError) as failure:
                    await driver.topic.describe_topic("t", timeout=5)  # the default retry policy
                await asyncio.sleep(0.05)
            with pytest.raises(yta.CredentialsRejectedError):
                async with driver.topic.writer("t", producer_id="p") as writer:
                    await asyncio.wait_for(writer.write_with_ack(b"x"), 5)
            elapsed = time.monotonic() - started
        text = str(failure.value)
        assert "the token service refused the credentials" in text
        assert "UNAUTHENTICATED: the JWT's signature does not match the key" in text
        assert repr(credentials) in text
        assert not failure.value.retriable
        # One request, then a pause growing from about a second: not one per call.
        assert iam.requests <= 2 + elapsed, (iam.requests, elapsed)
        assert iam.tokens_issued == 0


async def test_a_refused_subject_token_is_a_clear_error() -> None:
    async with (
        TokenExchangeService(subject_tokens={SUBJECT_TOKEN: USER}, token_ttl=TTL) as exchange,
        LocalTopicServer(token_services=[exchange]) as server,
    ):
        credentials = yta.Oauth2TokenExchangeCredentials(
            exchange.url, yta.FixedTokenSource("not-the-subject-token", ACCESS_TOKEN_TYPE)
        )
        async with yta.Driver(server.endpoint, server.database, credentials, discovery=False) as driver:
            with pytest.raises(yta.CredentialsRejectedError) as failure:
                await driver.topic.describe_topic("t", timeout=5)
        text = str(failure.value)
        # The service echoes the token it refused; the error masks it.
        # (Other tests' secrets are registered too, and may mask other words of the description.)
        assert re.search(r"HTTP 400: error 'invalid_grant', error_description 'the .*\*\*\* is not valid'", text), text
        assert "not-the-subject-token" not in text
        assert exchange.requests == 1


async def test_standalone_credentials_refresh_inside_async_with() -> None:
    """Used without a driver, ``async with credentials`` keeps the token fresh in the background."""
    async with setup("metadata", 1.0) as s:
        credentials = s.credentials
        assert isinstance(credentials, yta.MetadataUrlCredentials)
        async with credentials:
            first = await credentials.auth_token()
            assert s.service is not None
            service = s.service
            await eventually(lambda: service.tokens_issued >= 3, "two refreshes in the background", timeout=10)
            assert await credentials.auth_token() != first
        issued = service.tokens_issued
        await asyncio.sleep(1.2)
        assert service.tokens_issued == issued  # the refresher ended with the block


async def test_the_guides_offline_example_runs() -> None:
    """docs/authentication.md, "Testing offline": the example as a reader would run it."""
    blocks = re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text(), re.MULTILINE | re.DOTALL)
    (example,) = [b for b in blocks if "iam.create_key" in b]
    namespace: dict[str, object] = {}
    exec(f"async def example():\n{textwrap.indent(example, '    ')}", namespace)
    await namespace["example"]()  # type: ignore[operator]


@pytest.mark.parametrize("lifetime", [2.0, 60.0, 3600.0])
async def test_a_refresh_comes_before_the_token_stops_being_used(lifetime: float) -> None:
    """A token is used until a margin before its expiry (a tenth of a short lifetime); the
    background refresh comes well before that even with ``refresh_fraction`` 0.9 (the user and
    password default), so that no call waits for it."""
    async def fetch() -> IssuedToken:
        return IssuedToken("a-token", lifetime)

    cache = TokenCache(fetch, lambda: "test credentials", refresh_fraction=0.9)
    await cache.token()
    used_for = lifetime - expiry_margin(lifetime)
    assert cache.next_refresh_in() <= 0.9 * used_for + 0.1
    assert used_for - cache.next_refresh_in() >= 0.1 * used_for - 0.1  # time left to refresh in
