"""An aiohttp service that publishes events to a topic and consumes them in the background.

    pip install -e ".[aiohttp]"               # in a clone of the repository
    python examples/aiohttp_app.py            # on an embedded local topic server, port 8080
    YDB_ENDPOINT=grpc://host:2136 YDB_DATABASE=/db python examples/aiohttp_app.py

POST /events            publish the body, return at once (202): fire-and-forget
POST /events/confirmed  publish the body, return once the server stored it (201, with its offset)
GET  /stats             what the background consumer has seen, and how often it restarted
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter

from aiohttp import web

from ydb_topic_async import Skipped, TopicMessage, Written
from ydb_topic_async.integrations.aiohttp import WRITERS, Consumer, TopicRuntime, WriterSpec, topic_context

TOPIC = "events"
CONSUMER = "stats"
STATS_CONSUMER = web.AppKey("stats_consumer", Consumer)


def create_app(endpoint: str, database: str) -> web.Application:
    app = web.Application()
    seen: Counter[str] = Counter()

    async def count(message: TopicMessage) -> None:
        seen[message.data.decode()] += 1

    consumer = Consumer(TOPIC, CONSUMER, count)
    app[STATS_CONSUMER] = consumer
    runtime = TopicRuntime(
        endpoint,
        database,
        # One producer id per process: its seq_nos are deduplicated by the server across reconnects.
        writers={"events": WriterSpec(TOPIC, producer_id=f"web-{os.getpid()}")},
        consumers=[consumer],
    )
    app.cleanup_ctx.append(topic_context(runtime))

    async def publish(request: web.Request) -> web.Response:
        await request.app[WRITERS]["events"].write(await request.read())
        return web.json_response({"status": "accepted"}, status=202)

    async def publish_confirmed(request: web.Request) -> web.Response:
        result = await request.app[WRITERS]["events"].write_with_ack(await request.read())
        if isinstance(result, Written):
            body = {"status": "stored", "partition": result.partition_id, "offset": result.offset}
        elif isinstance(result, Skipped):
            body = {"status": "duplicate"}
        else:
            body = {"status": "stored"}
        return web.json_response(body, status=201)

    async def stats(request: web.Request) -> web.Response:
        c = request.app[STATS_CONSUMER]
        return web.json_response({"seen": dict(seen), "handled": c.handled, "restarts": c.restarts})

    app.router.add_post("/events", publish)
    app.router.add_post("/events/confirmed", publish_confirmed)
    app.router.add_get("/stats", stats)
    return app


async def main() -> None:
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
        runner = web.AppRunner(create_app(endpoint, database))
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        port = int(os.environ.get("PORT", "8080"))
        await web.TCPSite(runner, "127.0.0.1", port).start()
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
