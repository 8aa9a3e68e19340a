"""An aiohttp service that publishes events to a topic and consumes them in the background.

    python examples/aiohttp_app.py            # on an embedded local topic server, port 8080
    YDB_ENDPOINT=grpc://host:2136 python examples/aiohttp_app.py

POST /events            publish the body, return at once (202)
POST /events/confirmed  publish the body, return once the server stored it (201, with its offset)
GET  /stats             what the background consumer has seen
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter

from aiohttp import web

from ydb_topic_async import Written
from ydb_topic_async.integrations.aiohttp import WRITERS, Consumer, topic_context
from ydb_topic_async.reader import TopicMessage

TOPIC = "events"
SEEN = web.AppKey("seen", Counter)


def create_app(endpoint: str, database: str) -> web.Application:
    app = web.Application()
    seen: Counter[str] = Counter()
    app[SEEN] = seen

    async def count(message: TopicMessage) -> None:
        seen[message.data.decode()] += 1

    app.cleanup_ctx.append(
        topic_context(
            endpoint,
            database,
            writers={"events": {"path": TOPIC, "producer_id": f"web-{os.getpid()}"}},
            consumers=[Consumer(TOPIC, "stats", count)],
        )
    )

    async def publish(request: web.Request) -> web.Response:
        await request.app[WRITERS]["events"].write(await request.read())
        return web.json_response({"status": "accepted"}, status=202)

    async def publish_confirmed(request: web.Request) -> web.Response:
        result = await request.app[WRITERS]["events"].write_with_ack(await request.read())
        offset = result.offset if isinstance(result, Written) else None
        return web.json_response({"status": "stored", "offset": offset}, status=201)

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(dict(request.app[SEEN]))

    app.router.add_post("/events", publish)
    app.router.add_post("/events/confirmed", publish_confirmed)
    app.router.add_get("/stats", stats)
    return app


async def main() -> None:
    from ydb_topic_async import AlreadyExistsError, Driver
    from ydb_topic_async.testing import LocalTopicServer

    endpoint = os.environ.get("YDB_ENDPOINT")
    server = None
    if endpoint is None:
        server = LocalTopicServer()
        await server.start()
        endpoint = server.endpoint
    database = os.environ.get("YDB_DATABASE", "/local")
    async with Driver(endpoint, database) as admin:
        with contextlib.suppress(AlreadyExistsError):
            await admin.topic.create_topic(TOPIC, consumers=["stats"])
    runner = web.AppRunner(create_app(endpoint, database))
    await runner.setup()
    port = int(os.environ.get("PORT", "8080"))
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"listening on http://127.0.0.1:{port}")
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        if server is not None:
            await server.stop()


if __name__ == "__main__":
    asyncio.run(main())
