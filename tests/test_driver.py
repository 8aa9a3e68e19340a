"""Driver: connection strings, headers, discovery, readiness, credentials."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import ydb_topic_async as yta
from ydb_topic_async._credentials import token_expiry
from ydb_topic_async._driver import Endpoint, parse_connection_string
from ydb_topic_async._proto import ydb_status_codes_pb2
from ydb_topic_async.testing import LocalTopicServer

from ._discovery import DiscoveryServer, ListedNode, discovery_server
from ._helpers import stored_data


@pytest.mark.parametrize(
    ("text", "endpoint", "database"),
    [
        ("grpc://localhost:2136/?database=/local", Endpoint("localhost", 2136, False), "/local"),
        ("grpcs://ydb.example.com:2135/?database=/ru/db1", Endpoint("ydb.example.com", 2135, True), "/ru/db1"),
        ("grpc://127.0.0.1:9000/local/sub", Endpoint("127.0.0.1", 9000, False), "/local/sub"),
        ("localhost:2136", Endpoint("localhost", 2136, False), None),
        ("grpcs://host", Endpoint("host", 2135, True), None),
        ("grpc://[::1]:2136", Endpoint("::1", 2136, False), None),
    ],
)
def test_connection_strings(text: str, endpoint: Endpoint, database: str | None) -> None:
    assert parse_connection_string(text) == (endpoint, database)


@pytest.mark.parametrize("text", ["", "http://host:80", "grpc://:2136", "grpc://host:notaport"])
def test_bad_connection_strings_raise_clearly(text: str) -> None:
    with pytest.raises(yta.InvalidArgumentError):
        parse_connection_string(text)


def test_driver_needs_an_absolute_database() -> None:
    with pytest.raises(yta.InvalidArgumentError, match="database is required"):
        yta.Driver("grpc://localhost:2136")
    with pytest.raises(yta.InvalidArgumentError, match="absolute"):
        yta.Driver("grpc://localhost:2136", "local")
    assert yta.Driver("grpc://localhost:2136/?database=/local").database == "/local"


def test_ipv6_target_is_bracketed() -> None:
    assert Endpoint("::1", 2136).target == "[::1]:2136"


@pytest.fixture
async def discovery() -> AsyncIterator[DiscoveryServer]:
    async with discovery_server() as srv:
        yield srv


async def test_headers_are_sent(discovery: DiscoveryServer) -> None:
    creds = yta.AccessTokenCredentials("secret-token")
    async with yta.Driver(discovery.endpoint, "/local", creds, application_name="billing") as driver:
        await driver.wait_ready(timeout=5)
    headers = discovery.calls[-1]
    assert headers["x-ydb-database"] == "/local"
    assert headers["x-ydb-auth-ticket"] == "secret-token"
    assert headers["x-ydb-application-name"] == "billing"
    assert headers["x-ydb-sdk-build-info"] == f"ydb-topic-async/{yta.__version__}"
    assert "secret-token" not in repr(creds)


async def test_discovery_replaces_endpoints_and_falls_back() -> None:
    nodes = [ListedNode("localhost", 1), ListedNode("localhost", 2)]
    async with discovery_server(nodes) as srv, yta.Driver(srv.endpoint, "/local") as driver:
        await driver.wait_ready(timeout=5)
        assert driver.endpoints == ["grpc://localhost:1", "grpc://localhost:2"]
    unavailable = ydb_status_codes_pb2.StatusIds.UNAVAILABLE
    async with discovery_server(status=unavailable) as failing, yta.Driver(failing.endpoint, "/local") as driver:
        with pytest.raises(yta.OperationTimeoutError, match="UNAVAILABLE"):
            await driver.wait_ready(timeout=0.5)  # the answer keeps being UNAVAILABLE
        assert driver.endpoints == [failing.endpoint]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_wait_ready_fails_clearly_when_nothing_answers() -> None:
    port = _free_port()
    async with yta.Driver(f"grpc://127.0.0.1:{port}", "/local", discovery=False) as driver:
        started = time.monotonic()
        with pytest.raises(yta.OperationTimeoutError, match=f"127.0.0.1:{port}"):
            await driver.wait_ready(timeout=1.0)
        assert time.monotonic() - started < 5


async def test_calls_after_close_raise(server: LocalTopicServer) -> None:
    driver = yta.Driver(server.endpoint, server.database)
    async with driver:
        await driver.wait_ready(timeout=5)
    assert driver.closed
    with pytest.raises(yta.ClosedError):
        await driver.topic.describe_topic("anything")
    await driver.close()  # a second close is a no-op


def _jwt(exp: float) -> str:
    def enc(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{enc({'alg': 'none'})}.{enc({'exp': exp})}.sig"


def test_token_expiry_reads_jwt_exp_only() -> None:
    assert token_expiry(_jwt(1_900_000_000)) == 1_900_000_000
    assert token_expiry("opaque-token") is None
    assert token_expiry("a.b.c") is None


async def test_token_provider_is_cached() -> None:
    calls = 0

    async def provider() -> str:
        nonlocal calls
        calls += 1
        return f"t{calls}"

    creds = yta.TokenProviderCredentials(provider, cache_seconds=60)
    assert await creds.auth_token() == "t1"
    assert await creds.auth_token() == "t1"
    uncached = yta.TokenProviderCredentials(provider)
    assert await uncached.auth_token() == "t2"
    assert await uncached.auth_token() == "t3"


async def test_static_credentials_log_in_and_are_required() -> None:
    async with LocalTopicServer(users={"alice": "wonderland"}) as srv:
        async with yta.Driver(srv.endpoint, srv.database) as anonymous:
            with pytest.raises(yta.UnauthenticatedError, match="Access denied without user token"):
                await anonymous.topic.create_topic("t")
        async with yta.Driver(srv.endpoint, srv.database, yta.StaticCredentials("alice", "bad")) as wrong:
            with pytest.raises(yta.UnauthorizedError):
                await wrong.topic.create_topic("t")
        creds = yta.StaticCredentials("alice", "wonderland")
        async with yta.Driver(srv.endpoint, srv.database, creds) as driver:
            await driver.topic.create_topic("t")
            assert (await driver.topic.describe_topic("t")).path == f"{srv.database}/t"
            assert "wonderland" not in repr(creds)


async def test_static_credentials_refresh_before_expiry() -> None:
    async with LocalTopicServer(users={"bob": "pw"}) as srv:
        creds = yta.StaticCredentials("bob", "pw", refresh_interval=0.2)
        async with yta.Driver(srv.endpoint, srv.database, creds) as driver:
            first = await creds.auth_token()
            assert await creds.auth_token() == first  # cached
            await driver.topic.create_topic("t")
            await asyncio.sleep(0.25)
            second = await creds.auth_token()
            assert second and second != first
            await driver.topic.describe_topic("t")


async def test_closing_the_driver_flushes_its_writers_first(server: LocalTopicServer) -> None:
    async with yta.Driver(server.endpoint, server.database) as admin:
        await admin.topic.create_topic("flushed")
    driver = yta.Driver(server.endpoint, server.database)
    await driver.open()
    writer = driver.topic.writer("flushed", producer_id="p")
    await writer.open()
    await writer.write([b"a", b"b"])  # accepted; possibly not even sent yet
    await driver.close()
    assert writer.closed
    assert stored_data(server, "flushed") == [b"a", b"b"]
    with pytest.raises(yta.ClosedError):
        await writer.write(b"late")


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM)."""
    directory = tmp_path_factory.mktemp("tls")
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return key.read_bytes(), cert.read_bytes()


