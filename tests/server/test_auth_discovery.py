"""Discovery, Login, the auth ticket and database header checks of the local server.

A refused ticket ends the call with the gRPC status UNAUTHENTICATED and the details
"unauthenticated: <reason>", before the call is served, as YDB's gRPC layer answers for a ticket
its ticket parser refused (``ydb/core/grpc_services/grpc_request_check_actor.h`` ``OnAccessDenied``
sets the auth state AS_FAIL; "Access denied without user token" comes from
``ydb/core/security/secure_request.h`` when a required token is missing).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import grpc.aio
import pytest
import ydb
from ydb.aio.driver import Driver as OfficialDriver

from ydb_topic_async._proto import ydb_auth_pb2, ydb_discovery_pb2
from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async._proto.ydb_status_codes_pb2 import StatusIds
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.stored import TopicSettings

from .conftest import LOCAL_POOL, RawReader, RawWriter, address, call, unpack

DISCOVERY = "Ydb.Discovery.V1.DiscoveryService"
AUTH = "Ydb.Auth.V1.AuthService"


@pytest.fixture
async def secured() -> AsyncIterator[tuple[LocalTopicServer, grpc.aio.Channel]]:
    async with (
        LocalTopicServer(users={"alice": "secret"}, token_ttl=0.5) as srv,
        grpc.aio.insecure_channel(address(srv), options=LOCAL_POOL) as ch,
    ):
        yield srv, ch


async def refused(call: Awaitable[Any]) -> str:
    """The details of the UNAUTHENTICATED status ``call`` ends with."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    return str(info.value.details())


async def login(channel: grpc.aio.Channel, user: str, password: str) -> object:
    return await call(channel, "Login", ydb_auth_pb2.LoginRequest(user=user, password=password),
                      ydb_auth_pb2.LoginResponse, service=AUTH)


async def test_list_endpoints_names_the_server(server: LocalTopicServer, channel: grpc.aio.Channel) -> None:
    op = await call(channel, "ListEndpoints", ydb_discovery_pb2.ListEndpointsRequest(database="/local"),
                    ydb_discovery_pb2.ListEndpointsResponse, service=DISCOVERY)
    result = unpack(op, ydb_discovery_pb2.ListEndpointsResult)
    assert [(e.address, e.port, e.ssl, list(e.service)) for e in result.endpoints] == [
        ("127.0.0.1", server.port, False, [])
    ]
    op = await call(channel, "WhoAmI", ydb_discovery_pb2.WhoAmIRequest(), ydb_discovery_pb2.WhoAmIResponse,
                    service=DISCOVERY)
    assert unpack(op, ydb_discovery_pb2.WhoAmIResult).user == "root"


async def test_database_header_must_match(channel: grpc.aio.Channel) -> None:
    wrong = [("x-ydb-database", "/elsewhere")]
    op = await call(channel, "DescribeTopic", pb.DescribeTopicRequest(path="t"), pb.DescribeTopicResponse,
                    metadata=wrong)
    assert op.status == StatusIds.BAD_REQUEST
    assert op.issues[0].message == "database '/elsewhere' is not served here; this server serves '/local'"
    reply = await RawWriter(channel, metadata=wrong).init("t")
    assert reply.status == StatusIds.BAD_REQUEST
    # Without the header the call goes through (here: to a missing topic).
    op = await call(channel, "DescribeTopic", pb.DescribeTopicRequest(path="t"), pb.DescribeTopicResponse,
                    metadata=[])
    assert op.status == StatusIds.SCHEME_ERROR


