"""Refused credentials are one class to catch, ``AccessDeniedError``, wherever they were refused:
at login (the YDB status UNAUTHORIZED), on a call (the gRPC status UNAUTHENTICATED: an unknown or
expired token, or one refused in-band on a stream) or by the token service (before any call).
Each is also its specific class, and none is retried. Over real gRPC against the local server
and its token service, which answer as YDB does (``testing.auth``, ``testing.discovery``)."""

from __future__ import annotations

import asyncio
import json

import pytest

import ydb_topic_async as yta
from ydb_topic_async.testing import IamTokenService, LocalTopicServer

from ._pki import private_pem, rsa_key

pytestmark = pytest.mark.timeout(60)


async def _refused(server: LocalTopicServer, credentials: yta.Credentials) -> yta.AccessDeniedError:
    """What a call with ``credentials`` raises, caught as ``AccessDeniedError``."""
    with pytest.raises(yta.AccessDeniedError) as refused:
        async with yta.Driver(server.endpoint, server.database, credentials) as driver:
            await driver.topic.describe_topic("t", timeout=10)  # the default retry policy
    assert not refused.value.is_retriable(idempotent=True), refused.value
    return refused.value


async def test_a_wrong_password_is_refused_at_login() -> None:
    async with LocalTopicServer(users={"alice": "secret"}) as server:
        error = await _refused(server, yta.StaticCredentials("alice", "wrong"))
        assert isinstance(error, yta.UnauthorizedError) and isinstance(error, yta.ServerError)
        assert "invalid user or password for 'alice'" in str(error) and "wrong" not in str(error)


async def test_an_unknown_token_is_refused() -> None:
    async with LocalTopicServer(tokens={"good": "bob"}) as server:
        error = await _refused(server, yta.AccessTokenCredentials("not-a-token-it-knows"))
        assert isinstance(error, yta.UnauthenticatedError) and isinstance(error, yta.TransportError)
        assert "Could not find correct token validator" in str(error)


async def test_an_expired_token_is_refused() -> None:
    async with LocalTopicServer(users={"alice": "secret"}, token_ttl=0.5) as server:
        async with yta.Driver(server.endpoint, server.database, yta.StaticCredentials("alice", "secret")) as driver:
            token = await driver.transport.auth_token()  # a login token, valid for half a second
        assert token
        await asyncio.sleep(0.8)
        error = await _refused(server, yta.AccessTokenCredentials(token))
        assert isinstance(error, yta.UnauthenticatedError) and "Token has expired" in str(error)


async def test_a_token_refused_in_band_fails_the_writer() -> None:
    """A writer's stream sends each new token in-band; one the server refuses ends the stream
    with UNAUTHENTICATED, and the writer fails with it (not retried)."""
    tokens = ["good"]

    async def provide() -> str:
        return tokens[-1]

    async with (
        LocalTopicServer(tokens={"good": "bob"}) as server,
        yta.Driver(server.endpoint, server.database, yta.TokenProviderCredentials(provide)) as driver,
    ):
        await driver.topic.create_topic("t")
        with pytest.raises(yta.AccessDeniedError) as refused:
            async with driver.topic.writer("t", producer_id="p", token_refresh_interval=0.05) as writer:
                await writer.write_with_ack(b"accepted")
                tokens.append("revoked")
                for _ in range(100):  # bounded: the refusal comes within the next refresh check
                    await asyncio.wait_for(writer.write_with_ack(b"more"), 10)
                    await asyncio.sleep(0.05)
        assert isinstance(refused.value, yta.UnauthenticatedError), refused.value
        # Refused in-band by the stream, or, when a call or a reconnect carries the new token
        # first, in its metadata: either way the server refused that token.
        refusals = ("refreshed token is invalid", "Could not find correct token validator")
        assert any(text in str(refused.value) for text in refusals), refused.value
        assert server.storage.read("t", 0)[0].data == b"accepted"  # before the refusal


async def test_credentials_the_token_service_refuses() -> None:
    async with IamTokenService() as iam, LocalTopicServer(token_services=[iam]) as server:
        key = iam.create_key("sa-writer")
        key["private_key"] = private_pem(rsa_key()).decode()  # not the registered key's
        credentials = yta.ServiceAccountCredentials.from_content(json.dumps(key), iam_endpoint=iam.endpoint)
        error = await _refused(server, credentials)
        assert isinstance(error, yta.CredentialsRejectedError) and isinstance(error, yta.CredentialsError)
        assert iam.tokens_issued == 0


def test_the_specific_classes_keep_their_places_and_retriability() -> None:
    for specific, place in (
        (yta.UnauthorizedError, yta.ServerError),
        (yta.UnauthenticatedError, yta.TransportError),
        (yta.PermissionDeniedError, yta.TransportError),
        (yta.CredentialsRejectedError, yta.CredentialsError),
    ):
        assert issubclass(specific, yta.AccessDeniedError) and issubclass(specific, place)
        assert (specific.retriable, specific.retriable_if_idempotent) == (False, False)
    # A token service that cannot be reached is not a refusal: retried, and not caught as one.
    assert not issubclass(yta.TokenRefreshError, yta.AccessDeniedError) and yta.TokenRefreshError.retriable
