"""Soak test: writers and a committing reader through a faulty network and a crashing server.

    python scripts/soak.py --duration 600

The local topic server runs in a child process in durable mode (``--data-dir``). Writers with
producer ids and a reader that commits what it reads talk to it through a TCP proxy
(``ydb_topic_async.testing.proxy``) that injects random faults one after another:

- ``reset``: every connection is reset;
- ``stall``: every byte is held back for longer than the handshake timeout (``--init-timeout``);
- ``blackhole``: the open connections stop carrying bytes while their sockets stay open;
- ``lost_replies``: the open connections carry requests but drop the server's answers, so
  messages are stored and their acknowledgements lost (resending them must not store them
  twice);
- ``outage``: connections are refused for up to ``--max-outage`` seconds;
- ``restart``: the server process is killed with SIGKILL and started again on the same port
  and data directory.

Every call has a bound: its own timeout plus ``--slack`` seconds; a call that outlasts it is a
hang. When the time is up the faults stop, the writers flush and close, the reader reads until
it has everything, and the server is stopped; its data directory is then opened in this process
to see exactly what was stored. The report:

- written: messages the writers had acknowledged (``Written`` or ``Skipped``);
- stored: messages in the topic; stored twice: messages stored more than once (with producer
  ids and seq_nos, a resend after a reconnect must be deduplicated: this must be 0);
- lost: acknowledged messages that are not stored (must be 0);
- read: distinct messages the reader received; read twice: deliveries of a message already
  received (at-least-once reading may deliver again what was not committed when a stream
  broke); read again after commit: deliveries of a message whose commit was acknowledged
  (must be 0); unread: stored messages the reader never received (must be 0);
- hangs: calls that outlasted their bound; give-ups: writers or readers that failed for good.

Exit code 0 when lost, stored twice, read again after commit, unread, hangs and give-ups are all
0; 1 otherwise. ``--json FILE`` writes the report as JSON too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no gRPC info lines (GOAWAY) on the terminal

import ydb_topic_async as yta
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import FlakyProxy, RandomFaults

T = TypeVar("T")

TOPIC = "soak"
CONSUMER = "soak"
FAULT_KINDS = ("reset", "stall", "blackhole", "lost_replies", "outage", "restart")


# --- the server in a child process ---------------------------------------------------------------


class ServerProcess:
    """``python -m ydb_topic_async.testing --port PORT --data-dir DIR`` in a child process."""

    def __init__(self, data_dir: Path, port: int, log: Path) -> None:
        self.data_dir = data_dir
        self.port = port
        self._log = log
        self._proc: asyncio.subprocess.Process | None = None
        self.restarts = 0

    async def start(self) -> None:
        for attempt in range(50):
            with self._log.open("ab") as log:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "ydb_topic_async.testing",
                    "--port", str(self.port), "--data-dir", str(self.data_dir),
                    stdout=asyncio.subprocess.PIPE, stderr=log,
                )
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line.startswith(b"local YDB topic server"):
                self._proc = proc
                return
            await proc.wait()  # the port is not free yet (the killed process's socket lingers)
            await asyncio.sleep(min(0.1 * (attempt + 1), 1.0))
        raise RuntimeError(f"the server did not start on port {self.port}; see {self._log}")

    async def kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()

    async def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 60)

    async def restart(self, seconds: float) -> None:
        """The ``restart`` fault: SIGKILL, down for ``seconds``, started again on the same port."""
        await self.kill()
        try:
            await asyncio.sleep(seconds)
        finally:
            self.restarts += 1
            await self.start()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- bounds --------------------------------------------------------------------------------------


class Hang(Exception):
    """A call outlasted its bound (it was cancelled and recorded)."""


@dataclass
class Tally:
    accepted: int = 0
    acked: set[bytes] = field(default_factory=set)
    failed_messages: Counter[str] = field(default_factory=Counter)
    buffer_full: int = 0
    delivered: Counter[bytes] = field(default_factory=Counter)
    committed: set[bytes] = field(default_factory=set)
    read_after_commit: int = 0
    hangs: list[str] = field(default_factory=list)
    give_ups: list[str] = field(default_factory=list)
    reconnects: int = 0
    describes_ok: int = 0
    describes_failed: Counter[str] = field(default_factory=Counter)
    calls: Counter[str] = field(default_factory=Counter)


class Bounds:
    """Runs calls under their bound: the call's own timeout plus ``slack`` seconds."""

    def __init__(self, tally: Tally, slack: float) -> None:
        self._tally = tally
        self._slack = slack

    async def call(self, what: str, timeout: float, awaitable: Awaitable[T]) -> T:
        self._tally.calls[what] += 1
        bound = timeout + self._slack
        started = time.monotonic()
        try:
            async with asyncio.timeout(bound) as scope:
                return await awaitable
        except TimeoutError:
            if not scope.expired():
                raise  # the call's own timeout, within its bound
        self._tally.hangs.append(f"{what} (timeout {timeout}s) still running after {time.monotonic() - started:.1f}s")
        raise Hang(what)


