"""The local server's tickets beyond login: pre-shared tokens, tokens of trusted token services,
YDB's ticket types; and the testing token services' own checks.

Ticket types as YDB's ticket parser reads them (ydb/core/security/ticket_parser_impl.h:
``"<type> <token>"`` split at the first space; ``Bearer``/``IAM`` to the access service,
``Login`` to login tokens, another type "Unknown token", no type tried against every validator,
"Could not find correct token validator" when none knows it); refusals are the gRPC status
UNAUTHENTICATED (ydb/core/grpc_services/grpc_request_check_actor.h ``OnAccessDenied``)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import grpc
import grpc.aio
import httpx
import jwt
import pytest

from ydb_topic_async._proto import iam_token_service_pb2 as iam_pb
from ydb_topic_async._proto import ydb_discovery_pb2
from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async.testing import IamTokenService, LocalTopicServer, MetadataService, TokenExchangeService
from ydb_topic_async.testing._serve import _token

from ..credentials._pki import private_pem, public_pem, rsa_key
from .conftest import LOCAL_POOL, RawWriter, address, call, unpack

DISCOVERY = "Ydb.Discovery.V1.DiscoveryService"
IAM_AUDIENCE = "https://iam.api.cloud.yandex.net/iam/v1/tokens"


async def _who(channel: grpc.aio.Channel, ticket: str) -> str:
    """The user WhoAmI reports for ``ticket``, or ``refused: <details>``."""
    try:
        op = await call(channel, "WhoAmI", ydb_discovery_pb2.WhoAmIRequest(), ydb_discovery_pb2.WhoAmIResponse,
                        service=DISCOVERY, metadata=[("x-ydb-auth-ticket", ticket)])
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
        return f"refused: {exc.details()}"
    return str(unpack(op, ydb_discovery_pb2.WhoAmIResult).user)


async def test_pre_shared_tokens_and_ticket_types() -> None:
    async with (
        LocalTopicServer(tokens={"ci-token": "ci@builtin"}, users={"alice": "pw"}) as server,
        grpc.aio.insecure_channel(address(server), options=LOCAL_POOL) as channel,
    ):
        login = server.auth.login("alice", "pw")
        assert login is not None
        assert await _who(channel, "ci-token") == "ci@builtin"
        assert await _who(channel, "Bearer ci-token") == "ci@builtin"
        assert await _who(channel, "IAM ci-token") == "ci@builtin"
        assert await _who(channel, login) == "alice"
        assert await _who(channel, f"Login {login}") == "alice"
        unknown = "refused: unauthenticated: Could not find correct token validator"
        assert await _who(channel, "Login ci-token") == unknown
        assert await _who(channel, "Bearer unknown") == unknown
        assert await _who(channel, "Token ci-token") == "refused: unauthenticated: Unknown token"
        assert await _who(channel, "other") == unknown
        assert server.interceptor.refused == 4
        # Streams are refused before they are served, with the same status.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await RawWriter(channel, [("x-ydb-auth-ticket", "other")]).init("t", producer_id="p")
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_tokens_of_a_trusted_service_until_they_expire() -> None:
    async with (
        MetadataService("sa-vm", token_ttl=0.5) as metadata,
        LocalTopicServer(token_services=[metadata]) as server,
        grpc.aio.insecure_channel(address(server), options=LOCAL_POOL) as channel,
        httpx.AsyncClient() as http,
    ):
        answer = (await http.get(metadata.url, headers={"Metadata-Flavor": "Google"})).json()
        assert answer["token_type"] == "Bearer"
        assert answer["expires_in"] == 0.5
        token = answer["access_token"]
        assert await _who(channel, token) == "sa-vm@as"
        assert await _who(channel, f"Bearer {token}") == "sa-vm@as"
        writer = RawWriter(channel, [("x-ydb-auth-ticket", token)])
        await writer.init("missing", producer_id="p")  # admitted (the topic does not exist)
        await asyncio.sleep(0.6)
        assert await _who(channel, token) == "refused: unauthenticated: Token has expired"


async def test_an_access_service_ticket_without_an_access_service() -> None:
    async with (
        LocalTopicServer(users={"alice": "pw"}) as server,
        grpc.aio.insecure_channel(address(server), options=LOCAL_POOL) as channel,
    ):
        token = server.auth.login("alice", "pw")
        assert await _who(channel, f"Bearer {token}") == "refused: unauthenticated: Token is not supported"


async def test_an_expired_token_sent_in_band_ends_the_stream() -> None:
    """ydb/core/persqueue read and write session actors: a refreshed token that is not valid ends the
    stream with UNAUTHENTICATED "unauthenticated, refreshed token is invalid"."""
    async with (
        MetadataService(token_ttl=0.3) as metadata,
        LocalTopicServer(token_services=[metadata], tokens={"admin": "root"}) as server,
        grpc.aio.insecure_channel(address(server), options=LOCAL_POOL) as channel,
    ):
        await call(channel, "CreateTopic", pb.CreateTopicRequest(path="t"), pb.CreateTopicResponse,
                   metadata=[("x-ydb-auth-ticket", "admin")])
        async with httpx.AsyncClient() as http:
            answer = (await http.get(metadata.url, headers={"Metadata-Flavor": "Google"})).json()
        writer = RawWriter(channel, [("x-ydb-auth-ticket", "admin")])
        await writer.init("t", producer_id="p")
        await asyncio.sleep(0.4)
        await writer.call.write(pb.StreamWriteMessage.FromClient(
            update_token_request=pb.UpdateTokenRequest(token=answer["access_token"])))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await writer.read()
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert refused.value.details() == "unauthenticated, refreshed token is invalid: Token has expired"
        assert server.stats.token_updates == 0


def test_pre_shared_tokens_on_the_command_line() -> None:
    assert _token("ci-token:ci@builtin") == ("ci-token", "ci@builtin")
    assert _token("a:b:carol") == ("a:b", "carol")


# --- the IAM token service's checks ----------------------------------------------------------------


async def _create(iam: IamTokenService, assertion: str | None) -> tuple[grpc.StatusCode, str]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{iam.port}", options=LOCAL_POOL) as channel:
        create = channel.unary_unary(
            "/yandex.cloud.iam.v1.IamTokenService/Create",
            request_serializer=iam_pb.CreateIamTokenRequest.SerializeToString,
            response_deserializer=iam_pb.CreateIamTokenResponse.FromString,
        )
        request = iam_pb.CreateIamTokenRequest(jwt=assertion) if assertion is not None else \
            iam_pb.CreateIamTokenRequest(yandex_passport_oauth_token="oauth")
        try:
            response = await create(request, timeout=10)
        except grpc.aio.AioRpcError as exc:
            return exc.code(), str(exc.details())
        assert response.expires_at.seconds > time.time()
        return grpc.StatusCode.OK, response.iam_token


def _signed(key: Any, **changes: Any) -> str:
    now = int(time.time())
    claims = {"iss": "sa-1", "aud": IAM_AUDIENCE, "iat": now, "exp": now + 3600}
    headers = {"kid": changes.pop("kid", "key-1")}
    algorithm = changes.pop("algorithm", "PS256")
    claims.update(changes)
    present = {k: v for k, v in claims.items() if v is not None}
    return str(jwt.encode(present, key, algorithm=algorithm, headers=headers))


async def test_the_iam_token_service_checks_the_jwt() -> None:
    """What the IAM token service requires of a service account's JWT (Yandex Cloud docs, "Get an
    IAM token for a service account"): PS256, a known key id, the IAM audience, the account as
    issuer, not expired, at most an hour long."""
    async with IamTokenService(token_ttl=60) as iam:
        key = iam.create_key("sa-1", key_id="key-1")
        private = key["private_key"].split("\n", 1)[1]
        status, token = await _create(iam, _signed(private.encode()))
        assert status == grpc.StatusCode.OK
        assert iam.validate(token) == ("sa-1@as", None)
        cases = [
            (_signed(private_pem(rsa_key())), "the JWT's signature does not match the key"),
            (_signed(private.encode(), kid="key-2"), "unknown key id 'key-2'"),
            (_signed(private.encode(), algorithm="RS256"), "must be signed with PS256, not 'RS256'"),
            (_signed(private.encode(), aud="https://elsewhere"), "audience is not"),
            (_signed(private.encode(), iss="sa-2"), "issuer is not the key's service account"),
            (_signed(private.encode(), exp=int(time.time()) - 10), "the JWT has expired"),
            (_signed(private.encode(), exp=int(time.time()) + 7200), "lives longer than an hour"),
            (_signed(private.encode(), iat=None), "invalid JWT"),
            ("not-a-jwt", "the JWT is malformed"),
        ]
        for assertion, reason in cases:
            status, details = await _create(iam, assertion)
            assert (status, reason in details) == (grpc.StatusCode.UNAUTHENTICATED, True), (reason, details)
        assert await _create(iam, None) == (
            grpc.StatusCode.INVALID_ARGUMENT, "only a service account's jwt is supported here"
        )
        assert (iam.requests, iam.refused, iam.tokens_issued) == (11, 10, 1)


async def test_token_services_keep_their_port_across_an_outage() -> None:
    async with IamTokenService() as iam, MetadataService() as metadata:
        ports = (iam.port, metadata.port)
        key = iam.create_key()
        async with iam.down(), metadata.down():
            assert (await _create(iam, "x"))[0] == grpc.StatusCode.UNAVAILABLE
            async with httpx.AsyncClient() as http:
                with pytest.raises(httpx.ConnectError):
                    await http.get(metadata.url, headers={"Metadata-Flavor": "Google"})
        assert (iam.port, metadata.port) == ports
        private = key["private_key"].split("\n", 1)[1].encode()
        assert (await _create(iam, _signed(private, iss="sa-local", kid=key["id"])))[0] == grpc.StatusCode.OK


# --- the token exchange and metadata endpoints -----------------------------------------------------


async def test_the_token_exchange_endpoint() -> None:
    """RFC 8693 section 2: a form POST with grant_type, subject_token and subject_token_type; errors
    are RFC 6749 section 5.2 JSON with ``error`` and ``error_description``."""
    signing = rsa_key()
    async with (
        TokenExchangeService(subject_tokens={"fixed": "alice"}, jwt_keys={"k": public_pem(signing)}, audience="ydb")
        as exchange,
        httpx.AsyncClient() as http,
    ):
        grant = "urn:ietf:params:oauth:grant-type:token-exchange"
        access = "urn:ietf:params:oauth:token-type:access_token"

        async def post(**fields: str) -> tuple[int, dict[str, Any]]:
            response = await http.post(exchange.url, data=fields)
            return response.status_code, response.json()

        status, body = await post(grant_type=grant, subject_token="fixed", subject_token_type=access, audience="ydb",
                                  scope="topics")
        assert status == 200
        assert body["token_type"] == "Bearer" and body["issued_token_type"] == access and body["scope"] == "topics"
        assert exchange.validate(body["access_token"]) == ("alice", None)
        now = int(time.time())
        subject = jwt.encode({"sub": "bob", "iat": now, "exp": now + 60}, signing, algorithm="RS256",
                             headers={"kid": "k"})
        status, body = await post(grant_type=grant, subject_token=subject,
                                  subject_token_type="urn:ietf:params:oauth:token-type:jwt", audience="ydb")
        assert status == 200 and exchange.validate(body["access_token"]) == ("bob", None)
        for fields, error in [
            ({"grant_type": "client_credentials"}, "unsupported_grant_type"),
            ({"grant_type": grant, "subject_token": "fixed", "subject_token_type": access}, "invalid_target"),
            ({"grant_type": grant, "audience": "ydb"}, "invalid_request"),
            ({"grant_type": grant, "subject_token": "wrong", "subject_token_type": access, "audience": "ydb"},
             "invalid_grant"),
            ({"grant_type": grant, "subject_token": "fixed", "subject_token_type": access, "audience": "ydb",
              "requested_token_type": "urn:ietf:params:oauth:token-type:id_token"}, "invalid_request"),
        ]:
            status, body = await post(**fields)
            assert (status, body["error"]) == (400, error)
            assert body["error_description"]
        assert exchange.tokens_issued == 2


async def test_the_metadata_endpoint_needs_its_header() -> None:
    async with MetadataService() as metadata, httpx.AsyncClient() as http:
        assert (await http.get(metadata.url)).status_code == 403
        elsewhere = metadata.url.replace("token", "other")
        assert (await http.get(elsewhere, headers={"Metadata-Flavor": "Google"})).status_code == 404
        answer = await http.get(metadata.url, headers={"Metadata-Flavor": "Google"})
        assert answer.status_code == 200 and set(answer.json()) == {"access_token", "expires_in", "token_type"}
        assert metadata.requests == 3 and metadata.tokens_issued == 1
        assert json.loads(answer.content)["expires_in"] == 3600
