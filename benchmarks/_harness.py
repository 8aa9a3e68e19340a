"""What every benchmark here shares: the local server in its own process, CPU accounting, JSON.

The server runs in a child process (``ServerProcess``), so the benchmark process's
``time.process_time`` is the client's CPU alone, and the child's own CPU time (every thread of
it, gRPC's included) tells how busy the server was during a measurement: a server near one full
core (utilisation ~1.0) is the ceiling of the message rate, and then the rate says more about
the server than about the client. ``measure`` records both beside the wall time.

Results are written as JSON (``--json``), one file per run: ``charts.py`` draws from them.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no gRPC info lines (GOAWAY at shutdown) in the tables


def _serve(conn: Connection, options: dict[str, Any], profile: str | None) -> None:
    """Child process: the local topic server (a cluster with ``nodes``), answering ``stats`` over
    the pipe until it closes."""
    from ydb_topic_async.testing import LocalTopicCluster, LocalTopicServer

    async def main() -> None:
        nodes = options.pop("nodes", None)
        local = LocalTopicServer(**options) if nodes is None else LocalTopicCluster(nodes, **options)
        async with local as server:
            conn.send((server.endpoint, server.database))
            done = asyncio.Event()

            def on_message() -> None:
                try:
                    request = conn.recv()
                except (EOFError, OSError):  # the parent exited or closed the pipe
                    done.set()
                    return
                if isinstance(request, tuple) and request[0] == "advance_time":
                    server.advance_time(request[1])  # retention applies at once
                    conn.send(None)
                elif request == "memory":
                    conn.send(malloc_stats())
                else:
                    conn.send((time.process_time(), server.stats.snapshot()))

            asyncio.get_running_loop().add_reader(conn.fileno(), on_message)
            await done.wait()

    if profile is None:
        asyncio.run(main())
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.runcall(asyncio.run, main())
    profiler.dump_stats(profile)


class ServerProcess:
    """The local topic server in a spawned child process; ``cpu_seconds()`` is its CPU time so far.

    ``options`` go to ``LocalTopicServer`` (``LocalTopicCluster`` with ``nodes=N``); with
    ``profile`` the child writes a cProfile there at exit.
    """

    def __init__(self, profile: str | None = None, **options: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, options, profile), daemon=True)
        self._process.start()
        child.close()
        self.endpoint, self.database = self._conn.recv()

    def sample(self) -> tuple[float, dict[str, int]]:
        """(CPU seconds of the server process so far, its request counters)."""
        self._conn.send("stats")
        cpu, stats = self._conn.recv()
        return float(cpu), dict(stats)

    def cpu_seconds(self) -> float:
        return self.sample()[0]

    @property
    def pid(self) -> int:
        """The server process's id (its memory: ``proc_memory(server.pid)``)."""
        pid = self._process.pid
        assert pid is not None
        return pid

    def advance_time(self, seconds: float) -> None:
        """Move the server's clock forward (``LocalTopicServer.advance_time``: retention applies at once)."""
        self._conn.send(("advance_time", seconds))
        self._conn.recv()

    def malloc_stats(self) -> dict[str, int]:
        """The server process's ``malloc_stats()`` (glibc's view of its heap)."""
        self._conn.send("memory")
        stats: dict[str, int] = self._conn.recv()
        return stats

    def close(self) -> None:
        self._conn.close()
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=5)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Figure:
    """One measurement: who, what, how fast, at what CPU cost on either side."""

    benchmark: str
    client: str
    """``ours``, ``official`` or ``floor``."""
    label: str
    messages: int
    size: int
    seconds: float
    client_cpu_seconds: float
    server_cpu_seconds: float | None = None
    mode: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def client_us_per_message(self) -> float:
        return self.client_cpu_seconds / self.messages * 1e6 if self.messages else 0.0

    @property
    def server_us_per_message(self) -> float | None:
        if self.server_cpu_seconds is None or not self.messages:
            return None
        return self.server_cpu_seconds / self.messages * 1e6

    @property
    def server_utilisation(self) -> float | None:
        """Server CPU seconds per wall second: near 1.0, the server (one core of Python) was the ceiling."""
        if self.server_cpu_seconds is None or not self.seconds:
            return None
        return self.server_cpu_seconds / self.seconds

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            rate=self.rate,
            client_us_per_message=self.client_us_per_message,
            server_us_per_message=self.server_us_per_message,
            server_utilisation=self.server_utilisation,
        )
        return out


async def measure(
    server: ServerProcess | None,
    run: Callable[[], Awaitable[Any]],
    **figure: Any,
) -> Figure:
    """Run ``run()`` once; the client's CPU, the wall time and (with ``server``) the server's CPU
    and what it served meanwhile (``extra["server"]``: requests and messages, see ``ServerStats``).
    A dict returned by ``run`` goes to ``extra`` too."""
    before = server.sample() if server is not None else None
    wall, cpu = time.perf_counter(), time.process_time()
    extra = await run()
    seconds, client_cpu = time.perf_counter() - wall, time.process_time() - cpu
    result = Figure(seconds=seconds, client_cpu_seconds=client_cpu, **figure)
    if server is not None and before is not None:
        after = server.sample()
        result.server_cpu_seconds = after[0] - before[0]
        result.extra["server"] = {key: after[1][key] - before[1][key] for key in after[1]}
    if isinstance(extra, dict):
        result.extra.update(extra)
    return result