# --- the workload --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    duration: float
    writers: int
    partitions: int
    rate: float
    batch: int
    init_timeout: float
    keepalive: float
    call_timeout: float
    slack: float
    drain_timeout: float
    faults: tuple[str, ...]
    max_outage: float
    gap: tuple[float, float]
    seed: int | None


class Workload:
    def __init__(self, settings: Settings, endpoint: str, tally: Tally) -> None:
        self.s = settings
        self.endpoint = endpoint
        self.tally = tally
        self.bounds = Bounds(tally, settings.slack)
        self.writing = True
        """Cleared when the time is up: writers stop writing, flush and close."""
        self.reading_until: float | None = None
        """Set once the writers are done: the reader stops when it has every acknowledged message,
        or at this time."""

    def driver(self) -> yta.Driver:
        # discovery=False: the driver stays on the proxy. Short keepalives notice a black-holed or
        # stalled connection within seconds (the local server accepts frequent pings).
        return yta.Driver(
            self.endpoint, "/local", discovery=False,
            keepalive_interval=self.s.keepalive, keepalive_timeout=self.s.keepalive,
        )

    async def write(self, driver: yta.Driver, index: int) -> None:
        s, tally, bounds = self.s, self.tally, self.bounds
        producer = f"soak-writer-{index}"
        number = 0
        pause = s.batch / s.rate
        writer: yta.TopicWriter | None = None
        last_flush = next_write = time.monotonic()
        try:
            while self.writing:
                if writer is None:
                    writer = driver.topic.writer(
                        TOPIC, producer_id=producer, partition_id=index % s.partitions, init_timeout=s.init_timeout,
                        max_buffer_messages=max(10 * s.batch, int(s.rate * 10)), buffer_wait_timeout=s.call_timeout,
                    )
                batch = [f"{producer}:{number + k}".encode() for k in range(s.batch)]
                try:
                    futures = await bounds.call("write", s.call_timeout, writer.write_with_ack_future([*batch]))
                except yta.BufferFullTimeoutError:
                    tally.buffer_full += 1  # nothing of it was accepted: the same batch again
                    continue
                except Hang:
                    number += s.batch  # it may or may not have been accepted: never reuse its payloads
                    continue
                except yta.YdbTopicError as exc:
                    writer = await self._writer_gave_up(writer, producer, exc)
                    continue
                number += s.batch
                tally.accepted += len(batch)
                for payload, future in zip(batch, futures, strict=True):
                    future.add_done_callback(functools.partial(self._on_ack, payload))
                if time.monotonic() - last_flush >= 2:
                    last_flush = time.monotonic()
                    with contextlib.suppress(yta.OperationTimeoutError, Hang, yta.YdbTopicError):
                        await bounds.call("flush", 1.0, writer.flush(timeout=1.0))
                # Keep the rate: time lost in a slow call is made up (the buffer bounds the burst).
                next_write = max(next_write + pause, time.monotonic() - 1.0)
                await asyncio.sleep(next_write - time.monotonic())
            if writer is not None:
                try:
                    await bounds.call("final flush", s.drain_timeout, writer.flush(timeout=s.drain_timeout))
                except (Hang, yta.OperationTimeoutError):
                    pass  # a hang is recorded; what stays unacknowledged shows in the report
                except yta.YdbTopicError as exc:
                    writer = await self._writer_gave_up(writer, producer, exc)
        finally:
            if writer is not None:
                await self._retire(writer)

    async def _writer_gave_up(
        self, writer: yta.TopicWriter, producer: str, exc: BaseException
    ) -> yta.TopicWriter | None:
        if writer.failure is None:
            raise exc  # a mistake of this script, not a give-up
        self.tally.give_ups.append(f"writer {producer}: {exc!r}")
        await self._retire(writer)
        return None  # a new writer with the same producer id carries on

    async def _retire(self, owner: yta.TopicWriter | yta.TopicReader) -> None:
        """Count its reconnects and close it within the bound (a failure was counted already)."""
        self.tally.reconnects += owner.reconnects
        with contextlib.suppress(Exception):
            await self.bounds.call("close", self.s.call_timeout, owner.close(timeout=self.s.call_timeout))

    def _on_ack(self, payload: bytes, future: asyncio.Future[yta.WriteResult]) -> None:
        if future.cancelled():
            self.tally.failed_messages["cancelled"] += 1
        elif future.exception() is not None:
            self.tally.failed_messages[type(future.exception()).__name__] += 1
        else:
            self.tally.acked.add(payload)

    async def read(self, driver: yta.Driver) -> None:
        s, tally, bounds = self.s, self.tally, self.bounds
        reader: yta.TopicReader | None = None
        try:
            while not self._read_everything():
                if reader is None:
                    reader = driver.topic.reader(TOPIC, consumer=CONSUMER, init_timeout=s.init_timeout)
                try:
                    batch = await bounds.call(
                        "receive_batch", s.call_timeout, reader.receive_batch(timeout=s.call_timeout)
                    )
                except (yta.OperationTimeoutError, Hang):
                    continue
                except yta.YdbTopicError as exc:
                    if reader.failure is None:
                        raise
                    tally.give_ups.append(f"reader: {exc!r}")
                    await self._retire(reader)
                    reader = None
                    continue
                payloads = [m.data for m in batch]
                for payload in payloads:
                    if payload in tally.committed:
                        tally.read_after_commit += 1
                    tally.delivered[payload] += 1
                try:
                    await bounds.call(
                        "commit_with_ack", s.call_timeout, reader.commit_with_ack(batch, timeout=s.call_timeout)
                    )
                except (yta.PartitionSessionClosedError, yta.OperationTimeoutError, Hang):
                    continue  # not known to be committed: it may come again
                tally.committed.update(payloads)
        finally:
            if reader is not None:
                await self._retire(reader)

    def _read_everything(self) -> bool:
        if self.reading_until is None:
            return False
        return time.monotonic() > self.reading_until or self.tally.acked <= self.tally.delivered.keys()

    async def describe(self, driver: yta.Driver) -> None:
        """A unary call now and then, through the same faults."""
        while self.writing:
            try:
                await self.bounds.call("describe_topic", 2.0, driver.topic.describe_topic(TOPIC, timeout=2.0))
                self.tally.describes_ok += 1
            except (yta.YdbTopicError, Hang) as exc:
                self.tally.describes_failed[type(exc).__name__] += 1
            await asyncio.sleep(2)


