"""Large compressed messages: event-loop lag, reader memory, CPU per MB (ours and the official reader).

    python benchmarks/large.py --messages 12 --size-mib 10 --json results/large.json

Messages of ``--size-mib`` MiB of compressible text are written with this SDK's writer and the
zstd codec, then read back under a consumer with ``buffer_size_bytes=--buffer-mib``, each reader
in a fresh child process so that memory figures start from the same place:

- the floor, a bare ``grpc.aio`` client (``floor.floor_read``): protobuf parses each response,
  each payload is copied out (``.data``) and decoded in a worker thread;
- this SDK and the official reader, both given the same decoder (``zstd_decode``:
  ``zstandard``'s one-shot ``decompress``), which a reader must hand ``bytes``;
- this SDK with its built-in zstd decoder (the same one-shot ``decompress``), which reads a large
  payload where it arrived, with no copy (see ``reader/parsing.py``).

Reported per phase:

- event-loop lag: a ticker task asks to wake every millisecond; the lag is how late it woke
  (max and p99). Long lags mean CPU work (compression, decompression, copying) ran on the loop's
  thread, or the loop's thread was starved by other threads and processes;
- client CPU per MB of decoded payload, and the wall time;
- page faults per MiB (minor: memory the process touches for the first time, which the kernel
  must zero; a large share of the CPU of moving large payloads). They depend on the allocator's
  state as much as on the copies a reader makes: glibc takes each allocation above its mmap
  threshold (128 KiB at first) fresh from the kernel, and raises the threshold to the size of
  the largest such block freed so far. Until some block of 10 MiB or more was freed, each
  decoded payload costs 2560 page faults; whichever process happens to free one early pays
  that less often. ``--warm-allocator`` frees a 31 MiB block in every process before it is
  measured, so that all start from the same allocator state;
- reader RSS growth: the peak resident set size during the read minus the size before the reader
  was created (sampled every 5 ms), to compare with ``buffer_size_bytes``;
- the server's CPU seconds per wall second, as in the other benchmarks.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import random
import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Figure, ServerProcess, best, describe_machine, machine, rss_bytes, write_json

MIB = 1024 * 1024


class LagTicker:
    """Measures how late a task that sleeps ``interval`` seconds wakes up, while something else runs."""

    def __init__(self, interval: float = 0.001) -> None:
        self.interval = interval
        self.lags: list[float] = []
        self.peak_rss = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_rss = 0.0
        while True:
            before = loop.time()
            await asyncio.sleep(self.interval)
            now = loop.time()
            self.lags.append(max(0.0, now - before - self.interval))
            if now >= next_rss:
                self.peak_rss = max(self.peak_rss, rss_bytes())
                next_rss = now + 0.005

    def __enter__(self) -> LagTicker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    def summary(self) -> dict[str, float]:
        lags = sorted(self.lags) or [0.0]
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
        return {"max_lag_ms": lags[-1] * 1000, "p99_lag_ms": p99 * 1000, "ticks": len(self.lags)}


def zstd_decode(data: bytes) -> bytes:
    """One-shot zstd decompression with a decompressor of its own: both readers decode in worker
    threads, and a ``ZstdDecompressor`` must not be used by two threads at once."""
    import zstandard

    return zstandard.ZstdDecompressor().decompress(data)


def payload(size: int, seed: int) -> bytes:
    """Compressible text (zstd about 3x): words drawn from a small vocabulary."""
    rng = random.Random(seed)
    words = [bytes(rng.choices(b"abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(4096)]
    out = bytearray()
    while len(out) < size:
        out += b" ".join(rng.choices(words, k=4096)) + b"\n"
    return bytes(out[:size])


@contextmanager
def _timed() -> Iterator[dict[str, float]]:
    box: dict[str, float] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    yield box
    box["seconds"] = time.perf_counter() - wall
    box["cpu_seconds"] = time.process_time() - cpu
    box["page_faults"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


async def _write(endpoint: str, database: str, topic: str, messages: int, size: int) -> dict[str, Any]:
    import ydb_topic_async as yta

    bodies = [payload(size, seed) for seed in range(min(messages, 4))]
    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.create_topic(topic, consumers=["floor", "ours", "builtin", "official"])
        with LagTicker() as ticker, _timed() as timed:
            async with driver.topic.writer(topic, producer_id="large", codec=yta.Codec.ZSTD) as writer:
                for i in range(messages):
                    await writer.write(bodies[i % len(bodies)])
    return {**timed, **ticker.summary(), "bytes": messages * size}


async def _read_ours(
    endpoint: str, database: str, topic: str, messages: int, buffer: int, builtin: bool = False
) -> dict[str, Any]:
    import ydb_topic_async as yta

    decoders = {} if builtin else {yta.Codec.ZSTD: zstd_decode}
    before = rss_bytes()
    async with yta.Driver(endpoint, database, discovery=False) as driver:
        with LagTicker() as ticker, _timed() as timed:
            got = decoded = 0
            consumer = "builtin" if builtin else "ours"
            async with driver.topic.reader(
                topic, consumer=consumer, buffer_size_bytes=buffer, decoders=decoders
            ) as reader:
                while got < messages:
                    batch = await reader.receive_batch()
                    got += len(batch)
                    decoded += sum(len(m.data) for m in batch)
                    reader.commit(batch)
    return {**timed, **ticker.summary(), "bytes": decoded, "rss_growth": ticker.peak_rss - before}


async def _read_official(endpoint: str, database: str, topic: str, messages: int, buffer: int) -> dict[str, Any]:
    import ydb
    import ydb.aio

    decoder = zstd_decode
    before = rss_bytes()
    driver = ydb.aio.Driver(endpoint=endpoint, database=database)
    await driver.wait(timeout=10)
    try:
        with LagTicker() as ticker, _timed() as timed:
            got = decoded = 0
            reader = driver.topic_client.reader(
                topic, consumer="official", buffer_size_bytes=buffer, decoders={ydb.TopicCodec.ZSTD: decoder}
            )
            try:
                while got < messages:
                    batch = await reader.receive_batch()
                    got += len(batch.messages)
                    decoded += sum(len(m.data) for m in batch.messages)
                    reader.commit(batch)
            finally:
                await reader.close()
    finally:
        await driver.stop()
    return {**timed, **ticker.summary(), "bytes": decoded, "rss_growth": ticker.peak_rss - before}


async def _read_floor(endpoint: str, database: str, topic: str, messages: int, buffer: int) -> dict[str, Any]:
    from floor import floor_read

    before = rss_bytes()
    with LagTicker() as ticker, _timed() as timed:
        result = await floor_read(endpoint, database, topic, "floor", messages, buffer, decode=zstd_decode)
    return {**timed, **ticker.summary(), "bytes": result["bytes_touched"], "rss_growth": ticker.peak_rss - before}


def _child(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...], warm_allocator: bool) -> None:
    if warm_allocator:
        # glibc serves a large allocation with fresh pages from the kernel (mmap) until a freed
        # block at least that large raises its threshold; freeing one 31 MiB block first moves
        # the threshold past every payload here, so that freed memory is reused.
        block = bytes(31 * MIB)
        del block
    conn.send(asyncio.run(fn(*args)))
    conn.close()


def in_child(fn: Callable[..., Any], *args: Any, warm_allocator: bool = False) -> dict[str, Any]:
    """Run ``fn(*args)`` (a coroutine function) in a fresh process; its result."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_child, args=(child, fn, args, warm_allocator))
    process.start()
    try:
        result: dict[str, Any] = parent.recv()
    finally:
        process.join(timeout=30)
    return result


