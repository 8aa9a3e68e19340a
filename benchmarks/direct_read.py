"""Direct read against the ordinary path on a local cluster: bytes crossing nodes and client CPU.

    python benchmarks/direct_read.py --messages 60000 --sizes 100
    python benchmarks/direct_read.py --messages 100000 --sizes 100 4096 --rounds 5 --json results/direct_read.json

A ``LocalTopicCluster`` of three nodes runs in its own process (so ``time.process_time`` here is
the client's CPU alone); a topic of six partitions, two on each node, is filled once per size.
Each reader (one ``Driver`` with discovery, which names every node) reads all of it under a
consumer of its own: one ``receive_batch`` and one ``commit`` per batch, touching every message's
``.data`` and ``.offset``, then closes (commits acknowledged).

- ``ordinary``: ``driver.topic.reader(topic, consumer=...)``: one read stream, on one node, which
  sends the data of every partition: in a real cluster that node fetches the data of partitions
  hosted elsewhere from their nodes first.
- ``direct``: the same with ``direct_read=True``: the read stream stays where it is, and each
  node sends the data of the partitions it hosts (StreamDirectRead).

"crossing nodes" is what the cluster counts (``stats.read_bytes_from_other_nodes``): the read
data a node sent of partitions another node hosts, the bytes that would have crossed between
nodes before reaching the client. Every round runs both, in an order that rotates; the round
with the least client CPU is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Figure, ServerProcess, best, describe_machine, fmt_server, machine, measure, write_json
from read import BUFFER
from write import messages_for

NODES = 3
PARTITIONS = 6
MODES = ("ordinary", "direct")


async def fill(endpoint: str, database: str, topic: str, consumers: list[str], n: int, size: int) -> None:
    """``topic`` with ``PARTITIONS`` partitions and ``consumers``, ``n`` messages of ``size`` bytes spread over them."""
    import ydb_topic_async as yta

    payload = b"r" * size
    async with yta.Driver(endpoint, database) as driver:
        await driver.topic.create_topic(topic, min_active_partitions=PARTITIONS, consumers=consumers)

        async def write_partition(partition_id: int) -> None:
            async with driver.topic.writer(topic, producer_id=f"fill-{partition_id}", partition_id=partition_id) as w:
                for _ in range(n // PARTITIONS + (partition_id < n % PARTITIONS)):
                    await w.write(payload)

        await asyncio.gather(*(write_partition(p) for p in range(PARTITIONS)))


async def read_all(endpoint: str, database: str, topic: str, consumer: str, n: int, direct: bool) -> dict[str, Any]:
    import ydb_topic_async as yta

    async with (
        yta.Driver(endpoint, database) as driver,
        driver.topic.reader(topic, consumer=consumer, buffer_size_bytes=BUFFER, direct_read=direct) as reader,
    ):
        got = 0
        while got < n:
            batch = await reader.receive_batch()
            for message in batch:
                message.data, message.offset  # noqa: B018
                got += 1
            reader.commit(batch)
    return {}


async def run_size(server: ServerProcess, args: argparse.Namespace, size: int) -> list[Figure]:
    n = messages_for(size, args)
    topic = f"bench-direct-{size}"
    consumers = [f"c-{mode}-{r}" for mode in MODES for r in range(args.rounds)]
    await fill(server.endpoint, server.database, topic, consumers, n, size)
    rounds: dict[str, list[Figure]] = {mode: [] for mode in MODES}
    for round_no in range(args.rounds):
        order = MODES[round_no % 2 :] + MODES[: round_no % 2]
        for mode in order:
            consumer = f"c-{mode}-{round_no}"
            figure = await measure(
                server,
                lambda c=consumer, m=mode: read_all(server.endpoint, server.database, topic, c, n, m == "direct"),
                benchmark="direct_read", client="ours", label=mode, messages=n, size=size, mode=mode,
            )
            served = figure.extra["server"]
            if served["messages_sent"] != n:
                raise AssertionError(f"{mode}: the cluster sent {served['messages_sent']} messages, not {n}")
            rounds[mode].append(figure)
    return [best(rounds[mode]) for mode in MODES]


def report(figures: list[Figure]) -> None:
    print("| path | messages/s | client CPU µs/msg | read bytes sent | crossing nodes | share | server CPU/wall |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for f in figures:
        served = f.extra["server"]
        sent, crossing = served["read_bytes_sent"], served["read_bytes_from_other_nodes"]
        print(
            f"| {f.label} | {f.rate:,.0f} | {f.client_us_per_message:.2f} | {sent:,} | {crossing:,} | "
            f"{crossing / sent * 100 if sent else 0:.0f}% | {fmt_server(f)} |"
        )
    by = {f.mode: f for f in figures}
    ratio = by["direct"].client_us_per_message / by["ordinary"].client_us_per_message
    print(f"direct/ordinary: {ratio:.2f}x client CPU per message")


async def main_async(args: argparse.Namespace) -> None:
    print(f"machine: {describe_machine(machine())}")
    figures: list[Figure] = []
    with ServerProcess(nodes=NODES) as server:
        for size in args.sizes:
            print(f"\n{messages_for(size, args)} messages x {size} B over {PARTITIONS} partitions on "
                  f"{NODES} nodes, best of {args.rounds} rounds")
            done = await run_size(server, args, size)
            report(done)
            figures.extend(done)
    write_json(args.json, "direct_read", args, figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=60_000, help="messages per measurement (default 60000)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100], help="payload sizes in bytes (default 100)")
    parser.add_argument("--max-mib", type=int, default=200, help="fewer messages for large sizes: MiB per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the least client CPU is reported (default 3)")
    parser.add_argument("--json", help="write the figures to this JSON file")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
