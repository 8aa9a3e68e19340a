"""Recovery after a server outage: how soon writers, readers and calls resume once it is back.

    python scripts/recovery.py --outages 5 15 30 60

The local topic server runs in a child process in durable mode (``--data-dir``). For each outage
length, one driver with default settings (discovery on) opens a writer with a producer id and a
reader that commits what it reads, and both exchange a first message. Then the server process
is killed with SIGKILL; during the outage a message is given to the writer (``write_with_ack``),
the reader waits for it (``receive_batch``), and after ``outage`` seconds the server is started
again on the same port and data directory. From the moment it listens again (it printed its
banner), the script times:

- first ack: the writer acknowledging the message it was given during the outage;
- first read: the reader receiving that message (it can only come after the ack);
- reader connected: the reader's stream handshake answered again;
- describe: a ``describe_topic()`` (no timeout) issued on the same driver at that moment;
- fresh driver: a new driver, made at that same moment, to its first ack and its first read (a
  reader of its own consumer, reading the topic's first message): the time a client with
  nothing to recover takes, in the same conditions;
- service: a FastAPI application on ``topic_lifespan(TopicRuntime(...))`` (in this process,
  called through httpx's ASGI transport), whose route writes the request body with
  ``write_with_ack`` within one second and answers 503 otherwise: the first 200 after the return,
  asking every 50 ms (only when fastapi and httpx are installed).

The outage column is the time from the kill until the server listened again (the requested
outage plus the server's start-up). Each figure is in seconds; ``--rounds`` repeats every outage
and the table shows each round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no gRPC info lines (GOAWAY) in the output

from soak import ServerProcess, free_port

import ydb_topic_async as yta

CONSUMER = "recovery"
FRESH_CONSUMER = "fresh"
BOUND = 180.0
"""Seconds after the server's return that any one measurement may take before it counts as never."""


@dataclass
class Row:
    outage: float
    first_ack: float | None
    first_read: float | None
    reader_connected: float | None
    describe: float | None
    fresh_ack: float | None
    fresh_read: float | None
    service: float | None = None


class Service:
    """A FastAPI application whose ``POST /events`` writes the body and answers 200 once it is
    acknowledged, 503 when that takes longer than a second."""

    def __init__(self, endpoint: str, topic: str) -> None:
        import httpx
        from fastapi import Body, FastAPI, Response

        from ydb_topic_async.integrations.fastapi import TopicRuntime, WriterSpec, topic_lifespan

        self.runtime = TopicRuntime(endpoint, "/local", writers={"events": WriterSpec(topic, producer_id="service")})
        app = FastAPI(lifespan=topic_lifespan(self.runtime))
        self._lifespan = topic_lifespan(self.runtime)(app)

        @app.post("/events")
        async def publish(body: bytes = Body()) -> Response:
            try:
                await asyncio.wait_for(self.runtime.writer("events").write_with_ack(body), 1.0)
            except Exception:  # unavailable, for whatever reason: the answer is the measurement
                return Response(status_code=503)
            return Response(status_code=200)

        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://service")

    async def __aenter__(self) -> Service:
        await self._lifespan.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()
        await self._lifespan.__aexit__(None, None, None)

    async def status(self) -> int:
        return (await self.client.post("/events", content=b"event")).status_code

    async def until_ok(self) -> None:
        """Ask every 50 ms until the answer is 200 (as a client retrying would)."""
        while await self.status() != 200:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


def _service(endpoint: str, topic: str) -> contextlib.AbstractAsyncContextManager[Service | None]:
    try:
        return Service(endpoint, topic)
    except ImportError:
        return contextlib.nullcontext()


async def _timed(since: float, awaitable: Awaitable[Any]) -> float | None:
    """Seconds from ``since`` until ``awaitable`` completes (None: it failed or took too long)."""
    try:
        await asyncio.wait_for(awaitable, BOUND)
    except Exception as exc:  # a measurement that fails is reported as such, not raised
        logging.getLogger("recovery").warning("a measurement failed: %r", exc)
        return None
    return time.monotonic() - since


