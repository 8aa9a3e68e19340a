"""``ydb-topic-async``: administer topics, write and read messages, run the local server.

    ydb-topic-async topic create events --partitions 4 --consumer analytics
    printf 'a\\nb\\n' | ydb-topic-async write events --producer-id cli
    ydb-topic-async read events --consumer analytics --count 2 --format json
    ydb-topic-async serve --port 2136

The endpoint comes from ``--endpoint`` or ``YDB_ENDPOINT`` (default ``grpc://localhost:2136``),
the database from ``--database``, ``YDB_DATABASE`` or the connection string (default ``/local``).
Exit codes: 0 success, 1 the operation failed, 2 the command line is wrong, 130 interrupted.
Every failure is reported as one line on standard error, without a traceback (``--traceback``
shows it).
"""

from __future__ import annotations

import os

# The command reports failures itself, in one line; gRPC's own error log would add more.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import json
import socket
import sys
import time
import traceback
from collections.abc import AsyncIterator, Sequence
from typing import Any, BinaryIO, TextIO
from urllib.parse import urlsplit

from .. import (
    LZ4_CODEC,
    AccessTokenCredentials,
    Codec,
    ConsumerSettings,
    Credentials,
    Driver,
    InvalidArgumentError,
    StaticCredentials,
    TopicSelector,
    YdbTopicError,
    __version__,
    lz4_encode,
)

CODECS = {"raw": Codec.RAW, "gzip": Codec.GZIP, "zstd": Codec.ZSTD, "lz4": LZ4_CODEC}
PROG = "ydb-topic-async"


class UsageFailure(Exception):
    """A command-line mistake found after parsing (exit code 2)."""


class CommandFailure(Exception):
    """The operation failed for a reason the message explains in full (exit code 1)."""


def _plain(text: str) -> str:
    """Docstring text for a terminal: without the reStructuredText literal markers."""
    return text.replace("``", "")


