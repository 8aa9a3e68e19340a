"""How FastStream's ack policies map onto YDB's commits, against the local server.

YDB commits contiguous offset ranges per consumer and partition and has no per-message negative
acknowledgement: ``ack`` and ``reject`` commit a message, ``nack`` leaves it uncommitted and has
its partition read again from it (``test_nack.py``), and a message left unacknowledged holds the
consumer's committed offset below it. The committed offsets checked here are the server's own.
"""

from __future__ import annotations

from typing import Any

import pytest
from faststream import AckPolicy
from faststream.exceptions import NackMessage

from ydb_topic_async.faststream import YdbBroker, YdbMessage
from ydb_topic_async.testing import LocalTopicServer

from .._polling import eventually
from ._brokers import Seen, broker_for, running

pytestmark = pytest.mark.timeout(60)

FAST_RESTART: dict[str, Any] = {"initial_backoff": 0.05, "max_backoff": 0.1}


def committed(server: LocalTopicServer, topic: str) -> int:
    return server.storage.committed_offsets(topic, "c")[0]


async def test_by_default_a_failed_message_is_delivered_again_and_committed_once_handled(
    server: LocalTopicServer,
) -> None:
    broker = broker_for(server, auto_create_topics=True)
    seen = Seen()

    @broker.subscriber("t", consumer="c", **FAST_RESTART)
    async def handle(body: str) -> None:
        seen.add(body)
        if body == "bad" and seen.items.count("bad") == 1:
            raise RuntimeError("first attempt fails")

    async with running(broker) as br:
        await br.publish_batch("bad", "good", topic="t")
        await seen.wait_for(3)
        await eventually(lambda: committed(server, "t") == 2, "both committed")
        subscriber: Any = broker.subscribers[0]
        assert subscriber.consumer.restarts == 0  # its partition was read again, nothing restarted
    assert seen.items == ["bad", "bad", "good"]


@pytest.mark.parametrize("policy", [AckPolicy.ACK, AckPolicy.REJECT_ON_ERROR])
async def test_ack_and_reject_on_error_commit_a_failed_message_and_go_on(
    server: LocalTopicServer, policy: AckPolicy
) -> None:
    broker = broker_for(server, auto_create_topics=True)
    seen = Seen()

    @broker.subscriber("t", consumer="c", ack_policy=policy, **FAST_RESTART)
    async def handle(body: str) -> None:
        seen.add(body)
        if body == "bad":
            raise RuntimeError("always fails")

    async with running(broker) as br:
        await br.publish_batch("bad", "good", topic="t")
        await seen.wait_for(2)
        await eventually(lambda: committed(server, "t") == 2, "both committed")
    assert seen.items == ["bad", "good"]


async def test_ack_first_commits_before_the_handler_runs(server: LocalTopicServer) -> None:
    broker = broker_for(server, auto_create_topics=True)
    seen = Seen()

    @broker.subscriber("t", consumer="c", ack_policy=AckPolicy.ACK_FIRST, **FAST_RESTART)
    async def handle(body: str, msg: YdbMessage) -> None:
        await eventually(lambda: committed(server, "t") == msg.offset + 1, "committed before the handler ends")
        seen.add(body)
        raise RuntimeError("too late to matter")

    async with running(broker) as br:
        await br.publish_batch("a", "b", topic="t")
        await seen.wait_for(2)
    assert seen.items == ["a", "b"]


async def test_manual_acks_commit_contiguously_and_what_is_not_acked_comes_again(server: LocalTopicServer) -> None:
    seen = Seen()

    def subscribe(broker: YdbBroker) -> None:
        @broker.subscriber("t", consumer="c", ack_policy=AckPolicy.MANUAL, **FAST_RESTART)
        async def handle(body: str, msg: YdbMessage) -> None:
            seen.add(body)
            if body != "held":
                await msg.ack()

    first = broker_for(server, auto_create_topics=True)
    subscribe(first)
    async with running(first) as br:
        await br.publish_batch("a", "held", "c", topic="t")
        await seen.wait_for(3)
        await eventually(lambda: committed(server, "t") == 1, "a committed")
    assert committed(server, "t") == 1  # "c" was acked, but "held" before it was not

    second = broker_for(server)
    subscribe(second)
    async with running(second):
        await seen.wait_for(5)
    assert seen.items == ["a", "held", "c", "held", "c"]


async def test_nack_has_the_message_and_those_after_it_delivered_again(server: LocalTopicServer) -> None:
    broker = broker_for(server, auto_create_topics=True)
    seen = Seen()

    @broker.subscriber("t", consumer="c", **FAST_RESTART)
    async def handle(body: str) -> None:
        seen.add(body)
        if body == "b" and seen.items.count("b") == 1:
            raise NackMessage()

    async with running(broker) as br:
        await br.publish_batch("a", "b", "c", topic="t")
        await eventually(lambda: committed(server, "t") == 3, "all committed")
    # "a" was committed before the nack: it is not delivered again; "c" waited behind "b".
    assert seen.items == ["a", "b", "b", "c"]