async def test_tls_with_given_root_certificates(tls_pair: tuple[bytes, bytes]) -> None:
    key, cert = tls_pair
    async with LocalTopicServer(tls=(key, cert)) as srv:
        assert srv.endpoint.startswith("grpcs://")
        async with yta.Driver(srv.endpoint, srv.database, root_certificates=cert) as driver:
            await driver.wait_ready(timeout=5)
            assert driver.endpoints == [srv.endpoint]  # discovery reports TLS too
            await driver.topic.create_topic("secure")
            assert (await driver.topic.describe_topic("secure")).path == "/local/secure"
        # The system trust store does not know this self-signed certificate.
        async with yta.Driver(
            srv.endpoint, srv.database, discovery=False, retry=yta.RetryPolicy.no_retries()
        ) as untrusting:
            with pytest.raises(yta.ConnectionLostError):
                await untrusting.topic.describe_topic("secure", timeout=5)


_ONE_LOOP_AFTER_ANOTHER = """
import asyncio, sys
from ydb_topic_async import Driver, TopicSelector

endpoint, database = sys.argv[1], sys.argv[2]

async def fill() -> None:
    async with Driver(endpoint, database) as driver:
        for partition in (0, 1):
            async with driver.topic.writer("loops", producer_id=f"p{partition}", partition_id=partition) as writer:
                for _ in range(1000):
                    await writer.write(b"x" * 100)

async def write_concurrently() -> None:
    async def one(driver: Driver, partition: int) -> None:
        async with driver.topic.writer("loops", producer_id=f"q{partition}", partition_id=partition) as writer:
            for _ in range(1000):
                await writer.write(b"x" * 100)

    async with Driver(endpoint, database) as driver:
        await asyncio.gather(one(driver, 0), one(driver, 1))
        async with driver.query.transaction() as tx:
            await driver.topic.tx_writer(tx, "loops").write(b"in tx")

async def read() -> None:
    async with Driver(endpoint, database) as driver:
        async with driver.topic.reader(TopicSelector("loops", start_offsets={0: 0, 1: 0}), consumer=None) as reader:
            seen = 0
            while seen < 2000:
                seen += len(await reader.receive_batch(timeout=10))
        async with driver.topic.reader("loops", consumer="c") as reader:
            await reader.commit_with_ack(await reader.receive_batch(timeout=10))

# What scripts do: one asyncio.run after another, each with its own loop.
asyncio.run(fill())
for _ in range(3):
    asyncio.run(write_concurrently())
    asyncio.run(read())
print("ok")
"""