# --- a run ---------------------------------------------------------------------------------------


def fault_durations(s: Settings) -> dict[str, tuple[float, float]]:
    every = {
        "reset": (0.0, 0.0),
        "stall": (s.init_timeout + 1, max(s.init_timeout + 1, min(3 * s.init_timeout, s.max_outage))),
        "blackhole": (s.init_timeout, max(s.init_timeout, min(3 * s.init_timeout, s.max_outage))),
        "lost_replies": (s.init_timeout, max(s.init_timeout, min(3 * s.init_timeout, s.max_outage))),
        "outage": (min(1.0, s.max_outage), s.max_outage),
        "restart": (0.0, min(3.0, s.max_outage)),
    }
    return {kind: every[kind] for kind in s.faults}


async def soak(s: Settings, data_dir: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    log = data_dir / "soak.log"
    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    sdk_log = logging.getLogger("ydb_topic_async")
    sdk_log.addHandler(handler)
    sdk_log.setLevel(logging.INFO)
    errors_logged = Counter[str]()

    class CountErrors(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR:
                errors_logged[record.getMessage()[:160]] += 1

    counter = CountErrors()
    sdk_log.addHandler(counter)

    tally = Tally()
    server = ServerProcess(data_dir / "server", free_port(), data_dir / "server.log")
    await server.start()
    proxy = FlakyProxy("127.0.0.1", server.port)
    await proxy.start()
    custom = {"restart": server.restart} if "restart" in s.faults else {}
    faults = RandomFaults(proxy, fault_durations(s), gap=s.gap, custom=custom, seed=s.seed)
    started = time.monotonic()
    try:
        async with yta.Driver(f"grpc://127.0.0.1:{server.port}", "/local", discovery=False) as admin:
            await admin.topic.create_topic(TOPIC, min_active_partitions=s.partitions, consumers=[CONSUMER])
        work = Workload(s, proxy.endpoint, tally)
        async with work.driver() as driver:
            tasks = [asyncio.create_task(work.write(driver, i)) for i in range(s.writers)]
            reader = asyncio.create_task(work.read(driver))
            describer = asyncio.create_task(work.describe(driver))
            injector = asyncio.create_task(faults.run(until=started + s.duration))

            async def report_progress() -> None:
                while True:
                    await asyncio.sleep(30)
                    progress(
                        f"{time.monotonic() - started:6.0f}s  faults {dict(faults.counts)}  written "
                        f"{len(tally.acked)}  read {len(tally.delivered)}  hangs {len(tally.hangs)}"
                        f"  give-ups {len(tally.give_ups)}"
                    )

            reporter = asyncio.create_task(report_progress())
            try:
                await injector  # returns after the duration, with the network working
                work.writing = False
                await asyncio.gather(*tasks, describer)
                work.reading_until = time.monotonic() + s.drain_timeout
                await reader
            finally:
                reporter.cancel()
                for task in (*tasks, reader, describer, injector):
                    task.cancel()
                await asyncio.gather(*tasks, reader, describer, injector, reporter, return_exceptions=True)
    finally:
        elapsed = time.monotonic() - started
        await proxy.close()
        await server.stop()
        sdk_log.removeHandler(handler)
        sdk_log.removeHandler(counter)
        handler.close()

    # What the server stored, read from its data directory.
    stored: Counter[bytes] = Counter()
    seq_nos: Counter[tuple[str, int]] = Counter()
    async with LocalTopicServer(data_dir=server.data_dir) as check:
        for partition in check.storage.topic(TOPIC).partitions:
            for message in partition.messages:
                stored[message.data] += 1
                seq_nos[(message.producer_id, message.seq_no)] += 1
    delivered = tally.delivered
    return {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "seconds": round(elapsed, 1),
        "settings": {**asdict(s), "faults": list(s.faults), "gap": list(s.gap)},
        "faults": dict(sorted(faults.counts.items())),
        "fault_seconds": {
            kind: round(sum(f.seconds for f in faults.injected if f.kind == kind), 1) for kind in sorted(faults.counts)
        },
        "fault_longest": {
            kind: round(max(f.seconds for f in faults.injected if f.kind == kind), 1) for kind in sorted(faults.counts)
        },
        "server_restarts": server.restarts,
        "accepted": tally.accepted,
        "written": len(tally.acked),
        "not_acknowledged": dict(tally.failed_messages),
        "stored": len(stored),
        "stored_twice": sum(n - 1 for n in stored.values() if n > 1),
        "seq_nos_stored_twice": sum(n - 1 for n in seq_nos.values() if n > 1),
        "lost": len(tally.acked - stored.keys()),
        "read": len(delivered),
        "read_twice": sum(n - 1 for n in delivered.values() if n > 1),
        "read_again_after_commit": tally.read_after_commit,
        "unread": len(stored.keys() - delivered.keys()),
        "hangs": len(tally.hangs),
        "hang_calls": tally.hangs,
        "give_ups": len(tally.give_ups),
        "give_up_errors": tally.give_ups,
        "reconnects": tally.reconnects,
        "buffer_full_waits": tally.buffer_full,
        "describe_topic": {"ok": tally.describes_ok, **tally.describes_failed},
        "calls": dict(tally.calls),
        "errors_logged": sum(errors_logged.values()),
        "error_messages": dict(errors_logged),
    }


FAILURES = ("lost", "stored_twice", "seq_nos_stored_twice", "read_again_after_commit", "unread", "hangs", "give_ups")


def summary(report: dict[str, Any]) -> str:
    faults = ", ".join(
        f"{kind} {n} ({report['fault_seconds'][kind]}s, longest {report['fault_longest'][kind]}s)"
        for kind, n in report["faults"].items()
    )
    rows = [
        ("duration", f"{report['seconds']}s"),
        ("faults", faults or "none"),
        ("written (acknowledged)", report["written"]),
        ("stored", report["stored"]),
        ("stored twice", report["stored_twice"]),
        ("lost", report["lost"]),
        ("read", report["read"]),
        ("read twice (at-least-once)", report["read_twice"]),
        ("read again after commit", report["read_again_after_commit"]),
        ("unread", report["unread"]),
        ("hangs", report["hangs"]),
        ("give-ups", report["give_ups"]),
        ("reconnects", report["reconnects"]),
        ("ERRORs logged", report["errors_logged"]),
    ]
    lines = [f"{name:>28}  {value}" for name, value in rows]
    lines += [f"{'hang':>28}  {call}" for call in report["hang_calls"]]
    lines += [f"{'give-up':>28}  {error}" for error in report["give_up_errors"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600, help="seconds of faults (default: 600)")
    parser.add_argument("--writers", type=int, default=4, help="writers, each with its own producer id (default: 4)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default: 4)")
    parser.add_argument("--rate", type=float, default=50, help="messages per second per writer (default: 50)")
    parser.add_argument("--batch", type=int, default=5, help="messages per write call (default: 5)")
    parser.add_argument("--init-timeout", type=float, default=5, help="writers' and reader's init_timeout (default: 5)")
    parser.add_argument("--keepalive", type=float, default=2,
                        help="the driver's keepalive interval and timeout (default: 2)")
    parser.add_argument("--call-timeout", type=float, default=5,
                        help="timeout of each write, flush, receive and commit call (default: 5)")
    parser.add_argument("--slack", type=float, default=5,
                        help="seconds a call may overrun its timeout before it counts as a hang (default: 5)")
    parser.add_argument("--drain-timeout", type=float, default=120,
                        help="seconds to deliver everything once the faults stop (default: 120)")
    parser.add_argument("--faults", default=",".join(FAULT_KINDS),
                        help=f"fault kinds, comma-separated (default: {','.join(FAULT_KINDS)})")
    parser.add_argument("--max-outage", type=float, default=30, help="longest refused-connection outage (default: 30)")
    parser.add_argument("--gap", type=float, nargs=2, default=(5.0, 20.0), metavar=("MIN", "MAX"),
                        help="seconds of working network between faults (default: 5 20)")
    parser.add_argument("--seed", type=int, default=None, help="random seed, to repeat a run")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="where the server keeps its data and the logs go (default: a temporary directory)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report to this file as JSON")
    args = parser.parse_args(argv)
    kinds = tuple(kind for kind in args.faults.split(",") if kind)
    unknown = set(kinds) - set(FAULT_KINDS)
    if unknown or not kinds:
        parser.error(f"--faults takes some of {','.join(FAULT_KINDS)}")
    settings = Settings(
        duration=args.duration, writers=args.writers, partitions=args.partitions, rate=args.rate, batch=args.batch,
        init_timeout=args.init_timeout, keepalive=args.keepalive, call_timeout=args.call_timeout, slack=args.slack,
        drain_timeout=args.drain_timeout, faults=kinds, max_outage=args.max_outage, gap=tuple(args.gap),
        seed=args.seed,
    )
    temporary = args.data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="ydb-topic-soak-")) if temporary else args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"soak: {settings.duration:.0f}s of faults ({','.join(kinds)}); logs in {data_dir}", flush=True)
    report = asyncio.run(soak(settings, data_dir, lambda line: print(line, flush=True)))
    print(summary(report), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    failed = [name for name in FAILURES if report[name]]
    if failed:
        print(f"soak FAILED: {', '.join(failed)} (logs in {data_dir})", flush=True)
        return 1
    if temporary:
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
