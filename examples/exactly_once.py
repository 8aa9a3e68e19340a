"""Exactly-once publishing through a broken connection, and a resend that the server drops.

The local server's fault hooks break the write stream in the middle of a batch. The writer
reconnects and resends what was not acknowledged with the same seq_nos; the server stores each
message once. A second writer with the same producer id then repeats explicit seq_nos: they come
back as ``Skipped``.

    python examples/exactly_once.py
"""

from __future__ import annotations

import asyncio

from ydb_topic_async import Driver, Message, Skipped
from ydb_topic_async.testing import LocalTopicServer


async def main() -> None:
    async with LocalTopicServer() as server, Driver(server.endpoint, server.database) as driver:
        await driver.topic.create_topic("payments")

        server.faults.drop_write_stream_after(50)  # break the stream once 50 messages are stored
        async with driver.topic.writer("payments", producer_id="billing") as writer:
            await writer.write([f"payment {i}".encode() for i in range(100)])
        stored = server.storage.read("payments", 0)
        print(f"dropped streams: {server.faults.dropped_streams}, stored: {len(stored)}, "
              f"distinct seq_nos: {len({m.seq_no for m in stored})}")

        # A restarted process that replays its last messages with the same seq_nos.
        async with driver.topic.writer("payments", producer_id="billing", auto_seqno=False) as replay:
            results = await replay.write_with_ack([Message(f"payment {i}", seq_no=i + 1) for i in range(95, 100)])
        skipped = sum(isinstance(r, Skipped) for r in results)
        print(f"replayed 5, skipped as duplicates: {skipped}, stored: {len(server.storage.read('payments', 0))}")


if __name__ == "__main__":
    asyncio.run(main())
