"""Write a few messages exactly once, then read and commit them as a consumer.

    python examples/quickstart.py                                  # on an embedded local topic server
    python examples/quickstart.py --endpoint grpc://host:2136 --database /db
"""

from __future__ import annotations

import argparse
import asyncio

from ydb_topic_async import Codec, Driver, Written
from ydb_topic_async.testing import LocalTopicServer


async def run(endpoint: str, database: str) -> None:
    async with Driver(endpoint, database) as driver:
        await driver.wait_ready(timeout=10)
        await driver.topic.create_topic("quickstart", consumers=["printer"], exists_ok=True)

        # The producer id makes the server drop any resend of a seq_no it already stored.
        async with driver.topic.writer("quickstart", producer_id="quickstart", codec=Codec.ZSTD) as writer:
            await writer.write([b"hello", b"world"])  # buffered; acknowledged by the time the block ends
            result = await writer.write_with_ack(b"confirmed")
            if isinstance(result, Written):
                print(f"stored at partition {result.partition_id}, offset {result.offset}")

        async with driver.topic.reader("quickstart", consumer="printer") as reader:
            received = 0
            while received < 3:
                batch = await reader.receive_batch(timeout=10)
                for message in batch:
                    print(f"read offset {message.offset}: {message.data.decode()}")
                received += len(batch)
                # Commit after processing: a crash before this line means re-delivery, not loss.
                await reader.commit_with_ack(batch)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", help="a YDB endpoint (default: start a local topic server)")
    parser.add_argument("--database", default="/local")
    args = parser.parse_args()
    if args.endpoint:
        await run(args.endpoint, args.database)
        return
    async with LocalTopicServer() as server:
        await run(server.endpoint, server.database)


if __name__ == "__main__":
    asyncio.run(main())
