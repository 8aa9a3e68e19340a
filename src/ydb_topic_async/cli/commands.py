"""What each command does: ``topic``, ``consumer``, ``write``, ``read`` and ``serve``
(``COMMANDS``: the command's name to its coroutine, given the parsed options and the output)."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, BinaryIO, TextIO

from .. import LZ4_CODEC, ConsumerSettings, TopicSelector, YdbTopicError, lz4_encode
from ..testing import CannotServeError, serve_until_signalled, serving_banner, start_serving_from
from .connection import open_driver
from .failures import CommandFailure, Signalled, UsageFailure
from .output import Progress, message_json, print_consumer, print_topic
from .parser import CODECS


def _codec_list(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        return [CODECS[name.strip()] for name in text.split(",") if name.strip()]
    except KeyError as exc:
        raise UsageFailure(f"unknown codec {exc.args[0]!r}; choose from {', '.join(sorted(CODECS))}") from None


async def _topic(args: argparse.Namespace, out: TextIO) -> None:
    codecs = _codec_list(args.codecs) if args.action == "create" else []  # a mistake fails before connecting
    async with open_driver(args) as driver:
        client = driver.topic
        retention = dt.timedelta(hours=args.retention_hours) if getattr(args, "retention_hours", None) else None
        if args.action == "create":
            await client.create_topic(
                args.path,
                min_active_partitions=args.partitions,
                retention_period=retention,
                supported_codecs=codecs,
                consumers=[ConsumerSettings(name) for name in args.consumer],
            )
            print(f"created {client.full_path(args.path)}", file=out)
        elif args.action == "describe":
            print_topic(await client.describe_topic(args.path, include_stats=True), out, as_json=args.json)
        elif args.action == "alter":
            await client.alter_topic(
                args.path,
                set_min_active_partitions=args.partitions,
                set_retention_period=retention,
                add_consumers=args.add_consumer,
                drop_consumers=args.drop_consumer,
            )
            print(f"altered {client.full_path(args.path)}", file=out)
        else:
            await client.drop_topic(args.path)
            print(f"dropped {client.full_path(args.path)}", file=out)


async def _consumer(args: argparse.Namespace, out: TextIO) -> None:
    async with open_driver(args) as driver:
        description = await driver.topic.describe_consumer(args.path, args.name)
    print_consumer(args.name, description, out, as_json=args.json)


async def _write(args: argparse.Namespace, out: TextIO) -> None:
    # Lines are bytes, not text: a message is whatever the line holds, in any encoding.
    source: BinaryIO
    if args.file:
        source = await asyncio.to_thread(open, args.file, "rb")
        total_bytes: int | None = os.fstat(source.fileno()).st_size
    else:
        source, total_bytes = sys.stdin.buffer, None
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = Progress(sys.stderr, total_bytes) if show else None
    codec = CODECS[args.codec]
    written = 0
    loop = asyncio.get_running_loop()
    try:
        async with open_driver(args) as driver, driver.topic.writer(
            args.path,
            producer_id=args.producer_id,
            codec=codec,
            encoders={LZ4_CODEC: lz4_encode} if codec == LZ4_CODEC else None,
        ) as writer:
            # Pace from here: connecting must not count as time already spent writing.
            started = time.monotonic()
            while True:
                # Reading stdin blocks: keep it off the event loop so acks keep flowing.
                line = await loop.run_in_executor(None, source.readline)
                if not line:
                    break
                await writer.write(line.removesuffix(b"\n"))
                written += 1
                if progress is not None:
                    progress.advance(len(line))
                if args.rate:
                    # Pace against the start time, not the previous message, so sleeps do not drift.
                    delay = started + written / args.rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
    finally:
        if args.file:
            source.close()
    if progress is not None:
        progress.draw(final=True)
    print(f"wrote {written} messages to {args.path}", file=out)


async def _read(args: argparse.Namespace, out: TextIO) -> None:
    if args.consumer is None and not args.partition:
        raise UsageFailure("give --consumer, or --partition (with --offset) to read without a consumer")
    if args.consumer is not None and args.offset is not None:
        raise UsageFailure("--offset is for reading without a consumer; a consumer resumes from its commits")
    if args.count is not None and args.count <= 0:
        raise UsageFailure("--count must be positive")
    if args.consumer:
        topics: Any = TopicSelector(args.path, partitions=args.partition) if args.partition else args.path
    else:
        topics = TopicSelector(args.path, start_offsets={p: args.offset or 0 for p in args.partition})
    show = args.progress if args.progress is not None else sys.stderr.isatty() and not out.isatty()
    progress = Progress(sys.stderr, total_messages=args.count) if show else None
    seen = 0
    async with open_driver(args) as driver, driver.topic.reader(topics, consumer=args.consumer) as reader:
        while args.count is None or seen < args.count:
            try:
                batch = await reader.receive_batch(
                    max_messages=None if args.count is None else args.count - seen,
                    timeout=None if args.follow else args.idle_timeout,
                )
            except YdbTopicError as exc:
                if isinstance(exc, TimeoutError):
                    break  # idle: everything available was read
                raise
            for message in batch:
                line = message_json(message) if args.format == "json" else message.data.decode("utf-8", "replace")
                print(line, file=out, flush=args.follow)
            seen += len(batch)
            if progress is not None:
                progress.advance(sum(len(message.data) for message in batch), len(batch))
            if args.consumer and not args.no_commit:
                reader.commit(batch)
    if progress is not None:
        progress.draw(final=True)


async def _serve(args: argparse.Namespace, out: TextIO) -> None:
    try:
        server = await start_serving_from(args)
    except CannotServeError as exc:
        raise CommandFailure(str(exc)) from None
    signum = await serve_until_signalled(server, serving_banner(server), out)
    raise Signalled(signum)


COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO], Coroutine[Any, Any, None]]] = {
    "topic": _topic, "consumer": _consumer, "write": _write, "read": _read, "serve": _serve,
}