def messages_per_write_request(figure: Figure) -> float | None:
    """How the measured writer batched, from what the server received during the measurement."""
    served = figure.extra.get("server") or {}
    requests = served.get("write_requests")
    return served["messages_received"] / requests if requests else None


def best(figures: list[Figure], key: Callable[[Figure], float] = lambda f: f.client_cpu_seconds) -> Figure:
    """The round with the least client CPU (the least disturbed by other work on the machine)."""
    return min(figures, key=key)


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions: dict[str, str] = {}
    for name in ("grpcio", "protobuf", "ydb", "zstandard"):
        try:
            from importlib.metadata import version

            versions[name] = version(name)
        except Exception:
            versions[name] = "-"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
        "load_average_1m": load,
        **versions,
    }


def describe_machine(info: dict[str, Any]) -> str:
    load = info.get("load_average_1m")
    return (
        f"{info['cpu']}, {info['cpus']} CPUs, Python {info['python']}, grpcio {info['grpcio']}, "
        f"protobuf {info['protobuf']}, ydb {info['ydb']}"
        + (f", load average {load:.1f} at start" if load is not None else "")
    )


def write_json(path: str | None, benchmark: str, args: Any, figures: list[Figure], **more: Any) -> None:
    """Write the figures (and how they were made) to ``path``, when given."""
    if not path:
        return
    out = {
        "benchmark": benchmark,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv[1:],
        "arguments": vars(args) if args is not None else {},
        "machine": machine(),
        "figures": [f.as_dict() for f in figures],
        **more,
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"figures written to {target}")


def fmt_server(figure: Figure) -> str:
    util = figure.server_utilisation
    per = figure.server_us_per_message
    if util is None or per is None:
        return "-"
    return f"{util:.2f} ({per:.2f} µs/msg)"


def table(figures: list[Figure], reference: dict[str, Figure] | None = None) -> str:
    """A markdown table: rate, client CPU per message, ratio to the floor, the server's load."""
    lines = [
        "| client | mode | messages/s | client CPU µs/msg | x floor | server CPU/wall (µs/msg) |",
        "|---|---|---:|---:|---:|---|",
    ]
    for f in figures:
        floor = (reference or {}).get(f.mode)
        ratio = f"{f.client_us_per_message / floor.client_us_per_message:.2f}" if floor else "-"
        lines.append(
            f"| {f.label} | {f.mode or '-'} | {f.rate:,.0f} | {f.client_us_per_message:.2f} | {ratio} | "
            f"{fmt_server(f)} |"
        )
    return "\n".join(lines)


@contextmanager
def server_or_endpoint(endpoint: str | None, database: str, **options: Any) -> Iterator[ServerProcess | None]:
    """A fresh local server process, or None when the benchmark targets an existing ``endpoint``."""
    if endpoint:
        yield None
        return
    with ServerProcess(**options) as server:
        yield server


def rss_bytes() -> int:
    """This process's resident set size now (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def proc_memory(pid: int | str = "self") -> dict[str, int]:
    """A process's memory from Linux ``/proc`` in bytes (empty elsewhere): ``rss`` (VmRSS), ``peak``
    (VmHWM, the resident high-water mark since start or since ``reset_peak_rss``; ``ru_maxrss`` is the
    same figure) and, from ``smaps_rollup``, ``anonymous`` (heap and mmapped memory, not files)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out["rss" if key == "VmRSS" else "peak"] = int(value.split()[0]) * 1024
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == "Anonymous":
                    out["anonymous"] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def reset_peak_rss(pid: int | str = "self") -> bool:
    """Start a process's resident high-water mark (VmHWM) again from its RSS now (Linux: ``5`` to
    ``/proc/PID/clear_refs``); False where that is not possible."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")
    ]


def malloc_stats() -> dict[str, int]:
    """glibc's ``mallinfo2()`` of this process, in bytes (empty without glibc 2.33+), summed over
    every malloc arena (the main one and those of other threads):

    - ``heap``: memory the arenas took from the kernel (``arena``), of which ``in_use`` is allocated
      (``uordblks``) and ``free_held`` free but kept by the allocator (``fordblks``: what was freed
      and not returned; the part of it that was ever touched counts in the RSS);
    - ``mmapped``: large blocks served directly by ``mmap`` (``hblkhd``), returned when freed.
    """
    try:
        libc = ctypes.CDLL(None)
        call = libc.mallinfo2
    except (OSError, AttributeError):
        return {}
    call.restype = _MallInfo2
    info = call()
    return {"heap": info.arena, "in_use": info.uordblks, "free_held": info.fordblks, "mmapped": info.hblkhd}


async def measure_sizes(
    benchmark: str,
    args: Any,
    heading: Callable[[int], str],
    run_size: Callable[..., Awaitable[list[Figure]]],
    report: Callable[[list[Figure]], None],
) -> None:
    """The main loop of a benchmark by message size: for each of ``args.sizes``, print
    ``heading(size)``, measure with ``run_size(server, endpoint, database, args, size)`` and
    ``report`` its figures; then write them all to ``args.json`` (when given)."""
    print(f"machine: {describe_machine(machine())}")
    figures: list[Figure] = []
    with server_or_endpoint(args.endpoint, args.database) as server:
        endpoint = server.endpoint if server else args.endpoint
        database = server.database if server else args.database
        for size in args.sizes:
            print(f"\n{heading(size)}")
            done = await run_size(server, endpoint, database, args, size)
            report(done)
            figures.extend(done)
    write_json(args.json, benchmark, args, figures)