def _parser() -> argparse.ArgumentParser:
    summary, _, details = (__doc__ or "").partition("\n\n")
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=_plain(summary),
        epilog="examples:\n" + _plain(details).rstrip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--traceback", action="store_true", help="show the traceback of an unexpected failure")
    parser.add_argument("--endpoint", default=os.environ.get("YDB_ENDPOINT", "grpc://localhost:2136"),
                        help="grpc://host:port or grpcs://host:port (default: YDB_ENDPOINT or grpc://localhost:2136)")
    parser.add_argument("--database", default=os.environ.get("YDB_DATABASE"),
                        help="database path (default: YDB_DATABASE, the endpoint's ?database=, or /local)")
    parser.add_argument("--token", default=os.environ.get("YDB_TOKEN"), help="an access token")
    parser.add_argument("--user", help="log in as this user (password from --password or YDB_PASSWORD)")
    parser.add_argument("--password", default=os.environ.get("YDB_PASSWORD"))
    parser.add_argument("--timeout", type=_positive_float, default=10.0,
                        help="seconds to wait for the server to answer at start (default: 10)")
    parser.set_defaults(usage=parser)
    commands = parser.add_subparsers(dest="command", required=True)

    topic = commands.add_parser("topic", help="create, describe, alter or drop a topic").add_subparsers(
        dest="action", required=True
    )
    create = topic.add_parser("create", help="create a topic")
    create.add_argument("path")
    create.add_argument("--partitions", type=_positive_int, default=1)
    create.add_argument("--retention-hours", type=float)
    create.add_argument("--codecs", help="comma-separated codecs the topic accepts, e.g. raw,zstd")
    create.add_argument("--consumer", action="append", default=[], help="add a consumer (repeatable)")
    describe = topic.add_parser("describe", help="show a topic's settings and partitions")
    describe.add_argument("path")
    describe.add_argument("--json", action="store_true", help="print JSON")
    alter = topic.add_parser("alter", help="change a topic")
    alter.add_argument("path")
    alter.add_argument("--partitions", type=_positive_int, help="new (larger) number of partitions")
    alter.add_argument("--retention-hours", type=float)
    alter.add_argument("--add-consumer", action="append", default=[])
    alter.add_argument("--drop-consumer", action="append", default=[])
    drop = topic.add_parser("drop", help="delete a topic")
    drop.add_argument("path")
    for command in (create, describe, alter, drop):
        command.set_defaults(usage=command)

    consumer = commands.add_parser("consumer", help="inspect consumers").add_subparsers(dest="action", required=True)
    consumer_describe = consumer.add_parser("describe", help="committed offsets and lag per partition")
    consumer_describe.add_argument("path")
    consumer_describe.add_argument("name")
    consumer_describe.add_argument("--json", action="store_true")
    consumer_describe.set_defaults(usage=consumer_describe)

    write = commands.add_parser("write", help="write lines from stdin or a file, one message each")
    write.add_argument("path")
    write.add_argument("--file", help="read lines from this file instead of stdin")
    write.add_argument("--producer-id", help="enables deduplication across retries")
    write.add_argument("--codec", choices=sorted(CODECS), default="raw")
    write.add_argument("--rate", type=_positive_float, help="at most this many messages per second")
    write.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="show a progress bar on stderr (default: when stderr is a terminal)")
    write.set_defaults(usage=write)

    read = commands.add_parser("read", help="read messages")
    read.add_argument("path")
    read.add_argument("--consumer", help="read as this consumer (omit to read a partition from an offset)")
    read.add_argument("--partition", type=int, action="append",
                      help="partition to read (repeatable); required without a consumer")
    read.add_argument("--offset", type=int, help="start offset, only without a consumer (default: 0)")
    read.add_argument("--count", type=int, help="stop after this many messages")
    read.add_argument("--follow", action="store_true", help="keep waiting for new messages")
    read.add_argument("--idle-timeout", type=_positive_float, default=2.0,
                      help="without --follow, stop after this many idle seconds (default: 2)")
    read.add_argument("--format", choices=("raw", "json"), default="raw")
    read.add_argument("--no-commit", action="store_true", help="do not commit what was read")
    read.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help="show the count and rate of messages read on stderr, with a bar when --count is given"
                           " (default: when stderr is a terminal and stdout is not)")
    read.set_defaults(usage=read)

    serve = commands.add_parser("serve", help="run the local topic server")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=2136, help="port to listen on (0: any free port)")
    serve.add_argument("--serve-database", default="/local", dest="serve_database")
    serve.add_argument("--nodes", type=_positive_int, default=1,
                       help="run a local cluster of this many nodes on consecutive ports (default: 1)")
    serve.set_defaults(usage=serve)
    return parser


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _credentials(args: argparse.Namespace) -> Credentials | None:
    if args.user:
        if args.password is None:
            raise UsageFailure("--user needs --password (or YDB_PASSWORD)")
        return StaticCredentials(args.user, args.password)
    if args.token:
        return AccessTokenCredentials(args.token)
    return None


@contextlib.asynccontextmanager
async def _driver(args: argparse.Namespace) -> AsyncIterator[Driver]:
    """An open driver whose server answered within ``--timeout`` (else a clear error, exit 1)."""
    database = args.database
    if database is None and "database=" not in args.endpoint:
        database = "/local"
    driver = Driver(args.endpoint, database, _credentials(args))
    try:
        # Writers and readers reconnect forever; fail fast instead when nothing answers.
        await _connect(driver, args.timeout)
        yield driver
    finally:
        await driver.close()