async def _until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (a connection state: there is no event to wait on) every 5 ms."""
    while not condition():  # noqa: ASYNC110
        await asyncio.sleep(0.005)


async def _nothing() -> None:
    return None


async def _fresh_ack(endpoint: str, topic: str) -> None:
    async with yta.Driver(endpoint, "/local") as driver, driver.topic.writer(topic, producer_id="fresh") as writer:
        await writer.write_with_ack(b"fresh")


async def _fresh_read(endpoint: str, topic: str) -> None:
    async with yta.Driver(endpoint, "/local") as driver, driver.topic.reader(topic, consumer=FRESH_CONSUMER) as reader:
        await reader.receive_batch()


async def one_outage(server: ServerProcess, endpoint: str, outage: float, name: str) -> Row:
    async with yta.Driver(endpoint, "/local") as driver:
        await driver.wait_ready(timeout=30)
        await driver.topic.create_topic(name, consumers=[CONSUMER, FRESH_CONSUMER])
        writer = driver.topic.writer(name, producer_id="recovery")
        reader = driver.topic.reader(name, consumer=CONSUMER)
        async with writer, reader, _service(endpoint, name) as service:
            if service is not None:
                assert await service.status() == 200
            await asyncio.wait_for(writer.write_with_ack(b"before"), 30)
            batch = await reader.receive_batch(timeout=30)
            await reader.commit_with_ack(batch, timeout=30)

            killed = time.monotonic()
            await server.kill()
            states = (yta.ConnectionState.RECONNECTING,)
            lost = _until(lambda: writer.connection_state in states and reader.connection_state in states)
            await asyncio.wait_for(lost, 30)
            ack = asyncio.ensure_future(writer.write_with_ack(b"during"))
            read = asyncio.ensure_future(reader.receive_batch())
            try:
                await asyncio.sleep(outage)
                await server.start()
                back = time.monotonic()
                reconnected = _until(lambda: reader.connection_state is yta.ConnectionState.CONNECTED)
                results = await asyncio.gather(
                    _timed(back, ack),
                    _timed(back, read),
                    _timed(back, reconnected),
                    _timed(back, driver.topic.describe_topic(name)),
                    _timed(back, _fresh_ack(endpoint, name)),
                    _timed(back, _fresh_read(endpoint, name)),
                    _timed(back, service.until_ok()) if service is not None else _nothing(),
                )
            finally:
                for task in (ack, read):
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
            if read.done() and not read.cancelled() and read.exception() is None:
                await reader.commit_with_ack(read.result(), timeout=30)
            return Row(back - killed, *results)


def _cell(value: float | None) -> str:
    return f"> {BOUND:.0f}" if value is None else f"{value:.2f}"


def table(rows: list[Row]) -> str:
    service = any(r.service is not None for r in rows)
    lines = [
        "| outage (s) | first ack | first read | reader connected | describe | fresh driver: first ack"
        " | fresh driver: first read |" + (" service |" if service else ""),
        "|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if service else ""),
    ]
    for r in rows:
        cells = [r.first_ack, r.first_read, r.reader_connected, r.describe, r.fresh_ack, r.fresh_read]
        if service:
            cells.append(r.service)
        lines.append(f"| {r.outage:.1f} | " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


async def run(outages: list[float], rounds: int, data_dir: Path, progress: Callable[[str], None]) -> list[Row]:
    port = free_port()
    server = ServerProcess(data_dir, port, data_dir / "server.log")
    await server.start()
    endpoint = f"grpc://127.0.0.1:{port}"
    rows: list[Row] = []
    try:
        for round_ in range(rounds):
            for outage in outages:
                row = await one_outage(server, endpoint, outage, f"recovery-{round_}-{outage:g}")
                progress(table([row]).splitlines()[-1])
                rows.append(row)
    finally:
        await server.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outages", type=float, nargs="+", default=[5.0, 15.0, 30.0, 60.0],
                        help="outage lengths in seconds (default: 5 15 30 60)")
    parser.add_argument("--rounds", type=int, default=1, help="times to repeat every outage (default: 1)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where the server keeps its data and its log (default: a temporary directory)")
    parser.add_argument("--log-level", default="ERROR", help="the SDK's log level on stderr (default: ERROR)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with contextlib.ExitStack() as stack:
        data_dir = args.data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="recovery-")))
        data_dir.mkdir(parents=True, exist_ok=True)
        rows = asyncio.run(run(args.outages, args.rounds, data_dir, lambda line: print(line, file=sys.stderr)))
    print(f"ydb-topic-async {yta.__version__}, Python {sys.version.split()[0]}, load average "
          f"{os.getloadavg()[0]:.1f} at the end; seconds from the server listening again")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
