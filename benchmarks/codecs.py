"""What compression costs and what it saves: the codecs alone, and writers with RAW, GZIP and ``codec="auto"``.

    python benchmarks/codecs.py --messages 20000 --json results/codecs.json

Part one compresses payloads of several kinds (JSON events, log lines, random bytes) and sizes
with each built-in codec in one thread: the CPU it takes (MB of input per CPU second) and the
size it leaves (output / input). This is what ``codec="auto"`` weighs: it picks the smallest
output, but keeps RAW unless a codec saves at least ``batching.MIN_SAVING`` of the bytes.

Part two writes ``--messages`` messages of ``--size`` bytes of JSON events and of random bytes to
the local server (in a child process) with ``codec`` RAW, GZIP and ``"auto"``, and reports the
rate, the client's CPU per message and the bytes the topic stores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Figure, ServerProcess, describe_machine, machine, measure, write_json

import ydb_topic_async as yta
from ydb_topic_async import _codecs

KINDS = ("json", "logs", "random")


def payloads(kind: str, size: int, total: int, seed: int = 7) -> list[bytes]:
    """About ``total`` bytes of ``size``-byte payloads of one kind, cut from one stream of records."""
    rng = random.Random(seed)
    if kind == "random":
        return [os.urandom(size) for _ in range(max(1, total // size))]
    records = []
    for i in range(max(200, total // 100)):
        if kind == "json":
            records.append(json.dumps({
                "id": i, "user": f"user-{rng.randrange(10_000)}", "event": rng.choice(["click", "view", "buy"]),
                "ts": 1_700_000_000_000 + i, "price": round(rng.random() * 100, 2),
            }).encode())
        else:
            records.append(
                f"2024-05-01T12:{i % 60:02d}:{i % 60:02d}Z INFO service=api path=/v1/orders/{rng.randrange(99_999)}"
                f" status=200 latency_ms={rng.randrange(500)}".encode()
            )
    blob = b"\n".join(records)
    out, position = [], 0
    while sum(map(len, out)) < total:
        if position + size > len(blob):
            position = 0
        out.append(blob[position : position + size])
        position += size
    return out


def codec_costs(sizes: list[int], total: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    encoders: dict[str, Callable[[bytes], bytes]] = {
        "gzip": _codecs.BUILTIN_ENCODERS[yta.Codec.GZIP],
        "zstd": _codecs.BUILTIN_ENCODERS[yta.Codec.ZSTD],
    }
    for kind in KINDS:
        for size in sizes:
            batch = payloads(kind, size, total)
            raw = sum(map(len, batch))
            for name, encode in encoders.items():
                started = time.process_time()
                out = sum(len(encode(data)) for data in batch)
                cpu = time.process_time() - started
                rows.append(
                    {"kind": kind, "size": size, "codec": name, "ratio": out / raw, "mb_per_cpu_s": raw / cpu / 1e6}
                )
    return rows


async def write_all(
    endpoint: str, database: str, topic: str, batch: list[bytes], codec: int | str
) -> dict[str, object]:
    async with yta.Driver(endpoint, database) as driver:
        await driver.topic.create_topic(topic)
        async with driver.topic.writer(topic, producer_id="bench", codec=codec) as writer:  # type: ignore[arg-type]
            for start in range(0, len(batch), 1000):
                await writer.write(batch[start : start + 1000])
            await writer.flush()
            chosen = writer.selected_codec
        stored = (await driver.topic.describe_topic(topic, include_stats=True)).store_size_bytes
    return {"stored_bytes": stored, "codec_used": _codecs.codec_name(chosen) if chosen else None}


async def writers(messages: int, size: int) -> list[Figure]:
    figures = []
    with ServerProcess() as server:
        for kind in ("json", "random"):
            batch = payloads(kind, size, messages * size)[:messages]
            for label, codec in (("raw", yta.Codec.RAW), ("gzip", yta.Codec.GZIP), ("auto", "auto")):
                topic = f"{kind}-{label}"
                figure = await measure(
                    server, lambda t=topic, c=codec, b=batch: write_all(server.endpoint, server.database, t, b, c),
                    benchmark="codecs", client="ours", label=label, messages=len(batch), size=size, mode=kind,
                )
                figures.append(figure)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--sizes", default="200,4096,65536", help="payload sizes of part one")
    parser.add_argument("--total-mib", type=float, default=1.0, help="MiB compressed per kind and size in part one")
    parser.add_argument("--json")
    args = parser.parse_args()
    print(describe_machine(machine()))
    rows = codec_costs([int(s) for s in args.sizes.split(",")], int(args.total_mib * 1024 * 1024))
    print("\n| payload | size | codec | output/input | MB per CPU second |\n|---|---:|---|---:|---:|")
    for row in rows:
        print(f"| {row['kind']} | {row['size']} | {row['codec']} | {row['ratio']:.2f} | {row['mb_per_cpu_s']:.0f} |")
    figures = asyncio.run(writers(args.messages, args.size))
    print(f"\n{args.messages} messages of {args.size} bytes per writer\n")
    print("| payload | codec | codec used | messages/s | client CPU µs/msg | stored bytes |")
    print("|---|---|---|---:|---:|---:|")
    for f in figures:
        print(f"| {f.mode} | {f.label} | {f.extra['codec_used']} | {f.rate:,.0f} | {f.client_us_per_message:.1f} |"
              f" {f.extra['stored_bytes']:,} |")
    write_json(args.json, "codecs", args, figures, codec_costs=rows)


if __name__ == "__main__":
    main()
