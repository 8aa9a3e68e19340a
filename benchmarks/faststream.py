"""The FastStream broker's cost over the SDK it is built on: a subscriber and a publisher against
the bare reader and writer loops, in the same run, on the local server in a process of its own.

    python benchmarks/faststream.py --messages 20000 --acked 2000
    python benchmarks/faststream.py --json results/faststream.json

Consuming: a topic of one partition is filled with ``--messages`` JSON messages of about 100
bytes; a bare ``TopicReader`` loop (``async for``, commit each message) and a ``YdbBroker``
subscriber (a handler taking the decoded dict, committed after it; no access log) each read it
all under a consumer of their own, the time running from opening the reader (starting the broker)
to the last message handled and every commit acknowledged. Publishing: ``--messages`` messages
buffered (``writer.write`` against ``broker.publish(no_confirm=True)``, then a flush), and
``--acked`` messages each awaited before the next (``writer.write_with_ack`` against
``broker.publish``). Client CPU is this process's; the server's is reported apart. Rounds
alternate the order; the best of ``--rounds`` by client CPU is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

_HERE = str(Path(__file__).resolve().parent)
sys.path.insert(0, _HERE)

from _harness import Figure, ServerProcess, best, describe_machine, machine, measure, write_json  # noqa: E402

# This script's own name would shadow the FastStream package: its directory leaves the path.
sys.path[:] = [entry for entry in sys.path if entry not in (_HERE, "")]

import ydb_topic_async as yta  # noqa: E402
from ydb_topic_async.faststream import YdbBroker  # noqa: E402

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


async def broker_consume(endpoint: str, database: str, consumer: str, messages: int) -> None:
    broker = YdbBroker(endpoint, database=database, logger=None, driver_options={"discovery": False})
    done = asyncio.Event()
    handled = 0

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


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {describe_machine(machine())}\n")
    runs: list[tuple[str, str, int, Callable[[ServerProcess, int], Awaitable[None]]]] = [
        ("consume", "TopicReader loop", args.messages,
         lambda s, r: bare_consume(s.endpoint, s.database, f"bare{r}", args.messages)),
        ("consume", "YdbBroker subscriber", args.messages,
         lambda s, r: broker_consume(s.endpoint, s.database, f"broker{r}", args.messages)),
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
    consumers = [f"{who}{r}" for r in range(args.rounds) for who in ("bare", "broker")]
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
    write_json(args.json, "faststream", args, chosen)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--acked", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    asyncio.run(main(parser.parse_args()))
