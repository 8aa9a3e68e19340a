"""Supervised consumer throughput with a slow handler: lanes handled concurrently against one at a time.

    python benchmarks/consumer.py --partitions 8 --messages 4000 --handler-ms 5
    python benchmarks/consumer.py --partitions 8 --messages 4000 --json results/consumer.json

A topic of ``--partitions`` partitions is filled with ``--messages`` messages spread evenly.
Each round runs ``integrations.Consumer`` under a consumer of its own, with a handler that
sleeps ``--handler-ms`` (I/O it waits for, as a database call or an HTTP request would), once
with ``concurrency=1`` (one handler call at a time for the whole consumer: the default, and what
the consumer did before it had lanes) and once with ``concurrency`` equal to the partition count
(one call per partition at a time); the modes alternate in order between rounds. The time is
from starting the consumer's runtime to every message handled and its commit acknowledged
(the runtime's start-up included). The best round of each mode is reported, with the ratio to
the sequential one of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Figure, ServerProcess, best, describe_machine, machine, measure, write_json

TOPIC = "consumer-bench"


async def fill(endpoint: str, database: str, partitions: int, messages: int, consumers: list[str]) -> None:
    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.create_topic(TOPIC, min_active_partitions=partitions, consumers=consumers)
        for partition in range(partitions):
            count = messages // partitions + (1 if partition < messages % partitions else 0)
            async with driver.topic.writer(TOPIC, producer_id=f"fill-{partition}", partition_id=partition) as writer:
                await writer.write([f"{partition}:{i}".encode().ljust(100) for i in range(count)])


async def consume(endpoint: str, database: str, consumer: str, messages: int, concurrency: int, delay: float) -> None:
    from ydb_topic_async.integrations import Consumer, TopicRuntime

    done = asyncio.Event()
    handled = 0

    async def handle(message: object) -> None:
        nonlocal handled
        await asyncio.sleep(delay)
        handled += 1
        if handled >= messages:
            done.set()

    supervised = Consumer(TOPIC, consumer, handle, concurrency=concurrency)
    async with TopicRuntime(endpoint, database, consumers=[supervised], driver_options={"discovery": False}):
        await asyncio.wait_for(done.wait(), timeout=600)
    # Leaving the runtime waited for the last commits' acknowledgements.


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {describe_machine(machine())}\n")
    modes = [("sequential", 1), ("lanes", args.partitions)]
    names = [f"c{round_}-{mode}" for round_, (mode, _) in itertools.product(range(args.rounds), modes)]
    figures: dict[str, list[Figure]] = {mode: [] for mode, _ in modes}
    with ServerProcess() as server:
        await fill(server.endpoint, server.database, args.partitions, args.messages, names)
        for round_ in range(args.rounds):
            order = modes if round_ % 2 == 0 else modes[::-1]
            for mode, concurrency in order:
                figure = await measure(
                    server,
                    lambda c=concurrency, name=f"c{round_}-{mode}": consume(  # type: ignore[misc]
                        server.endpoint, server.database, name, args.messages, c, args.handler_ms / 1000
                    ),
                    benchmark="consumer",
                    client="ours",
                    label=f"Consumer(concurrency={concurrency})",
                    messages=args.messages,
                    size=100,
                    mode=mode,
                )
                figures[mode].append(figure)
    chosen = [best(figures[mode], key=lambda f: f.seconds) for mode, _ in modes]
    sequential = chosen[0]
    print(
        f"{args.messages} messages over {args.partitions} partitions, handler sleeps {args.handler_ms} ms, "
        f"best of {args.rounds}"
    )
    print("| consumer | messages/s | seconds | x sequential |")
    print("|---|---:|---:|---:|")
    for figure in chosen:
        print(
            f"| {figure.label} | {figure.rate:,.0f} | {figure.seconds:.2f} | "
            f"{figure.rate / sequential.rate:.2f} |"
        )
    print(f"\nthe sequential bound: {1000 / args.handler_ms:,.0f} messages/s (one {args.handler_ms} ms call at a time)")
    write_json(args.json, "consumer", args, chosen)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--handler-ms", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    asyncio.run(main(parser.parse_args()))
