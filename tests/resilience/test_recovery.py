"""After an outage, the SDK's retry policy decides when writers, readers and calls reconnect, and
the retry budget bounds every unary call.

gRPC's own reconnect backoff grows from 1 s by 1.6 times up to 120 s, and a grpc.aio channel
waiting it out cannot be told to try now: after ten seconds of refused connections the next try
may be seconds away. The SDK replaces a channel whose connection attempts failed and caps gRPC's
backoff at its own, so once the server listens again every writer, reader and call is back
within the policy's backoff step (at most about a second by default). ``scripts/recovery.py``
measures it against a server process that is killed and restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

import pytest

import ydb_topic_async as yta
from ydb_topic_async._proto import ydb_topic_pb2 as pb
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import proxy_to, silent_endpoint

from .._polling import eventually

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

OUTAGE = 10.0
"""Long enough for gRPC's own reconnect backoff to have grown to several seconds."""
GRPC_NEXT_STEP = 4.0
"""Where gRPC's own reconnect backoff would be after OUTAGE seconds of refused connections (1 s
grown 1.6 times thrice: 4.1 s to the next try). Recovering within it tells the SDK's reconnect
from gRPC's; it is no speed target (``scripts/recovery.py`` measures that: well under a second)."""


async def test_writers_readers_and_calls_resume_within_a_backoff_step_of_the_servers_return(
    server: LocalTopicServer, topic: str
) -> None:
    async with proxy_to(server) as proxy, yta.Driver(proxy.endpoint, server.database, discovery=False) as driver:
        writers = [driver.topic.writer(topic, producer_id=f"w{i}") for i in range(3)]
        readers = [driver.topic.reader(topic, consumer="consumer") for _ in range(3)]
        async with contextlib.AsyncExitStack() as stack:
            for writer in writers:
                await stack.enter_async_context(writer)
            for reader in readers:
                await stack.enter_async_context(reader)
            for writer in writers:
                await writer.write_with_ack(b"before")
            await proxy.refuse()
            acks = [asyncio.ensure_future(w.write_with_ack(b"during")) for w in writers]
            await asyncio.sleep(OUTAGE)
            assert all(r.connection_state is yta.ConnectionState.RECONNECTING for r in readers)
            await proxy.restore()
            back = time.monotonic()
            await asyncio.wait_for(driver.topic.describe_topic(topic), 10)
            await asyncio.wait_for(asyncio.gather(*acks), 10)
            await eventually(lambda: all(r.connection_state is yta.ConnectionState.CONNECTED for r in readers))
            elapsed = time.monotonic() - back
        assert elapsed < GRPC_NEXT_STEP, elapsed


def test_grpc_reconnects_no_slower_than_the_policy() -> None:
    """The channels' own reconnect backoff starts at the policy's first step (at least gRPC's
    100 ms floor) and stops growing at its last; options given by the user win."""
    policy = yta.RetryPolicy(fast=yta.BackoffSchedule(base=0.05, cap=2.0))
    driver = yta.Driver("grpc://localhost:2136", "/local", retry=policy)
    options = dict(driver.transport.channel_options)
    assert options["grpc.initial_reconnect_backoff_ms"] == 100
    assert options["grpc.max_reconnect_backoff_ms"] == 2000
    driver = yta.Driver(
        "grpc://localhost:2136", "/local", channel_options=[("grpc.max_reconnect_backoff_ms", 5000)]
    )
    assert dict(driver.transport.channel_options)["grpc.max_reconnect_backoff_ms"] == 5000


@contextlib.asynccontextmanager
async def _refused() -> AsyncIterator[str]:
    async with LocalTopicServer() as server, proxy_to(server) as proxy:
        await proxy.refuse()
        yield proxy.endpoint


@pytest.mark.parametrize(
    ("endpoint", "error", "message"),
    [
        (silent_endpoint, yta.OperationTimeoutError, r"within 2s \(the retry policy's max_elapsed"),
        (_refused, yta.ConnectionLostError, "Connection refused"),
    ],
    ids=["silent", "refused"],
)
async def test_the_retry_budget_bounds_a_unary_call_without_a_timeout(
    endpoint: Callable[[], AbstractAsyncContextManager[str]], error: type[Exception], message: str
) -> None:
    """A server that accepts connections and never answers, or one that refuses them: a call
    with no timeout of its own ends with the policy's budget, not later (with
    ``OperationTimeoutError`` when an attempt was still waiting, or else the last failure)."""
    budget = 2.0
    async with endpoint() as address, yta.Driver(
        address, "/local", discovery=False, retry=yta.RetryPolicy(max_elapsed=budget)
    ) as driver:
        started = time.monotonic()
        with pytest.raises(error, match=message):
            await driver.topic.describe_topic("events")
        elapsed = time.monotonic() - started
    assert elapsed < budget + 3.0  # the budget ends it, not an attempt begun before it ran out
    if error is yta.OperationTimeoutError:
        assert elapsed > budget - 0.1


async def test_a_single_try_policy_is_bounded_by_the_default_budget() -> None:
    """A policy that tries once and has no time budget of its own still cannot hang a call:
    the driver's policy (here 1.5 s) bounds it."""
    async with silent_endpoint() as address, yta.Driver(
        address, "/local", discovery=False, retry=yta.RetryPolicy(max_elapsed=1.5)
    ) as driver:
        started = time.monotonic()
        with pytest.raises(yta.OperationTimeoutError, match=r"within 1\.5s"):
            await driver.transport.unary(
                "/Ydb.Topic.V1.TopicService/DescribeTopic",
                pb.DescribeTopicRequest(path="/local/events"),
                pb.DescribeTopicResponse,
                lambda response: response,
                retry=yta.RetryPolicy.no_retries(),
            )
        assert time.monotonic() - started < 1.5 + 0.5