async def _connect(driver: Driver, timeout: float) -> None:
    """Open ``driver`` and wait until its server answers: a ``CommandFailure`` otherwise.

    A refused connection fails at once instead of after ``timeout``; a server that accepts
    connections and never answers fails after ``timeout``, whatever the waiting raised.
    """
    where = f"{driver.endpoint} (database {driver.database})"
    silent = f"no YDB endpoint answered at {where} within {timeout:g}s"
    try:
        async with asyncio.timeout(timeout):
            await _probe(driver.endpoint, where)
            await driver.open()
            await driver.wait_ready(timeout)
    except TimeoutError as exc:
        raise CommandFailure(str(exc) if isinstance(exc, YdbTopicError) else silent) from None
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # a real cancellation (Ctrl-C): let it end the command
        # gRPC can end an abandoned call with a bare CancelledError: still nobody answered.
        raise CommandFailure(silent) from None


async def _probe(endpoint: str, where: str) -> None:
    """Open and close one TCP connection to ``endpoint``: refused or unresolvable fails now."""
    url = urlsplit(endpoint)
    try:
        _, writer = await asyncio.open_connection(url.hostname, url.port)
    except OSError as exc:
        if exc.errno and not isinstance(exc, socket.gaierror):
            reason = os.strerror(exc.errno)  # not asyncio's "Connect call failed (...)"
        else:
            reason = exc.strerror or str(exc) or type(exc).__name__
        raise CommandFailure(f"cannot connect to {where}: {reason}") from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