def _figure(name: str, client: str, label: str, result: dict[str, Any], server_cpu: float, args: Any) -> Figure:
    extra = {k: v for k, v in result.items() if k not in ("seconds", "cpu_seconds")}
    extra["cpu_ms_per_mib"] = result["cpu_seconds"] * 1000 / (result["bytes"] / MIB)
    extra["page_faults_per_mib"] = result["page_faults"] / (result["bytes"] / MIB)
    return Figure(
        benchmark="large", client=client, label=label, messages=args.messages, size=args.size_mib * MIB,
        seconds=result["seconds"], client_cpu_seconds=result["cpu_seconds"], server_cpu_seconds=server_cpu,
        mode=name, extra=extra,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=12)
    parser.add_argument("--size-mib", type=int, default=10)
    parser.add_argument("--buffer-mib", type=int, default=32, help="the readers' buffer_size_bytes, in MiB")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every phase; the best is shown")
    parser.add_argument(
        "--warm-allocator", action="store_true",
        help="free one 31 MiB block in each process before it is measured (see the docstring)",
    )
    parser.add_argument("--json", help="write the figures to this JSON file")
    args = parser.parse_args()
    import ydb

    print(f"machine: {describe_machine(machine())}")
    figures = []
    with ServerProcess() as server:
        endpoint, database = server.endpoint, server.database
        for round_ in range(args.rounds):
            # A topic per round, each reader under a consumer of its own; readers in a new order
            # each round, so that none always runs first (or right after the writer).
            topic = f"large-{round_}"
            readers: list[tuple[str, str, Callable[..., Any], tuple[Any, ...]]] = [
                ("floor", "bare grpc.aio", _read_floor, ()),
                ("ours", "ydb-topic-async", _read_ours, ()),
                ("builtin", "ydb-topic-async, built-in zstd", _read_ours, (True,)),
                ("official", f"ydb {ydb.__version__} (official)", _read_official, ()),
            ]
            readers = readers[round_ % len(readers) :] + readers[: round_ % len(readers)]
            phases = [("write zstd", "ours", "ydb-topic-async", _write, (args.size_mib * MIB,))]
            phases += [
                ("read zstd", client, label, fn, (args.buffer_mib * MIB, *more)) for client, label, fn, more in readers
            ]
            for name, client, label, fn, more in phases:
                cpu = server.cpu_seconds()
                result = in_child(
                    fn, endpoint, database, topic, args.messages, *more, warm_allocator=args.warm_allocator
                )
                figures.append(_figure(name, client, label, result, server.cpu_seconds() - cpu, args))
    # Per phase and client, the round that cost the least CPU (noise only ever adds).
    by_client: dict[tuple[str, str], list[Figure]] = {}
    for figure in figures:
        by_client.setdefault((figure.mode, figure.client), []).append(figure)
    figures = [best(group) for group in by_client.values()]
    print(
        f"\n{args.messages} messages x {args.size_mib} MiB, zstd, reader buffer {args.buffer_mib} MiB,"
        f" best of {args.rounds} rounds{', allocator warmed' if args.warm_allocator else ''}"
    )
    print(
        "| phase | client | wall s | CPU ms/MiB | page faults/MiB | loop lag max / p99 ms | RSS growth MiB"
        " | server CPU/wall |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for f in figures:
        e = f.extra
        growth = f"{e['rss_growth'] / MIB:.0f}" if "rss_growth" in e else "-"
        print(
            f"| {f.mode} | {f.label} | {f.seconds:.2f} | {e['cpu_ms_per_mib']:.2f} | {e['page_faults_per_mib']:.0f} | "
            f"{e['max_lag_ms']:.1f} / {e['p99_lag_ms']:.1f} | {growth} | {f.server_utilisation or 0:.2f} |"
        )
    reads = {f.client: f.extra["cpu_ms_per_mib"] for f in figures if f.mode == "read zstd"}
    print(
        f"read CPU per MiB against the official reader: ours {reads['ours'] / reads['official']:.2f}x,"
        f" ours with the built-in decoder {reads['builtin'] / reads['official']:.2f}x,"
        f" the floor {reads['floor'] / reads['official']:.2f}x"
    )
    write_json(args.json, "large", args, figures)


if __name__ == "__main__":
    main()
