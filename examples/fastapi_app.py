"""A FastAPI service that publishes events to a topic and consumes them in the background.

    pip install -e ".[fastapi]" uvicorn             # in a clone of the repository
    python examples/fastapi_app.py                  # on an embedded local topic server, port 8000
    YDB_ENDPOINT=grpc://host:2136 YDB_DATABASE=/db python examples/fastapi_app.py

POST /events            publish the body, return at once (202): fire-and-forget
POST /events/confirmed  publish the body, return once the server stored it (201, with its offset)
GET  /stats             what the background consumer has seen, and how often it restarted
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from ydb_topic_async import Skipped, TopicMessage, TopicWriter, Written, YdbTopicError
from ydb_topic_async.integrations.fastapi import (
    Consumer,
    TopicRuntime,
    WriterSpec,
    topic_lifespan,
    writer_dependency,
)

TOPIC = "events"
CONSUMER = "stats"

EventsWriter = Annotated[TopicWriter, Depends(writer_dependency("events"))]


def create_app(endpoint: str, database: str) -> FastAPI:
    seen: Counter[str] = Counter()

    async def count(message: TopicMessage) -> None:
        seen[message.data.decode()] += 1

    consumer = Consumer(TOPIC, CONSUMER, count)
    runtime = TopicRuntime(
        endpoint,
        database,
        # One producer id per process: its seq_nos are deduplicated by the server across reconnects.
        writers={"events": WriterSpec(TOPIC, producer_id=f"web-{os.getpid()}")},
        consumers=[consumer],
    )
    app = FastAPI(lifespan=topic_lifespan(runtime))

    @app.exception_handler(YdbTopicError)
    async def topic_error(request: Request, exc: YdbTopicError) -> JSONResponse:
        # Retriable failures are the server's or the network's: tell the client to try again.
        status = 503 if exc.retriable else 500
        return JSONResponse({"error": type(exc).__name__, "detail": str(exc)}, status_code=status)

    @app.post("/events", status_code=202)
    async def publish(writer: EventsWriter, body: Annotated[bytes, Body(media_type="application/octet-stream")]) -> Any:
        await writer.write(body)
        return {"status": "accepted"}

    @app.post("/events/confirmed", status_code=201)
    async def publish_confirmed(
        writer: EventsWriter, body: Annotated[bytes, Body(media_type="application/octet-stream")]
    ) -> Any:
        result = await writer.write_with_ack(body)
        if isinstance(result, Written):
            return {"status": "stored", "partition": result.partition_id, "offset": result.offset}
        if isinstance(result, Skipped):
            return {"status": "duplicate"}
        return {"status": "stored"}

    @app.get("/stats")
    async def stats() -> Any:
        return {"seen": dict(seen), "handled": consumer.handled, "restarts": consumer.restarts}

    return app


async def main() -> None:
    import uvicorn  # type: ignore[import-not-found,unused-ignore]  # only needed to serve for real

    from ydb_topic_async import AlreadyExistsError, Driver
    from ydb_topic_async.testing import LocalTopicServer

    async with contextlib.AsyncExitStack() as stack:
        endpoint = os.environ.get("YDB_ENDPOINT")
        if endpoint is None:
            server = await stack.enter_async_context(LocalTopicServer())
            endpoint = server.endpoint
        database = os.environ.get("YDB_DATABASE", "/local")
        async with Driver(endpoint, database) as admin:
            with contextlib.suppress(AlreadyExistsError):
                await admin.topic.create_topic(TOPIC, consumers=[CONSUMER])
        config = uvicorn.Config(create_app(endpoint, database), port=int(os.environ.get("PORT", "8000")))
        await uvicorn.Server(config).serve()


if __name__ == "__main__":
    asyncio.run(main())
