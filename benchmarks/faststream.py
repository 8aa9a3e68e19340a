"""The FastStream broker's cost over the SDK it is built on: a subscriber and a publisher against
the bare reader and writer loops, in the same run, on the local server in a process of its own.

    python benchmarks/faststream.py --messages 20000 --acked 2000
    python benchmarks/faststream.py --json results/faststream.json

Consuming: a topic of one partition is filled with ``--messages`` JSON messages of about 100
bytes; a bare ``TopicReader`` loop (``async for``, commit each message) and a ``YdbBroker``
subscriber (a handler taking the decoded dict, committed after it; no access log) each read it
all under a consumer of their own, the time running from opening the reader (starting the broker)
to the last message handled and every commit acknowledged. In batches: ``receive_batch`` of up to
``--batch`` messages (each decoded, the batch committed) against a batch subscriber
(``batch=True, max_messages=--batch``, a handler taking the list of dicts). Publishing: ``--messages`` messages
buffered (``writer.write`` against ``broker.publish(no_confirm=True)``, then a flush), and
``--acked`` messages each awaited before the next (``writer.write_with_ack`` against
``broker.publish``). Client CPU is this process's; the server's is reported apart. Rounds
alternate the order; the best of ``--rounds`` by client CPU is reported.

``--pipeline`` measures FastStream's subscriber pipeline alone, in memory, without a server: the
same handler called through each broker's test client for ``--messages`` ready-made messages
(``subscriber.consume``; the test clients' call recording and mock logger taken out), for
``YdbBroker`` and, when ``aiokafka`` is installed (``pip install aiokafka``), for FastStream's own
``KafkaBroker``: FastStream's own cost per message, which no broker built on it goes below.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

_HERE = str(Path(__file__).resolve().parent)
sys.path.insert(0, _HERE)

from _harness import Figure, ServerProcess, best, describe_machine, machine, measure, write_json  # noqa: E402

# This script's own name would shadow the FastStream package: its directory leaves the path.
sys.path[:] = [entry for entry in sys.path if entry not in (_HERE, "")]

from faststream import AckPolicy  # noqa: E402

import ydb_topic_async as yta  # noqa: E402
from ydb_topic_async.faststream import InMemoryMessage, TestYdbBroker, YdbBroker  # noqa: E402

TOPIC = "faststream-bench"


def payload(n: int) -> bytes:
    return json.dumps({"n": n, "text": "x" * 80}).encode()


async def fill(endpoint: str, database: str, messages: int, consumers: list[str]) -> None:
    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.create_topic(TOPIC, consumers=consumers)
        await driver.topic.create_topic(f"{TOPIC}-out")
        async with driver.topic.writer(TOPIC, producer_id="fill") as writer:
            await writer.write([payload(n) for n in range(messages)])


async def bare_consume(endpoint: str, database: str, consumer: str, messages: int) -> None:
    async with (
        yta.Driver(endpoint, database, discovery=False) as driver,
        driver.topic.reader(TOPIC, consumer=consumer) as reader,
    ):
        handled = 0
        async for message in reader:
            json.loads(message.data)  # what the broker's decoder does
            reader.commit(message)
            handled += 1
            if handled == messages:
                break
    # Leaving the reader waited for its commits' acknowledgements.


async def bare_consume_batches(endpoint: str, database: str, consumer: str, messages: int, size: int) -> None:
    async with (
        yta.Driver(endpoint, database, discovery=False) as driver,
        driver.topic.reader(TOPIC, consumer=consumer) as reader,
    ):
        handled = 0
        while handled < messages:
            batch = await reader.receive_batch(min(size, messages - handled))
            for message in batch:
                json.loads(message.data)
            reader.commit(batch)
            handled += len(batch)


async def broker_consume(endpoint: str, database: str, consumer: str, messages: int, batch: int = 0) -> None:
    broker = YdbBroker(endpoint, database=database, logger=None, driver_options={"discovery": False})
    done = asyncio.Event()
    handled = 0

    if batch:

        @broker.subscriber(TOPIC, consumer=consumer, batch=True, max_messages=batch)
        async def handle_batch(bodies: list[dict[str, Any]]) -> None:
            nonlocal handled
            handled += len(bodies)
            if handled >= messages:
                done.set()

    else:

        @broker.subscriber(TOPIC, consumer=consumer)
        async def handle(body: dict[str, Any]) -> None:
            nonlocal handled
            handled += 1
            if handled == messages:
                done.set()

    async with broker:
        await broker.start()
        await asyncio.wait_for(done.wait(), 600)
    # Stopping the broker waited for the commits' acknowledgements.


async def bare_publish(endpoint: str, database: str, messages: int, acked: bool) -> None:
    async with (
        yta.Driver(endpoint, database, discovery=False) as driver,
        driver.topic.writer(f"{TOPIC}-out", producer_id="bare") as writer,
    ):
        for n in range(messages):
            if acked:
                await writer.write_with_ack(payload(n))
            else:
                await writer.write(payload(n))
        await writer.flush()


async def broker_publish(endpoint: str, database: str, messages: int, acked: bool) -> None:
    broker = YdbBroker(endpoint, database=database, logger=None, driver_options={"discovery": False})
    async with broker:
        for n in range(messages):
            # The body as a dict: the broker encodes it (JSON), as a service would publish.
            await broker.publish({"n": n, "text": "x" * 80}, f"{TOPIC}-out", producer_id="broker", no_confirm=not acked)
    # Stopping the broker flushed its writers.


@contextlib.asynccontextmanager
async def in_memory(broker: Any, test_client: Any) -> AsyncIterator[Any]:
    """``broker``'s subscriber under FastStream's test client, with the broker's own logger (the
    client logs to a mock) and its handlers not recording calls: its pipeline, and nothing else."""
    broker._setup_logger()
    logger = broker.config.logger.logger
    async with test_client(broker, connect_only=False):
        broker.config.logger.logger = logger
        subscriber = broker.subscribers[0]
        for call in subscriber.calls:
            call.handler.reset_test()
        yield subscriber


async def pipeline(kind: str, messages: int, ack_policy: AckPolicy | None) -> Figure:
    """CPU per message of ``messages`` handled by one subscriber in memory (``kind``: ydb or kafka)."""
    body = payload(1)
    handled = 0
    options: dict[str, Any] = {} if ack_policy is None else {"ack_policy": ack_policy}
    test_client: Any
    if kind == "kafka":
        from aiokafka import ConsumerRecord
        from faststream.kafka import KafkaBroker, TestKafkaBroker

        broker: Any = KafkaBroker(logger=None)
        subscribe, test_client = broker.subscriber(TOPIC, group_id="bench", **options), TestKafkaBroker
        raws: list[Any] = [
            ConsumerRecord(topic=TOPIC, partition=0, offset=n, timestamp=0, timestamp_type=0, key=None, value=body,
                           checksum=None, serialized_key_size=0, serialized_value_size=len(body), headers=())
            for n in range(messages)
        ]
        label = f"KafkaBroker subscriber ({ack_policy.name if ack_policy else 'auto-commit'})"
    else:
        broker = YdbBroker("grpc://localhost:2136", logger=None)
        subscribe, test_client = broker.subscriber(TOPIC, consumer="bench", **options), TestYdbBroker
        raws = [InMemoryMessage(data=body, topic_path=TOPIC, offset=n) for n in range(messages)]
        label = f"YdbBroker subscriber ({(ack_policy or AckPolicy.NACK_ON_ERROR).name})"

    @subscribe
    async def handle(body: dict[str, Any]) -> None:
        nonlocal handled
        handled += 1

    async with in_memory(broker, test_client) as subscriber:
        wall, cpu = time.perf_counter(), time.process_time()
        for raw in raws:
            await subscriber.consume(raw)
        seconds, client_cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert handled == messages, handled
    return Figure(benchmark="faststream", client="floor" if kind == "kafka" else "ours", label=label,
                  messages=messages, size=len(body), seconds=seconds, client_cpu_seconds=client_cpu,
                  mode="pipeline in memory")


async def pipelines(args: argparse.Namespace) -> list[Figure]:
    try:
        import aiokafka  # noqa: F401
    except ImportError:
        print("(aiokafka is not installed: FastStream's KafkaBroker is left out)\n")
        kinds = [("ydb", None)]
    else:
        kinds = [("kafka", None), ("kafka", AckPolicy.ACK), ("ydb", None)]
    rounds: list[list[Figure]] = [[] for _ in kinds]
    for round_ in range(args.rounds):
        order = list(enumerate(kinds)) if round_ % 2 == 0 else list(enumerate(kinds))[::-1]
        for index, (kind, policy) in order:
            rounds[index].append(await pipeline(kind, args.messages, policy))
    chosen = [best(figures) for figures in rounds]
    print(f"FastStream's subscriber pipeline in memory, best of {args.rounds} rounds by client CPU")
    print("| broker | messages | client µs/message |")
    print("|---|---:|---:|")
    for figure in chosen:
        print(f"| `{figure.label}` | {figure.messages:,} | {figure.client_us_per_message:.1f} |")
    print()
    return chosen


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {describe_machine(machine())}\n")
    in_memory_figures = await pipelines(args) if args.pipeline else []
    runs: list[tuple[str, str, int, Callable[[ServerProcess, int], Awaitable[None]]]] = [
        ("consume", "TopicReader loop", args.messages,
         lambda s, r: bare_consume(s.endpoint, s.database, f"bare{r}", args.messages)),
        ("consume", "YdbBroker subscriber", args.messages,
         lambda s, r: broker_consume(s.endpoint, s.database, f"broker{r}", args.messages)),
        ("consume batches", "TopicReader.receive_batch loop", args.messages,
         lambda s, r: bare_consume_batches(s.endpoint, s.database, f"bare-batches{r}", args.messages, args.batch)),
        ("consume batches", "YdbBroker batch subscriber", args.messages,
         lambda s, r: broker_consume(s.endpoint, s.database, f"broker-batches{r}", args.messages, args.batch)),
        ("publish buffered", "TopicWriter.write", args.messages,
         lambda s, r: bare_publish(s.endpoint, s.database, args.messages, False)),
        ("publish buffered", "YdbBroker.publish(no_confirm=True)", args.messages,
         lambda s, r: broker_publish(s.endpoint, s.database, args.messages, False)),
        ("publish acked", "TopicWriter.write_with_ack", args.acked,
         lambda s, r: bare_publish(s.endpoint, s.database, args.acked, True)),
        ("publish acked", "YdbBroker.publish", args.acked,
         lambda s, r: broker_publish(s.endpoint, s.database, args.acked, True)),
    ]
    figures: dict[str, list[Figure]] = {label: [] for _, label, _, _ in runs}
    readers = ("bare", "broker", "bare-batches", "broker-batches")
    consumers = [f"{who}{r}" for r in range(args.rounds) for who in readers]
    with ServerProcess() as server:
        await fill(server.endpoint, server.database, args.messages, consumers)
        for round_ in range(args.rounds):
            for mode, label, count, run in runs if round_ % 2 == 0 else runs[::-1]:
                figure = await measure(
                    server, lambda run=run, round_=round_: run(server, round_),  # type: ignore[misc]
                    benchmark="faststream", client="ours", label=label, messages=count, size=100, mode=mode,
                )
                figures[label].append(figure)
    chosen = [best(figures[label]) for _, label, _, _ in runs]
    print(f"best of {args.rounds} rounds by client CPU")
    print("| what | how | messages | messages/s | client µs/message | x bare CPU | server µs/message |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for index, figure in enumerate(chosen):
        bare = chosen[index - index % 2]
        server_us = figure.server_us_per_message
        print(
            f"| {figure.mode} | `{figure.label}` | {figure.messages:,} | {figure.rate:,.0f} | "
            f"{figure.client_us_per_message:.1f} | {figure.client_us_per_message / bare.client_us_per_message:.2f} | "
            f"{'' if server_us is None else f'{server_us:.1f}'} |"
        )
    write_json(args.json, "faststream", args, in_memory_figures + chosen)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--acked", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pipeline", action="store_true", help="also FastStream's pipeline alone, in memory")
    parser.add_argument("--json")
    asyncio.run(main(parser.parse_args()))
