"""Exactly-once consume-transform-produce: read topic A, transform, write topic B, one transaction per batch.

Each batch is read with ``receive_batch_with_tx`` and its results are written with a
transactional writer, so the consumer's offsets in A and the messages in B are committed
together. When anything fails (here: the read stream, the write stream and the query session are
broken on purpose while batches are in flight), the transaction is rolled back, the reader reads
the batch again and ``retry_tx`` repeats it: B ends up with every result exactly once.

    python examples/exactly_once_transform.py
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ydb_topic_async import Driver, Transaction, TxWriter
from ydb_topic_async.testing import LocalTopicServer

OnBatch = Callable[[int, Transaction, TxWriter], Awaitable[None]]


def transform(data: bytes) -> bytes:
    return data.decode().upper().encode()


async def transform_topic(
    driver: Driver,
    source: str,
    target: str,
    consumer: str,
    total: int,
    *,
    batch_size: int = 10,
    on_batch: OnBatch | None = None,
) -> int:
    """Move ``total`` messages from ``source`` to ``target``; return how many transactions it took.

    ``on_batch(number, tx, writer)`` runs inside each attempt after the results were written
    (the example breaks things there).
    """
    attempts = 0
    async with driver.topic.reader(source, consumer=consumer) as reader:

        async def one_batch(tx: Transaction) -> int:
            nonlocal attempts
            attempts += 1
            batch = await reader.receive_batch_with_tx(tx, max_messages=batch_size, timeout=30)
            writer = driver.topic.tx_writer(tx, target)
            await writer.write([transform(message.data) for message in batch])
            if on_batch is not None:
                await on_batch(attempts, tx, writer)
            return len(batch)

        moved = 0
        while moved < total:
            moved += await driver.query.retry_tx(one_batch)
    return attempts


async def main() -> None:
    async with LocalTopicServer() as server, Driver(server.endpoint, server.database) as driver:
        await driver.topic.create_topic("orders", consumers=["transformer"])
        await driver.topic.create_topic("orders-upper")
        async with driver.topic.writer("orders", producer_id="shop") as writer:
            await writer.write([f"order {i}".encode() for i in range(100)])

        async def break_things(attempt: int, tx: Transaction, writer: TxWriter) -> None:
            if attempt == 3:
                await writer.flush()
                server.faults.drop_read_streams()  # the reader loses the partition mid-batch
            elif attempt == 6:
                await writer.flush()
                assert tx.session_id is not None
                server.faults.kill_query_session(tx.session_id)  # the transaction dies with it

        attempts = await transform_topic(
            driver, "orders", "orders-upper", "transformer", 100, on_batch=break_things
        )
        results = [m.data for m in server.storage.read("orders-upper", 0)]
        committed = server.storage.committed_offsets("orders", "transformer")
        print(f"some transactions failed and were retried: {attempts > 10}")
        print(f"results: {len(results)}, distinct: {len(set(results))}, committed offset: {committed[0]}")
        print(f"in order: {results == [transform(f'order {i}'.encode()) for i in range(100)]}")


if __name__ == "__main__":
    asyncio.run(main())
