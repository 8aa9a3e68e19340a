"""A FastStream service on YDB topics: it bills orders and publishes invoices.

    python examples/faststream_app.py    # against a local topic server it starts itself

    YDB_ENDPOINT=grpc://localhost:2136 YDB_DATABASE=/local \\
        faststream run faststream_app:app --app-dir examples

Orders are read as the consumer ``billing``, four partitions at a time, each in order; an
invoice is published for each, with the order's id as its key, and the order is committed once
the handler has returned (a failing handler has it delivered again).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from faststream import FastStream
from pydantic import BaseModel

from ydb_topic_async.faststream import YdbBroker, YdbMessage, YdbResponse


class Order(BaseModel):
    id: int
    amount: float


class Invoice(BaseModel):
    order_id: int
    total: float


def make_app(endpoint: str, database: str, **options: Any) -> tuple[YdbBroker, FastStream]:
    broker = YdbBroker(endpoint, database=database, auto_create_topics=True, **options)

    @broker.subscriber("orders", consumer="billing", max_workers=4)
    @broker.publisher("invoices", schema=Invoice)
    async def bill(order: Order, msg: YdbMessage) -> YdbResponse:
        invoice = Invoice(order_id=order.id, total=round(order.amount * 1.2, 2))
        return YdbResponse(invoice.model_dump(), key=str(order.id), headers={"source-offset": str(msg.offset)})

    return broker, FastStream(broker)


# What ``faststream run faststream_app:app`` runs.
broker, app = make_app(
    os.environ.get("YDB_ENDPOINT", "grpc://localhost:2136"), os.environ.get("YDB_DATABASE", "/local")
)


async def main() -> None:
    from ydb_topic_async.testing import LocalTopicServer

    async with LocalTopicServer() as server:
        local_broker, _ = make_app(server.endpoint, server.database, logger=None)  # no access log here
        done = asyncio.Event()

        @local_broker.subscriber("invoices", consumer="printer")
        async def show(invoice: Invoice, msg: YdbMessage) -> None:
            print(f"invoice for order {invoice.order_id}: {invoice.total} (key {msg.key!r})")
            if invoice.order_id == 3:
                done.set()

        async with local_broker:
            await local_broker.start()
            for order_id, amount in ((1, 10.0), (2, 25.5), (3, 99.99)):
                await local_broker.publish(Order(id=order_id, amount=amount), "orders")
            await asyncio.wait_for(done.wait(), 30)


if __name__ == "__main__":
    asyncio.run(main())