async def test_unary_calls_need_a_valid_ticket(secured: tuple[LocalTopicServer, grpc.aio.Channel]) -> None:
    _, ch = secured
    create = pb.CreateTopicRequest(path="t")
    details = await refused(call(ch, "CreateTopic", create, pb.CreateTopicResponse))
    assert details == "unauthenticated: Access denied without user token"
    bad = await login(ch, "alice", "wrong")
    assert (bad.status, bad.issues[0].message) == (StatusIds.UNAUTHORIZED,  # type: ignore[attr-defined]
                                                    "invalid user or password for 'alice'")
    token = unpack(await login(ch, "alice", "secret"), ydb_auth_pb2.LoginResult).token
    headers = [("x-ydb-database", "/local"), ("x-ydb-auth-ticket", token)]
    unpack(await call(ch, "CreateTopic", create, pb.CreateTopicResponse, metadata=headers), pb.CreateTopicResult)
    who = await call(ch, "WhoAmI", ydb_discovery_pb2.WhoAmIRequest(), ydb_discovery_pb2.WhoAmIResponse,
                     service=DISCOVERY, metadata=headers)
    assert unpack(who, ydb_discovery_pb2.WhoAmIResult).user == "alice"
    describe = pb.DescribeTopicRequest(path="t")
    forged = [("x-ydb-auth-ticket", "forged")]
    details = await refused(call(ch, "DescribeTopic", describe, pb.DescribeTopicResponse, metadata=forged))
    assert details == "unauthenticated: Could not find correct token validator"
    # A typed ticket goes to its validator only: "Login" to the login tokens; an access-service
    # type without an access service, or a type YDB does not know, is refused as YDB does.
    typed = [("x-ydb-auth-ticket", f"Login {token}")]
    unpack(await call(ch, "DescribeTopic", describe, pb.DescribeTopicResponse, metadata=typed), pb.DescribeTopicResult)
    for ticket, reason in ((f"Bearer {token}", "Token is not supported"), (f"Basic {token}", "Unknown token")):
        bearer = [("x-ydb-auth-ticket", ticket)]
        details = await refused(call(ch, "DescribeTopic", describe, pb.DescribeTopicResponse, metadata=bearer))
        assert details == f"unauthenticated: {reason}"
    await asyncio.sleep(0.6)  # token_ttl
    details = await refused(call(ch, "DescribeTopic", describe, pb.DescribeTopicResponse, metadata=headers))
    assert details == "unauthenticated: Token has expired"


async def test_streams_need_a_valid_ticket(secured: tuple[LocalTopicServer, grpc.aio.Channel]) -> None:
    srv, ch = secured
    reader = RawReader(ch)
    details = await refused(reader.init("t", consumer="c"))  # the pump task owns the call's iterator
    assert details == "unauthenticated: Access denied without user token"
    token = srv.auth.login("alice", "secret")
    assert token is not None
    srv.storage.create("t", TopicSettings())
    writer = RawWriter(ch, metadata=[("x-ydb-auth-ticket", token)])
    assert (await writer.init("t", producer_id="p")).status == StatusIds.SUCCESS
    # In-band refresh: a valid token is acknowledged, an unknown one ends the stream.
    fresh = srv.auth.login("alice", "secret")
    assert fresh is not None
    await writer.call.write(pb.StreamWriteMessage.FromClient(
        update_token_request=pb.UpdateTokenRequest(token=fresh)))
    assert (await writer.read()).WhichOneof("server_message") == "update_token_response"
    await writer.call.write(pb.StreamWriteMessage.FromClient(
        update_token_request=pb.UpdateTokenRequest(token="forged")))
    details = await refused(writer.read())
    assert details == "unauthenticated, refreshed token is invalid: Could not find correct token validator"


async def test_official_driver_uses_a_login_token(secured: tuple[LocalTopicServer, grpc.aio.Channel]) -> None:
    # ydb.StaticCredentials logs in with a blocking call, which would stall this very event loop
    # (the server runs on it); the token is fetched here and handed over as an access token.
    srv, ch = secured
    srv.auth.token_ttl = None
    token = unpack(await login(ch, "alice", "secret"), ydb_auth_pb2.LoginResult).token
    # The official SDK's credentials classes have no annotations.
    credentials = ydb.AccessTokenCredentials(token)  # type: ignore[no-untyped-call]
    driver = OfficialDriver(endpoint=srv.endpoint, database=srv.database, credentials=credentials)
    try:
        await driver.wait(timeout=5)
        await driver.topic_client.create_topic("official", consumers=["c"])
        description = await driver.topic_client.describe_topic("official")
        assert [c.name for c in description.consumers] == ["c"]
    finally:
        await driver.stop()
    assert list(srv.storage.topics) == ["/local/official"]