async def test_drivers_on_successive_event_loops_leave_nothing_for_closed_loops(
    driver: yta.Driver, server: LocalTopicServer
) -> None:
    """gRPC hands a call's last events to the loop it ran on; a closed Driver must have freed its
    calls by then, or they land on a loop that asyncio.run already closed."""
    await driver.topic.create_topic("loops", min_active_partitions=2, consumers=["c"])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _ONE_LOOP_AFTER_ANOTHER, server.endpoint, server.database,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert (proc.returncode, out) == (0, b"ok\n"), err.decode()[-2000:]
    assert b"Event loop is closed" not in err, err.decode()[-2000:]
    assert b"Traceback" not in err, err.decode()[-2000:]


_BESIDE_ANOTHER_LOOP = """
import asyncio, sys, threading
from ydb_topic_async import Driver, TopicSelector
from ydb_topic_async.testing import LocalTopicServer

# Another event loop of the process, in a thread, also running gRPC: it picks up gRPC events
# meant for other loops and forwards them, to a closed loop too.
loop = asyncio.new_event_loop()
threading.Thread(target=loop.run_forever, daemon=True).start()

async def start() -> LocalTopicServer:
    server = LocalTopicServer()
    await server.start()
    return server

server = asyncio.run_coroutine_threadsafe(start(), loop).result(30)

async def setup() -> None:
    async with Driver(server.endpoint, server.database) as driver:
        await driver.topic.create_topic("beside", min_active_partitions=2)

async def write(i: int) -> None:
    async with Driver(server.endpoint, server.database) as driver:
        async with driver.topic.writer("beside", producer_id=f"p{i}", partition_id=i % 2) as writer:
            await writer.write([b"x" * 100] * 10)

async def read() -> None:
    async with Driver(server.endpoint, server.database) as driver:
        selector = TopicSelector("beside", start_offsets={0: 0, 1: 0})
        async with driver.topic.reader(selector, consumer=None) as reader:
            await reader.receive_batch(timeout=10)

async def describe() -> None:
    async with Driver(server.endpoint, server.database) as driver:
        await driver.topic.describe_topic("beside")

asyncio.run(setup())
for i in range(int(sys.argv[1])):
    asyncio.run(write(i))
    asyncio.run(read())
    asyncio.run(describe())
asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
print("ok")
"""


async def test_a_driver_closed_beside_another_event_loop_leaves_nothing_for_its_closed_loop() -> None:
    """gRPC completes the operations of the calls a closing Driver cancels (its streams, an endpoint
    discovery in flight) a moment later, from its poller thread; another event loop of the process
    (here, a local server's) picks those events up and forwards them to their loop. ``close`` waits
    for them, so that a loop closed right after it (``asyncio.run`` returning) is not handed any."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _BESIDE_ANOTHER_LOOP, "15",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert (proc.returncode, out) == (0, b"ok\n"), err.decode()[-2000:]
    assert b"Event loop is closed" not in err, err.decode()[-2000:]
    assert b"Traceback" not in err, err.decode()[-2000:]


def test_what_the_driver_shows_is_what_its_clients_use() -> None:
    """The policies, recorder and limits a driver shows are those its writers and readers are
    built with; they are fixed at construction (assigning one would change nothing)."""
    policy = yta.RetryPolicy(max_elapsed=5)
    driver = yta.Driver("grpc://localhost:2136", "/local", retry=policy, max_message_size=1 << 20)
    assert driver.retry is policy and driver.stream_retry is policy
    assert driver.max_message_size == 1 << 20 and isinstance(driver.metrics, yta.NoopMetrics)
    plain = yta.Driver("grpc://localhost:2136", "/local")
    assert plain.stream_retry.max_elapsed is None  # writers and readers reconnect while open
    assert plain.retry.max_elapsed == 60
    for name in ("retry", "stream_retry", "metrics", "tracing", "max_message_size", "database", "credentials"):
        with pytest.raises(AttributeError):
            setattr(driver, name, None)