def _codec_list(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        return [CODECS[name.strip()] for name in text.split(",") if name.strip()]
    except KeyError as exc:
        raise UsageFailure(f"unknown codec {exc.args[0]!r}; choose from {', '.join(sorted(CODECS))}") from None


async def _topic(args: argparse.Namespace, out: TextIO) -> None:
    codecs = _codec_list(args.codecs) if args.action == "create" else []  # a mistake fails before connecting
    async with _driver(args) as driver:
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
            d = await client.describe_topic(args.path, include_stats=True)
            info: dict[str, Any] = {
                "path": d.path,
                "partitions": [
                    {
                        "id": p.partition_id,
                        "active": p.active,
                        "start_offset": p.stats.start_offset if p.stats else None,
                        "end_offset": p.stats.end_offset if p.stats else None,
                        "children": list(p.child_partition_ids),
                    }
                    for p in d.partitions
                ],
                "retention_seconds": d.retention_period.total_seconds() if d.retention_period else None,
                "supported_codecs": list(d.supported_codecs),
                "consumers": [c.name for c in d.consumers],
            }
            if args.json:
                print(json.dumps(info), file=out)
            else:
                print(f"{d.path}: {len(d.partitions)} partitions, consumers: {', '.join(info['consumers']) or '-'}",
                      file=out)
                for p in info["partitions"]:
                    state = "active" if p["active"] else "inactive"
                    print(f"  partition {p['id']}: {state}, offsets [{p['start_offset']}, {p['end_offset']})", file=out)
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
    async with _driver(args) as driver:
        c = await driver.topic.describe_consumer(args.path, args.name)
        rows = [
            {"partition": p.partition_id, "committed_offset": p.committed_offset, "end_offset": p.end_offset,
             "lag": p.lag}
            for p in c.partitions
        ]
        if args.json:
            print(json.dumps({"consumer": args.name, "partitions": rows, "total_lag": c.total_lag}), file=out)
            return
        print(f"consumer {args.name} of {c.path}: total lag {c.total_lag}", file=out)
        for row in rows:
            print(f"  partition {row['partition']}: committed {row['committed_offset']},"
                  f" end {row['end_offset']}, lag {row['lag']}", file=out)


class Progress:
    """A one-line progress bar on a stream: a bar with a percentage when the total is known,
    else a counter; both with the rate. Redrawn at most every ``interval`` seconds.

    The total is in bytes (``total_bytes``, writing a file) or in messages (``total_messages``,
    reading a given count).
    """

    WIDTH = 30

    def __init__(
        self,
        stream: TextIO,
        total_bytes: int | None = None,
        interval: float = 0.2,
        *,
        total_messages: int | None = None,
    ) -> None:
        self.stream = stream
        self.total_bytes = total_bytes
        self.total_messages = total_messages
        self.interval = interval
        self.messages = 0
        self.bytes = 0
        self.started = time.monotonic()
        self._drawn = 0.0

    def advance(self, size: int, messages: int = 1) -> None:
        self.messages += messages
        self.bytes += size
        now = time.monotonic()
        if now - self._drawn >= self.interval:
            self._drawn = now
            self.draw()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = f"{self.messages / elapsed:,.0f} msg/s"
        done: float | None = None
        if self.total_bytes:
            done = min(self.bytes / self.total_bytes, 1.0)
        elif self.total_messages:
            done = min(self.messages / self.total_messages, 1.0)
        if done is not None:
            filled = round(done * self.WIDTH)
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            return f"[{bar}] {done:4.0%} {self.messages:,} messages, {rate}"
        return f"{self.messages:,} messages, {rate}"

    def draw(self, final: bool = False) -> None:
        print("\r" + self.line(), end="\n" if final else "", file=self.stream, flush=True)


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
        async with _driver(args) as driver, driver.topic.writer(
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


def _as_json(message: Any) -> str:
    data = message.data
    try:
        payload: dict[str, Any] = {"data": data.decode("utf-8")}
    except UnicodeDecodeError:
        payload = {"data_base64": base64.b64encode(data).decode()}
    return json.dumps({
        "topic": message.topic_path,
        "partition": message.partition_id,
        "offset": message.offset,
        "seq_no": message.seq_no,
        "producer_id": message.producer_id,
        "created_at": message.created_at.isoformat() if message.created_at else None,
        "written_at": message.written_at.isoformat(),
        "metadata": {k: base64.b64encode(v).decode() for k, v in message.metadata_items.items()},
        **payload,
    })


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
    async with _driver(args) as driver, driver.topic.reader(topics, consumer=args.consumer) as reader:
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
                line = _as_json(message) if args.format == "json" else message.data.decode("utf-8", "replace")
                print(line, file=out, flush=args.follow)
            seen += len(batch)
            if progress is not None:
                progress.advance(sum(len(message.data) for message in batch), len(batch))
            if args.consumer and not args.no_commit:
                reader.commit(batch)
    if progress is not None:
        progress.draw(final=True)


async def _serve(args: argparse.Namespace, out: TextIO) -> None:
    from ..testing import CannotServeError, serve_until_signalled, serving_banner, start_serving

    try:
        server = await start_serving(args.host, args.port, args.nodes, database=args.serve_database)
    except CannotServeError as exc:
        raise CommandFailure(str(exc)) from None
    signum = await serve_until_signalled(server, serving_banner(server), out)
    raise _Signalled(signum)


class _Signalled(Exception):
    """The command stopped cleanly on a signal: exit with 128 + its number, as a shell does."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


COMMANDS = {"topic": _topic, "consumer": _consumer, "write": _write, "read": _read, "serve": _serve}


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help (0) and on mistakes (2)
        return exc.code if isinstance(exc.code, int) else 2
    stream = out or sys.stdout
    try:
        asyncio.run(COMMANDS[args.command](args, stream))
    except (UsageFailure, InvalidArgumentError) as exc:
        # InvalidArgumentError: the SDK refused a value taken from the command line.
        usage: argparse.ArgumentParser = args.usage
        usage.print_usage(sys.stderr)
        print(f"{usage.prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except _Signalled as exc:
        return 128 + exc.signum
    except CommandFailure as exc:
        _fail(str(exc))
    except YdbTopicError as exc:
        _fail(f"{type(exc).__name__}: {_one_line(exc)}")
    except OSError as exc:
        _fail(_one_line(exc))
    except (Exception, asyncio.CancelledError) as exc:
        if args.traceback:
            traceback.print_exc()
        _fail(f"unexpected {type(exc).__name__}: {_one_line(exc) or '(no message)'} (--traceback shows where)")
    else:
        return 0
    return 1


def _fail(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
