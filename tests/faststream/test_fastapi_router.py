"""``ydb_topic_async.faststream.fastapi.YdbRouter`` in a FastAPI application over HTTP (httpx and
the ASGI lifespan), against the local server: handlers take FastAPI's dependencies, endpoints
publish through the router's broker, the AsyncAPI document is served.

No postponed annotations here: FastAPI resolves a handler's ``Depends`` from its annotations.
"""


from typing import Annotated

import asgi_lifespan
import httpx
import pytest
from fastapi import Depends, FastAPI

from ydb_topic_async.faststream.fastapi import YdbRouter
from ydb_topic_async.testing import LocalTopicServer

from .._polling import eventually
from ._brokers import Seen

pytestmark = pytest.mark.timeout(60)


async def test_a_fastapi_application_serves_the_broker(server: LocalTopicServer) -> None:
    router = YdbRouter(server.endpoint, database=server.database, auto_create_topics=True, logger=None)
    seen = Seen()

    def tenant() -> str:
        return "acme"

    @router.subscriber("signups", consumer="welcome")
    @router.publisher("emails")
    async def welcome(email: str, who: Annotated[str, Depends(tenant)]) -> dict[str, str]:
        return {"to": email, "tenant": who}

    @router.subscriber("emails", consumer="outbox")
    async def send(email: dict[str, str]) -> None:
        seen.add(email)

    app = FastAPI()

    @app.post("/signup")
    async def signup(email: str) -> dict[str, int]:
        ack = await router.broker.publish({"email": email}, "signups")
        return {"offset": ack.offset}  # type: ignore[union-attr]

    app.include_router(router)
    async with (
        asgi_lifespan.LifespanManager(app) as manager,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=manager.app), base_url="http://test") as client,
    ):
        response = await client.post("/signup", params={"email": "a@example.com"})
        assert response.json() == {"offset": 0}
        assert await seen.wait_for(1) == [{"to": "a@example.com", "tenant": "acme"}]
        await eventually(lambda: server.storage.committed_offsets("signups", "welcome") == {0: 1}, "committed")
        schema = (await client.get("/asyncapi.json")).json()
        assert schema["servers"]["development"]["protocol"] == "ydb"
        assert {c["address"] for c in schema["channels"].values()} == {"signups", "emails"}
    assert router.broker.config.broker_config.driver is None  # stopped with the application
