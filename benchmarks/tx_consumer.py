"""Exactly-once against at-least-once consume-transform-produce: ``TransactionalConsumer`` beside
``Consumer`` on the same topic, in one run.

    python benchmarks/tx_consumer.py --partitions 4 --messages 20000 --batch 100
    python benchmarks/tx_consumer.py --json results/tx_consumer.json

A topic of ``--partitions`` partitions is filled with ``--messages`` messages of 100 bytes. Each
round runs both consumers, each under a consumer name of its own, one after the other (the order
alternates between rounds), doing the same work: every batch (up to ``--batch`` messages) is
transformed and written to an output topic.

- ``Consumer`` (at-least-once): ``batch_handler`` writes the batch through one long-lived
  writer (``write``, acknowledged in the background) and the batch's offsets are committed after
  it; the time ends once the last commit is acknowledged and the writer flushed.
- ``TransactionalConsumer`` (exactly-once): ``handle(batch, tx)`` writes through
  ``tx_writer(tx, ...)``, and the transaction commits the writes with the offsets (begin,
  write stream, ``UpdateOffsetsInTransaction``, commit: per batch).

Both run ``concurrency`` equal to the partition count, so the partitions go at once. The figure
is messages per second from starting the runtime to every message handled and committed, and
the client's and the local server's CPU per message; best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Figure, ServerProcess, best, describe_machine, machine, measure, write_json

TOPIC = "tx-consumer-bench"
OUTPUT = "tx-consumer-bench-out"
SIZE = 100


async def fill(endpoint: str, database: str, partitions: int, messages: int, consumers: list[str]) -> None:
    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.create_topic(TOPIC, min_active_partitions=partitions, consumers=consumers)
        await driver.topic.create_topic(OUTPUT, min_active_partitions=partitions)
        for partition in range(partitions):
            count = messages // partitions + (1 if partition < messages % partitions else 0)
            async with driver.topic.writer(TOPIC, producer_id=f"fill-{partition}", partition_id=partition) as writer:
                await writer.write([f"{partition}:{i}".encode().ljust(SIZE) for i in range(count)])


def transform(data: bytes) -> bytes:
    return data.upper()


async def plain(endpoint: str, database: str, consumer: str, messages: int, partitions: int, batch: int) -> Any:
    import ydb_topic_async as yta
    from ydb_topic_async.integrations import Consumer, TopicRuntime, WriterSpec

    done = asyncio.Event()
    handled = 0
    runtime: TopicRuntime

    async def handle(received: yta.MessageBatch) -> None:
        nonlocal handled
        await runtime.writer("out").write([transform(m.data) for m in received])
        handled += len(received)
        if handled >= messages:
            done.set()

    supervised = Consumer(TOPIC, consumer, batch_handler=handle, concurrency=partitions, max_batch_messages=batch)
    runtime = TopicRuntime(
        endpoint,
        database,
        writers={"out": WriterSpec(OUTPUT, producer_id=f"out-{consumer}")},
        consumers=[supervised],
        driver_options={"discovery": False},
    )
    async with runtime:
        await asyncio.wait_for(done.wait(), timeout=900)
    # Leaving the runtime waited for the last commits' acknowledgements and flushed the writer.
    return {"restarts": supervised.restarts}


async def transactional(
    endpoint: str, database: str, consumer: str, messages: int, partitions: int, batch: int
) -> Any:
    import ydb_topic_async as yta
    from ydb_topic_async.integrations import TopicRuntime, TransactionalConsumer

    done = asyncio.Event()
    committed = 0
    runtime: TopicRuntime

    def count(received: yta.MessageBatch, error: BaseException | None) -> None:
        nonlocal committed
        if error is None:
            committed += len(received)
            if committed >= messages:
                done.set()

    async def handle(received: yta.MessageBatch, tx: yta.Transaction) -> None:
        await runtime.driver.topic.tx_writer(tx, OUTPUT).write([transform(m.data) for m in received])
        tx.after_commit(lambda t, error: count(received, error))

    supervised = TransactionalConsumer(TOPIC, consumer, handle, concurrency=partitions, max_batch_messages=batch)
    runtime = TopicRuntime(endpoint, database, consumers=[supervised], driver_options={"discovery": False})
    async with runtime:
        await asyncio.wait_for(done.wait(), timeout=900)  # every batch's transaction committed
    return {
        "restarts": supervised.restarts,
        "transactions": supervised.committed,
        "retries": supervised.retries,
        "messages_per_transaction": messages / supervised.committed if supervised.committed else 0.0,
    }


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {describe_machine(machine())}\n")
    modes = [("at-least-once", plain), ("exactly-once", transactional)]
    names = [f"c{round_}-{mode}" for round_, (mode, _) in itertools.product(range(args.rounds), modes)]
    figures: dict[str, list[Figure]] = {mode: [] for mode, _ in modes}
    labels = {"at-least-once": "Consumer (batch_handler)", "exactly-once": "TransactionalConsumer"}
    with ServerProcess() as server:
        await fill(server.endpoint, server.database, args.partitions, args.messages, names)
        for round_ in range(args.rounds):
            order = modes if round_ % 2 == 0 else modes[::-1]
            for mode, run in order:
                figure = await measure(
                    server,
                    lambda run=run, name=f"c{round_}-{mode}": run(  # type: ignore[misc]
                        server.endpoint, server.database, name, args.messages, args.partitions, args.batch
                    ),
                    benchmark="tx_consumer",
                    client="ours",
                    label=labels[mode],
                    messages=args.messages,
                    size=SIZE,
                    mode=mode,
                )
                figures[mode].append(figure)
    chosen = [best(figures[mode], key=lambda f: f.seconds) for mode, _ in modes]
    reference = chosen[0]
    print(
        f"{args.messages} messages of {SIZE} bytes over {args.partitions} partitions, batches of up to"
        f" {args.batch}, concurrency {args.partitions}, best of {args.rounds}"
    )
    print("| consumer | messages/s | client CPU µs/message | server CPU µs/message | x at-least-once |")
    print("|---|---:|---:|---:|---:|")
    for figure in chosen:
        server_us = figure.server_us_per_message
        print(
            f"| {figure.label} | {figure.rate:,.0f} | {figure.client_us_per_message:.1f} |"
            f" {'-' if server_us is None else f'{server_us:.1f}'} | {figure.rate / reference.rate:.2f} |"
        )
    extra = chosen[1].extra
    print(
        f"\nTransactionalConsumer: {extra.get('transactions')} transactions,"
        f" {extra.get('messages_per_transaction', 0):.1f} messages each, {extra.get('retries')} retries;"
        f" restarts: {[f.extra.get('restarts') for f in chosen]}"
    )
    write_json(args.json, "tx_consumer", args, chosen)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    asyncio.run(main(parser.parse_args()))
