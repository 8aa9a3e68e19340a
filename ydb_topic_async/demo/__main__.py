"""The demo: a clickstream through a topic, end to end.

``python -m ydb_topic_async.demo`` starts the local topic server on loopback (or uses
``--endpoint`` / ``YDB_ENDPOINT`` for a real database), creates a topic with four partitions,
publishes clickstream events with an exactly-once writer per producer, consumes them with a
committing reader, and prints revenue per country and the consumer's lag.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator

from .. import Driver, YdbTopicError
from ..testing import LocalTopicServer

TOPIC = "demo/clicks"
CONSUMER = "revenue-report"
COUNTRIES = ("DE", "FR", "IN", "JP", "NL", "US")
PAGES = ("/", "/search", "/product", "/cart", "/checkout")


def make_event(rng: random.Random, n: int) -> dict[str, object]:
    page = rng.choice(PAGES)
    return {
        "event_id": n,
        "user_id": f"u{rng.randrange(500):04d}",
        "country": rng.choice(COUNTRIES),
        "page": page,
        "amount": round(rng.uniform(5, 250), 2) if page == "/checkout" else 0.0,
        "ts": time.time(),
    }


def progress(label: str, done: int, total: int) -> None:
    width = 30
    filled = width * done // max(total, 1)
    sys.stdout.write(f"\r{label:<10} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stdout.write("\n")
    sys.stdout.flush()


@contextlib.asynccontextmanager
async def database(endpoint: str | None) -> AsyncIterator[tuple[str, str]]:
    """A database to talk to: the given endpoint, or a local server for the duration."""
    if endpoint:
        yield endpoint, os.environ.get("YDB_DATABASE", "/local")
        return
    async with LocalTopicServer() as server:
        print(f"local topic server listening on {server.endpoint} (database {server.database})")
        yield server.endpoint, server.database


async def produce(driver: Driver, events: int, producers: int) -> None:
    rng = random.Random(42)
    written = 0
    writers = [driver.topic.writer(TOPIC, producer_id=f"web-{i}", codec=4) for i in range(producers)]
    try:
        for writer in writers:
            await writer.open()
        for n in range(events):
            writer = writers[n % producers]
            await writer.write(json.dumps(make_event(rng, n)).encode())
            written += 1
            if written % 500 == 0 or written == events:
                progress("produce", written, events)
        for writer in writers:
            await writer.flush()
    finally:
        for writer in writers:
            await writer.close()


async def consume(driver: Driver, events: int) -> tuple[dict[str, float], Counter[str]]:
    revenue: dict[str, float] = defaultdict(float)
    pages: Counter[str] = Counter()
    seen = 0
    async with driver.topic.reader(TOPIC, consumer=CONSUMER) as reader:
        while seen < events:
            batch = await reader.receive_batch(timeout=30)
            for message in batch:
                event = json.loads(message.data)
                revenue[str(event["country"])] += float(event["amount"])
                pages[str(event["page"])] += 1
            seen += len(batch)
            reader.commit(batch)
            progress("consume", seen, events)
    return revenue, pages


async def run(endpoint: str | None, events: int, producers: int) -> None:
    async with database(endpoint) as (url, db), Driver(url, db) as driver:
        await driver.wait_ready(timeout=10)
        with contextlib.suppress(YdbTopicError):
            await driver.topic.drop_topic(TOPIC)
        await driver.topic.create_topic(TOPIC, min_active_partitions=4, consumers=[CONSUMER])
        started = time.perf_counter()
        await produce(driver, events, producers)
        revenue, pages = await consume(driver, events)
        elapsed = time.perf_counter() - started

        print(f"\n{'country':<8}{'revenue':>12}")
        for country in sorted(revenue, key=revenue.__getitem__, reverse=True):
            print(f"{country:<8}{revenue[country]:>12.2f}")
        print(f"\n{'page':<10}{'views':>8}")
        for page, count in pages.most_common():
            print(f"{page:<10}{count:>8}")
        lag = (await driver.topic.describe_consumer(TOPIC, CONSUMER)).total_lag
        print(f"\n{events} events through {TOPIC} in {elapsed:.2f}s; consumer {CONSUMER!r} lag: {lag}")
        if sum(pages.values()) != events or lag != 0:
            raise SystemExit("demo failed: not every event was consumed and committed")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ydb_topic_async.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default=os.environ.get("YDB_ENDPOINT"), help="a YDB endpoint (default: local)")
    parser.add_argument("--events", type=int, default=20_000, help="how many events to publish")
    parser.add_argument("--producers", type=int, default=4, help="how many producer ids write in parallel")
    args = parser.parse_args(argv)
    asyncio.run(run(args.endpoint, args.events, args.producers))


if __name__ == "__main__":
    main()
