"""Memory: peak RSS growth of readers, writers and the local server, against the settings users size containers from.

    python benchmarks/memory.py                       # every workload, every client
    python benchmarks/memory.py --quick               # CI-sized
    python benchmarks/memory.py --workloads read-zstd read-raw --clients ours floor
    python benchmarks/memory.py --account read-zstd   # where this SDK's peak goes (see below)
    python benchmarks/memory.py --pinned-allocator    # the same with glibc returning freed memory

Each client runs each workload in a fresh child process, so that peaks do not mix and every one
starts from the same allocator state (the default one: nothing is tuned); the local server runs
in a process of its own, so its memory is not counted. A child imports every package first, then
starts the resident high-water mark again (``/proc/self/clear_refs``) and notes its RSS: the
**peak growth** is the high-water mark at the end (VmHWM, what ``ru_maxrss`` reports) minus that
RSS, so it covers the event loop, the driver, the client and what the caller holds, and catches
peaks between samples. **After close** is what the process still held once the client closed.

Workloads (``--quick`` sizes in brackets):

- ``read-zstd``: 24 [10] messages of 10 MiB of compressible text (zstd, about 3.7 MiB each on the
  wire), ``buffer_size_bytes`` 32 MiB; the caller keeps the batch it has while it asks for the
  next one (``batch = await reader.receive_batch()``);
- ``read-raw``: 300 [64] MiB of 1 MiB raw messages, ``buffer_size_bytes`` 8 MiB, a slow consumer
  (``--slow-ms`` per message);
- ``write-zstd``: 24 [12] messages of 10 MiB as fast as the writer takes them, zstd, with
  ``max_buffer_bytes`` of 64 and 16 MiB [16]; each payload is a new ``bytes`` the caller drops
  once written;
- ``write-small``: 1 000 000 [200 000] messages of 100 B as fast as the writer takes them, the
  default limits (100 000 messages, 64 MiB);
- ``write-small-bytes``: the same with ``max_buffer_messages`` of 10 000 000, so that
  ``max_buffer_bytes`` (64 [16] MiB) is the limit that binds;
- ``server-small`` / ``server-large``: the local server's own RSS per stored message (1 000 000
  [200 000] x 100 B; 10 [5] x 10 MiB), and what it still holds once retention deleted them.

Clients: this SDK (``ours``; built-in zstd), the official ``ydb`` SDK (``official``; given
``zstandard`` one-shot encode/decode functions, and the same buffer limits) and the **floor**, a
bare ``grpc.aio`` client doing the same work: a reader that grants the same credit, reads a
response when its caller asks, decodes its payloads in a worker thread and returns the credit
once they are handed over, and a writer that keeps at most the same raw bytes unacknowledged,
encodes in a worker thread and holds only the encoded copies in flight.

The table gives the peak growth and its ratio to the setting (for ``write-small``, whose message
count binds before its bytes, to the payload bytes that count admits), and for this SDK the ratio
to ``setting + what the caller held`` at its peak: the largest decoded payload bytes the caller
referenced at once (the batch kept and the one just received), for a writer the payload being
built. The target is at most 1.25. The floor writer sends as gRPC's flow control allows and
buffers nothing ahead of it, so its figure is a lower bound rather than the same work.

``--pinned-allocator`` is a diagnosis: the clients run with glibc's mmap threshold fixed and a
single arena, so that freed memory is returned or reused at once; the peak is then close to what
was allocated at once, and its difference from a default run is memory the allocator kept.

``--account WORKLOAD`` runs this SDK alone on one workload (its first setting) with a probe thread
that samples every millisecond and records, at each new high of the RSS (``rss_peak``) and of the
memory allocated (``live_peak``: malloc's in-use plus mmapped bytes): ``tracemalloc`` (Python
allocations by site, grouped into components), glibc's ``mallinfo2`` (in use, free but held,
mmapped) and ``malloc_info`` (per arena: size and free bytes), and the client's state (its
buffer's charge and credit, the received responses that its buffer and the caller's batch keep
alive, decoded payloads waiting; the writer's raw and encoded copies). tracemalloc slows the run
and adds its own memory: accounting runs are not compared with the table's.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import os
import sys
import threading
import time
import tracemalloc
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    Figure,
    ServerProcess,
    describe_machine,
    machine,
    malloc_stats,
    proc_memory,
    reset_peak_rss,
    rss_bytes,
    write_json,
)

MIB = 1024 * 1024
CLIENTS = ("ours", "official", "floor")
LABELS = {"ours": "ydb-topic-async", "official": "ydb (official)", "floor": "floor (bare grpc.aio)"}


# --- workloads ----------------------------------------------------------------------------------


@dataclass
class Params:
    """What one child needs to run one workload with one client."""

    workload: str
    client: str
    endpoint: str = ""
    database: str = ""
    topic: str = ""
    consumer: str = ""
    messages: int = 0
    size: int = 0
    setting: int = 0
    """The limit measured against: ``buffer_size_bytes`` or ``max_buffer_bytes``."""
    max_messages: int | None = None
    codec: str = "raw"
    slow_s: float = 0.0
    account: bool = False


@dataclass
class Workload:
    name: str
    kind: str  # "read", "write" or "server"
    messages: int
    size: int
    settings: list[int] = field(default_factory=list)
    codec: str = "raw"
    max_messages: int | None = None
    description: str = ""


def workloads(quick: bool) -> dict[str, Workload]:
    return {
        "read-zstd": Workload(
            "read-zstd", "read", 10 if quick else 24, 10 * MIB, [32 * MIB], "zstd",
            description="reader, 10 MiB zstd, caller holds one batch while asking for the next",
        ),
        "read-raw": Workload(
            "read-raw", "read", 64 if quick else 300, MIB, [8 * MIB], "raw",
            description="reader, 1 MiB raw, slow consumer",
        ),
        "write-zstd": Workload(
            "write-zstd", "write", 12 if quick else 24, 10 * MIB, [16 * MIB] if quick else [64 * MIB, 16 * MIB], "zstd",
            description="writer, 10 MiB zstd at full speed",
        ),
        "write-small": Workload(
            "write-small", "write", 200_000 if quick else 1_000_000, 100, [64 * MIB], "raw", max_messages=100_000,
            description="writer, 100 B at full speed (default limits)",
        ),
        "write-small-bytes": Workload(
            "write-small-bytes", "write", 200_000 if quick else 1_000_000, 100, [16 * MIB] if quick else [64 * MIB],
            "raw", max_messages=10_000_000,
            description="writer, 100 B at full speed, bound by max_buffer_bytes (max_buffer_messages 10 000 000)",
        ),
        "server-small": Workload(
            "server-small", "server", 200_000 if quick else 1_000_000, 100,
            description="local server, 100 B messages stored, then deleted by retention",
        ),
        "server-large": Workload(
            "server-large", "server", 5 if quick else 10, 10 * MIB,
            description="local server, 10 MiB messages stored, then deleted by retention",
        ),
    }


def text_payload(size: int, seed: int) -> bytes:
    """Compressible text (zstd about 2.7x): as ``large.py`` writes."""
    from large import payload

    return payload(size, seed)


def zstd_encode(data: bytes) -> bytes:
    """One-shot zstd compression with a compressor of its own (the official writer encodes in
    several threads at once; a ``ZstdCompressor`` must not be shared between them)."""
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


class Payloads:
    """A new ``bytes`` per message, as a producer makes them: a numbered header and one of four
    bodies (one allocation each; the bodies are made before the measurement starts)."""

    def __init__(self, size: int, compressible: bool) -> None:
        if compressible:
            self.bodies = [memoryview(text_payload(size, seed))[16:] for seed in range(4)]
        else:
            self.bodies = [memoryview(bytes(range(256)) * (size // 256 + 1))[16:size]]

    def make(self, index: int) -> bytes:
        return b"%016d" % index + self.bodies[index % len(self.bodies)]


class Held:
    """The decoded payload bytes the caller references at once (the batch kept and the new one)."""

    def __init__(self) -> None:
        self.previous = 0
        self.peak = 0

    def arrived(self, nbytes: int) -> None:
        self.peak = max(self.peak, self.previous + nbytes)
        self.previous = nbytes


# --- readers ------------------------------------------------------------------------------------


async def _consume(p: Params, count: int) -> None:
    """What the caller does with a batch: nothing, or ``slow_s`` per message (a slow consumer)."""
    if p.slow_s:
        for _ in range(count):
            await asyncio.sleep(p.slow_s)


async def read_ours(p: Params, probe: Probe | None) -> dict[str, Any]:
    import ydb_topic_async as yta

    held = Held()
    async with (
        yta.Driver(p.endpoint, p.database, discovery=False) as driver,
        driver.topic.reader(p.topic, consumer=p.consumer, buffer_size_bytes=p.setting) as reader,
    ):
        if probe is not None:
            probe.state = lambda: reader_state(reader, batch)
        got = 0
        batch = None
        while got < p.messages:
            batch = await reader.receive_batch()  # the previous batch is still held meanwhile
            nbytes = sum(len(message.data) for message in batch)
            held.arrived(nbytes)
            got += len(batch)
            await _consume(p, len(batch))
            reader.commit(batch)
        if probe is not None:
            probe.state = None
    return {"held_peak": held.peak}


async def read_official(p: Params, probe: Probe | None) -> dict[str, Any]:
    import ydb
    import ydb.aio
    from large import zstd_decode

    held = Held()
    driver = ydb.aio.Driver(endpoint=p.endpoint, database=p.database)
    await driver.wait(timeout=10)
    try:
        reader = driver.topic_client.reader(
            p.topic, consumer=p.consumer, buffer_size_bytes=p.setting, decoders={ydb.TopicCodec.ZSTD: zstd_decode}
        )
        try:
            got = 0
            while got < p.messages:
                batch = await reader.receive_batch()
                held.arrived(sum(len(message.data) for message in batch.messages))
                got += len(batch.messages)
                await _consume(p, len(batch.messages))
                reader.commit(batch)
        finally:
            await reader.close()
    finally:
        await driver.stop()
    return {"held_peak": held.peak}


async def read_floor(p: Params, probe: Probe | None) -> dict[str, Any]:
    """One StreamRead: ``setting`` bytes of credit; a response is read when the caller asks for
    the next batch, its payloads copied out (``.data``) and, compressed, decoded in a worker
    thread; its credit goes back once they are handed over; each response's range is committed."""
    import grpc.aio
    from floor import _OPTIONS, Read, _open, _target

    held = Held()
    async with grpc.aio.insecure_channel(_target(p.endpoint), options=_OPTIONS) as channel:
        call = _open(channel, "StreamRead", Read, p.database)
        init = Read.FromClient()
        init.init_request.consumer = p.consumer
        init.init_request.topics_read_settings.add(path=p.topic)
        await call.write(init)
        await call.read()
        await call.write(Read.FromClient(read_request=Read.ReadRequest(bytes_size=p.setting)))
        got = 0
        batch: list[bytes] = []
        wanted: dict[int, int] = {}
        committed: dict[int, int] = {}
        try:
            while got < p.messages or any(committed.get(k, -1) < v for k, v in wanted.items()):
                response = await call.read()
                kind = response.WhichOneof("server_message")
                if kind == "start_partition_session_request":
                    answer = Read.FromClient()
                    answer.start_partition_session_response.partition_session_id = (
                        response.start_partition_session_request.partition_session.partition_session_id
                    )
                    await call.write(answer)
                elif kind == "commit_offset_response":
                    for part in response.commit_offset_response.partitions_committed_offsets:
                        committed[part.partition_session_id] = part.committed_offset
                elif kind == "read_response":
                    payloads, codecs, commit, credit = _floor_take(response.read_response, wanted)
                    del response  # the caller has the payloads now
                    if any(codec != 1 for codec in codecs):
                        payloads = await asyncio.to_thread(_floor_decode, payloads, codecs)
                    # The previous batch was held until this one arrived: what the SDKs' callers do.
                    batch = payloads
                    held.arrived(sum(map(len, batch)))
                    got += len(batch)
                    await call.write(Read.FromClient(read_request=Read.ReadRequest(bytes_size=credit)))
                    await _consume(p, len(batch))
                    await call.write(commit)
        finally:
            call.cancel()
    return {"held_peak": held.peak}


def _floor_decode(payloads: list[bytes], codecs: list[int]) -> list[bytes]:
    from large import zstd_decode

    return [zstd_decode(data) if codec != 1 else data for data, codec in zip(payloads, codecs, strict=True)]


def _floor_take(read: Any, wanted: dict[int, int]) -> tuple[list[bytes], list[int], Any, int]:
    """A ReadResponse's payloads (copied out), their codecs, the commit of its ranges, its credit."""
    from floor import Read

    commit = Read.FromClient()
    payloads: list[bytes] = []
    codecs: list[int] = []
    for part in read.partition_data:
        first = last = -1
        for server_batch in part.batches:
            for message in server_batch.message_data:
                payloads.append(message.data)
                codecs.append(server_batch.codec)
                last = message.offset
                first = last if first < 0 else first
        if first >= 0:
            commit.commit_offset_request.commit_offsets.add(
                partition_session_id=part.partition_session_id
            ).offsets.add(start=first, end=last + 1)
            wanted[part.partition_session_id] = last + 1
    return payloads, codecs, commit, read.bytes_size


# --- writers ------------------------------------------------------------------------------------


async def write_ours(p: Params, probe: Probe | None, payloads: Payloads) -> dict[str, Any]:
    import ydb_topic_async as yta

    codec = yta.Codec.ZSTD if p.codec == "zstd" else yta.Codec.RAW
    limits: dict[str, Any] = {"max_buffer_bytes": p.setting}
    if p.max_messages is not None:
        limits["max_buffer_messages"] = p.max_messages
    make = payloads.make
    async with (
        yta.Driver(p.endpoint, p.database, discovery=False) as driver,
        driver.topic.writer(p.topic, producer_id=p.consumer, codec=codec, **limits) as writer,
    ):
        if probe is not None:
            probe.state = lambda: writer_state(writer)
        write = writer.write
        for index in range(p.messages):
            await write(make(index))
        if probe is not None:
            probe.state = None
    return {"held_peak": p.size}


async def write_official(p: Params, probe: Probe | None, payloads: Payloads) -> dict[str, Any]:
    import ydb
    import ydb.aio

    codec = ydb.TopicCodec.ZSTD if p.codec == "zstd" else ydb.TopicCodec.RAW
    make = payloads.make
    driver = ydb.aio.Driver(endpoint=p.endpoint, database=p.database)
    try:
        await driver.wait(timeout=10)
        async with driver.topic_client.writer(
            f"{p.database}/{p.topic}", producer_id=p.consumer, codec=codec, encoders={ydb.TopicCodec.ZSTD: zstd_encode},
            max_buffer_size_bytes=p.setting, max_buffer_messages=p.max_messages,
        ) as writer:
            write = writer.write
            for index in range(p.messages):
                await write(make(index))
    finally:
        await driver.stop()
    return {"held_peak": p.size}


async def write_floor(p: Params, probe: Probe | None, payloads: Payloads) -> dict[str, Any]:
    """One StreamWrite: at most ``setting`` raw bytes (and ``max_messages`` messages) unacknowledged;
    messages are encoded in a worker thread, packed up to 4 MiB or 1000 to a request (as this SDK's
    writer packs them); each payload is kept as sent (its encoded copy only) until acknowledged,
    as a writer must to send it again on a new stream."""
    import grpc.aio
    from floor import _OPTIONS, SUCCESS, Write, _open, _target

    make = payloads.make
    zstd = p.codec == "zstd"
    async with grpc.aio.insecure_channel(_target(p.endpoint), options=_OPTIONS) as channel:
        call = _open(channel, "StreamWrite", Write, p.database)
        init = Write.FromClient()
        init.init_request.path = p.topic
        init.init_request.producer_id = p.consumer
        init.init_request.message_group_id = p.consumer
        init.init_request.get_last_seq_no = True
        await call.write(init)
        reply = await call.read()
        if reply.status != SUCCESS:
            raise RuntimeError(f"write handshake failed: {reply}")
        first = reply.init_response.last_seq_no + 1
        sizes: deque[int] = deque()  # raw size per unacknowledged message
        # What a writer must keep until acknowledged, to send again on a new stream: the payloads
        # as sent (encoded ones once encoded).
        unacked_payloads: deque[bytes] = deque()
        unacked = [0]
        acked = asyncio.Event()

        async def read_acks() -> None:
            expected = first
            while expected < first + p.messages:
                response = await call.read()
                if response is grpc.aio.EOF or response.status != SUCCESS:
                    raise RuntimeError(f"write stream failed: {response}")
                for ack in response.write_response.acks:
                    if ack.seq_no != expected:
                        raise RuntimeError(f"ack for seq_no {ack.seq_no}, expected {expected}")
                    expected += 1
                    unacked[0] -= sizes.popleft()
                    unacked_payloads.popleft()
                acked.set()

        acks = asyncio.ensure_future(read_acks())
        limit_messages = p.max_messages or 1 << 62
        per_request = min(1000, max(1, 4 * MIB // p.size))
        try:
            index = 0
            while index < p.messages:
                # Wait for room for one message, then take as many as there is room for.
                while sizes and (unacked[0] + p.size > p.setting or len(sizes) >= limit_messages):
                    acked.clear()
                    await acked.wait()
                take = min(p.messages - index, per_request)
                if sizes:
                    take = min(take, (p.setting - unacked[0]) // p.size, limit_messages - len(sizes))
                group = [make(index + i) for i in range(take)]
                if zstd:
                    encoded = await asyncio.to_thread(lambda g=group: [zstd_encode(d) for d in g])
                else:
                    encoded = group
                del group
                request = Write.FromClient()
                write = request.write_request
                write.codec = 4 if zstd else 1
                for data in encoded:
                    message = write.messages.add()
                    message.seq_no = first + index
                    created = message.created_at
                    created.seconds, created.nanos = divmod(time.time_ns(), 1_000_000_000)
                    message.data = data
                    message.uncompressed_size = p.size
                    unacked_payloads.append(data)
                    sizes.append(p.size)
                    unacked[0] += p.size
                    index += 1
                del encoded, data, message, created
                await call.write(request)
                del request, write
            await acks
        finally:
            acks.cancel()
            call.cancel()
    return {"held_peak": p.size}


# --- accounting (``--account``) -----------------------------------------------------------------


def reader_state(reader: Any, batch: Any) -> dict[str, int]:
    """This SDK's reader at a moment: its buffer's charge and the server's credit, the received
    responses (their ``bytes``) that the buffer and the caller's batch keep alive through payloads
    left in them, the decoded payloads waiting in the buffer. Reads private state: best effort."""
    buffer = reader._buffer
    out = {
        "buffer_charge": buffer.buffered_bytes,
        "server_credit": buffer.server_credit,
        "parts": len(buffer._queue),
    }
    in_buffer: dict[int, int] = {}
    decoded_waiting = 0
    wire_waiting = 0
    for part in list(buffer._queue):
        decoded_waiting += sum(len(d) for d in part.decoded if isinstance(d, (bytes, bytearray)))
        for info in part.batches[part.batch_index :]:
            for view in (info.external or {}).values():
                in_buffer[id(view.obj)] = len(view.obj)
            wire_waiting += sum(len(r.data) for r in info.records)
    by_caller: dict[int, int] = {}
    caller_decoded = 0
    for run in getattr(batch, "_runs", None) or []:
        info, _, _, payloads = run
        for view in (info.external or {}).values():
            by_caller[id(view.obj)] = len(view.obj)
        caller_decoded += sum(map(len, payloads or ()))
    out["responses_in_buffer"] = len(in_buffer)
    out["response_bytes_in_buffer"] = sum(in_buffer.values())
    out["responses_kept_by_caller_only"] = len(set(by_caller) - set(in_buffer))
    out["response_bytes_kept_by_caller_only"] = sum(v for k, v in by_caller.items() if k not in in_buffer)
    out["decoded_waiting_in_buffer"] = decoded_waiting
    out["payload_bytes_parsed_into_records"] = wire_waiting
    out["caller_batch_decoded"] = caller_decoded
    return out


def writer_state(writer: Any) -> dict[str, int]:
    """This SDK's writer at a moment: raw and encoded copies in its buffer (private state)."""
    buffer = writer._buffer
    raw = encoded = count = 0
    for queue in (buffer.unsent, buffer.inflight):
        for entry in list(queue):
            count += 1
            if isinstance(entry, tuple):
                raw += len(entry[0])
            else:
                raw += len(entry.data)
                encoded += len(entry.encoded or b"")
    return {
        "buffer_charge": buffer.nbytes,
        "messages": count,
        "raw_copies": raw,
        "encoded_copies": encoded,
        "unsent": len(buffer.unsent),
        "inflight": len(buffer.inflight),
    }


# Python allocation sites, by component: the first rule that matches a frame of the allocation's
# traceback (most recent frame first) names it.
_COMPONENTS = (
    ("parsing.py", "", "reader: stripped copy of a large response (for protobuf)"),
    ("_codecs.py", "", "payloads decoded or copied out (reader), encoded (writer)"),
    ("reader/decoding.py", "", "reader: raw payload copied out of its response"),
    ("reader/flow_control.py", "", "reader: buffer bookkeeping"),
    ("reader/messages.py", "", "reader: messages built for the caller"),
    ("writer/batching.py", "", "writer: WriteRequests built"),
    ("grpc/aio/_call.py", "", "gRPC: received responses (one bytes each)"),
    ("grpc/_common.py", "", "gRPC: serialized requests (one bytes each)"),
    ("grpc/", "", "gRPC: other"),
    ("google/protobuf", "", "protobuf"),
    ("benchmarks/memory.py", "make", "caller: payloads made"),
    ("benchmarks/memory.py", "", "caller"),
    ("benchmarks/large.py", "", "caller"),
    ("zstandard", "", "payloads decoded or copied out (reader), encoded (writer)"),
    ("asyncio/", "", "asyncio"),
    ("threading.py", "", "threads"),
)


def _component(traceback: tracemalloc.Traceback) -> str:
    frames = list(traceback)[::-1]  # most recent first
    for needle, function, name in _COMPONENTS:
        for frame in frames:
            if needle in frame.filename and (not function or _function_at(frame) == function):
                return name
    return "other Python"


def _function_at(frame: tracemalloc.Frame) -> str:
    import linecache

    line = linecache.getline(frame.filename, frame.lineno)
    return "make" if "def make" in line or "self.bodies" in line else ""


class Probe:
    """Samples this process's RSS and glibc's heap every millisecond from a thread of its own, and
    records what ``--account`` reports (see the module's docstring) at two moments: the highest
    RSS (``rss_peak``) and the most memory allocated (``live_peak``: malloc's in-use plus mmapped
    bytes, the memory the process held on purpose), each taken again at every new high by ``step``."""

    def __init__(self, base_rss: int, base_malloc: dict[str, int], step: int = MIB) -> None:
        self.base = base_rss
        self.base_malloc = base_malloc
        self.base_arenas = malloc_arenas()
        self.step = step
        self.best: dict[str, int] = {"rss_peak": 0, "live_peak": 0}
        self.captures: dict[str, dict[str, Any]] = {}
        self.state: Callable[[], dict[str, int]] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-probe", daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            rss = rss_bytes()
            malloc = malloc_stats()
            live = malloc.get("in_use", 0) + malloc.get("mmapped", 0) - tracemalloc.get_tracemalloc_memory()
            for moment, value in (("rss_peak", rss), ("live_peak", live)):
                if value >= self.best[moment] + self.step:
                    self.best[moment] = value
                    self.captures[moment] = self._record(rss)

    def _record(self, rss: int) -> dict[str, Any]:
        state = self.state
        try:
            state_now = state() if state is not None else {}
        except Exception as exc:  # the client's state changed under the probe: sample again later
            state_now = {"state_error": repr(exc)}
        snapshot = tracemalloc.take_snapshot()
        malloc = malloc_stats()
        return {
            "rss_growth": rss - self.base,
            "anonymous": proc_memory().get("anonymous", 0),
            "malloc": {key: value - self.base_malloc.get(key, 0) for key, value in malloc.items()},
            "tracemalloc_overhead": tracemalloc.get_tracemalloc_memory(),
            "arenas": _arena_growth(malloc_arenas(), self.base_arenas),
            "snapshot": snapshot,
            "state": state_now,
        }


def _arena_growth(arenas: list[dict[str, int]], base: list[dict[str, int]]) -> list[dict[str, int]]:
    """Each arena's size and free bytes less what it had at the start (arenas keep their order)."""
    start = base + [{"size": 0, "free": 0}] * (len(arenas) - len(base))
    return [{key: arena[key] - was[key] for key in arena} for arena, was in zip(arenas, start, strict=False)]


def malloc_arenas() -> list[dict[str, int]]:
    """glibc's ``malloc_info`` per arena (the main one first): its size taken from the kernel and the
    free bytes it holds (empty without glibc)."""
    import ctypes
    import os
    import tempfile
    import xml.etree.ElementTree as ET

    try:
        libc = ctypes.CDLL(None)
        libc.fopen.restype = ctypes.c_void_p
        libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
    except (OSError, AttributeError):
        return []
    fd, path = tempfile.mkstemp(prefix="malloc-info-")
    os.close(fd)
    try:
        stream = libc.fopen(path.encode(), b"w")
        if not stream:
            return []
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return []
    finally:
        os.unlink(path)
    arenas = []
    for heap in root.findall("heap"):
        free = sum(int(t.get("size", 0)) for t in heap.findall("total") if t.get("type") in ("fast", "rest"))
        current = next((int(t.get("size", 0)) for t in heap.findall("system") if t.get("type") == "current"), 0)
        arenas.append({"size": current, "free": free})
    return arenas


def summarize_capture(capture: dict[str, Any]) -> dict[str, Any]:
    """The capture, with its tracemalloc snapshot grouped by component and by site."""
    snapshot: tracemalloc.Snapshot = capture.pop("snapshot")
    snapshot = snapshot.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    capture["traced"] = sum(trace.size for trace in snapshot.traces)
    components: dict[str, list[int]] = {}
    sites: dict[str, list[int]] = {}
    for stat in snapshot.statistics("traceback"):
        name = _component(stat.traceback)
        entry = components.setdefault(name, [0, 0])
        entry[0] += stat.size
        entry[1] += stat.count
        frames = [f for f in list(stat.traceback)[::-1] if "tracemalloc" not in f.filename]
        ours = [f for f in frames if any(m in f.filename for m in ("ydb_topic_async", "benchmarks", "grpc"))]
        where = (ours or frames or [None])[0]
        key = f"{_short(where.filename)}:{where.lineno}" if where else "?"
        site = sites.setdefault(key, [0, 0])
        site[0] += stat.size
        site[1] += stat.count
    capture["components"] = dict(sorted(components.items(), key=lambda kv: -kv[1][0]))
    capture["sites"] = dict(sorted(sites.items(), key=lambda kv: -kv[1][0])[:12])
    return capture


def _short(filename: str) -> str:
    for marker in ("ydb_topic_async/", "site-packages/", "benchmarks/", "lib/python3"):
        if marker in filename:
            tail = filename.split(marker, 1)[1]
            return "benchmarks/" + tail if marker == "benchmarks/" else tail
    return filename


# --- child processes ----------------------------------------------------------------------------

READERS: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
    "ours": read_ours, "official": read_official, "floor": read_floor,
}
WRITERS: dict[str, Callable[..., Awaitable[dict[str, Any]]]] = {
    "ours": write_ours, "official": write_official, "floor": write_floor,
}


def _child(conn: Any, p: Params) -> None:
    # Every package any client uses, imported before the baseline: their memory is not the run's.
    import grpc.aio  # noqa: F401
    import ydb
    import ydb.aio  # noqa: F401
    import zstandard  # noqa: F401

    import ydb_topic_async
    import ydb_topic_async.reader
    import ydb_topic_async.writer  # noqa: F401

    if p.workload.startswith("read"):
        run: Callable[[Probe | None], Awaitable[dict[str, Any]]] = lambda probe: READERS[p.client](p, probe)  # noqa: E731
    else:
        payloads = Payloads(p.size, p.codec == "zstd")
        run = lambda probe: WRITERS[p.client](p, probe, payloads)  # noqa: E731
    gc.collect()
    if p.account:
        tracemalloc.start(8)
    reset_peak_rss()
    before = proc_memory()
    start_malloc = malloc_stats()
    wall = time.perf_counter()
    probe = Probe(before.get("rss", 0), start_malloc) if p.account else None
    if probe is not None:
        with probe:
            result = asyncio.run(run(probe))
    else:
        result = asyncio.run(run(None))
    result["seconds"] = time.perf_counter() - wall
    after = proc_memory()
    result["peak_growth"] = after.get("peak", 0) - before.get("rss", 0)
    result["after_close"] = after.get("rss", 0) - before.get("rss", 0)
    result["malloc_before"] = start_malloc
    result["malloc_after"] = malloc_stats()
    if probe is not None:
        result["captures"] = {moment: summarize_capture(c) for moment, c in probe.captures.items()}
    conn.send(result)
    conn.close()


PINNED_ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_ARENA_MAX": "1"}
"""``--pinned-allocator``: glibc's mmap threshold fixed at its initial 128 KiB (so every large block
is mapped on its own and unmapped when freed) and one arena for every thread: freed memory goes
back to the kernel, or is reused, so the peak is close to what was allocated at once."""


def in_child(p: Params, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one workload with one client in a fresh process (``env`` added to its environment); what
    it measured."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_child, args=(child, p))
    saved = {key: os.environ.get(key) for key in env or {}}
    os.environ.update(env or {})  # glibc reads these as the child starts
    try:
        process.start()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    child.close()
    try:
        result: dict[str, Any] = parent.recv()
    except EOFError:
        raise RuntimeError(f"{p.workload} / {p.client}: the child process failed") from None
    finally:
        process.join(timeout=60)
    return result


# --- filling topics and the server workloads ----------------------------------------------------


async def _create(endpoint: str, database: str, topic: str, consumers: list[str]) -> None:
    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.create_topic(topic, consumers=consumers)


async def _drop(endpoint: str, database: str, topic: str) -> None:
    import ydb_topic_async as yta

    async with yta.Driver(endpoint, database, discovery=False) as driver:
        await driver.topic.drop_topic(topic)


async def fill(endpoint: str, database: str, w: Workload, topic: str, consumers: list[str]) -> None:
    """``topic`` with ``w.messages`` messages of ``w.size`` bytes (zstd: written by this SDK's writer)."""
    from floor import floor_write

    import ydb_topic_async as yta

    await _create(endpoint, database, topic, consumers)
    if w.codec == "zstd":
        bodies = [text_payload(w.size, seed) for seed in range(4)]
        async with (
            yta.Driver(endpoint, database, discovery=False) as driver,
            driver.topic.writer(topic, producer_id="fill", codec=yta.Codec.ZSTD) as writer,
        ):
            for index in range(w.messages):
                await writer.write(bodies[index % len(bodies)])
    else:
        batch = max(1, min(1000, 4_000_000 // (w.size + 64)))
        await floor_write(endpoint, database, topic, bytes(range(256)) * (w.size // 256), w.messages, batch)


async def server_workload(w: Workload) -> dict[str, Any]:
    """A fresh local server: its RSS before, at the peak while storing ``w.messages`` x ``w.size``,
    once stored, and after retention deleted them all (clock moved past the 24 h retention)."""
    from floor import floor_write

    with ServerProcess() as server:
        await _create(server.endpoint, server.database, w.name, [])
        await asyncio.sleep(0.2)
        reset_peak_rss(server.pid)
        before = proc_memory(server.pid)
        malloc_before = server.malloc_stats()
        batch = max(1, min(1000, 4_000_000 // (w.size + 64)))
        wall = time.perf_counter()
        await floor_write(server.endpoint, server.database, w.name, b"s" * w.size, w.messages, batch)
        seconds = time.perf_counter() - wall
        await asyncio.sleep(0.2)
        stored = proc_memory(server.pid)
        malloc_stored = server.malloc_stats()
        server.advance_time(25 * 3600)
        await asyncio.sleep(1.0)
        expired = proc_memory(server.pid)
        malloc_expired = server.malloc_stats()
    return {
        "seconds": seconds,
        "peak_growth": stored.get("peak", 0) - before["rss"],
        "stored_growth": stored["rss"] - before["rss"],
        "after_retention": expired["rss"] - before["rss"],
        "malloc_before": malloc_before,
        "malloc_stored": malloc_stored,
        "malloc_after_retention": malloc_expired,
    }


# --- running and reporting ----------------------------------------------------------------------


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median peak growth, and the range over the runs."""
    ordered = sorted(runs, key=lambda r: r["peak_growth"])
    middle = dict(ordered[len(ordered) // 2])
    middle["peak_range"] = (ordered[0]["peak_growth"], ordered[-1]["peak_growth"])
    middle["rounds"] = len(runs)
    return middle


async def run_client_workloads(args: argparse.Namespace, chosen: list[Workload]) -> list[Figure]:
    figures: list[Figure] = []
    with ServerProcess() as server:
        endpoint, database = server.endpoint, server.database
        for w in chosen:
            if w.kind == "server":
                continue
            for setting in w.settings:
                runs: dict[str, list[dict[str, Any]]] = {c: [] for c in args.clients}
                for round_no in range(args.rounds):
                    order = list(args.clients)
                    order = order[round_no % len(order) :] + order[: round_no % len(order)]
                    topic = f"{w.name}-{setting // MIB}-{round_no}"
                    consumers = [f"{c}" for c in order]
                    if w.kind == "read":
                        await fill(endpoint, database, w, topic, consumers)
                    for client in order:
                        p = Params(
                            w.name, client, endpoint, database, topic, client, w.messages, w.size, setting,
                            w.max_messages, w.codec, args.slow_ms / 1000 if w.name == "read-raw" else 0.0,
                        )
                        if w.kind == "write":
                            p.topic = f"{topic}-{client}"
                            await _create(endpoint, database, p.topic, [])
                        runs[client].append(in_child(p, PINNED_ALLOCATOR if args.pinned_allocator else None))
                        if w.kind == "write":
                            await _drop(endpoint, database, p.topic)
                    if w.kind == "read":
                        await _drop(endpoint, database, topic)
                for client, results in runs.items():
                    result = _median_run(results)
                    figures.append(Figure(
                        benchmark="memory", client=client, label=LABELS[client], messages=w.messages, size=w.size,
                        seconds=result.pop("seconds"), client_cpu_seconds=0.0, mode=w.name,
                        extra={"setting": setting, **result},
                    ))
                    print(f"  {w.name} ({setting // MIB} MiB) {client}: peak +{result['peak_growth'] / MIB:.1f} MiB",
                          flush=True)
    return figures


async def run_server_workloads(chosen: list[Workload]) -> list[Figure]:
    figures = []
    for w in chosen:
        if w.kind != "server":
            continue
        result = await server_workload(w)
        figures.append(Figure(
            benchmark="memory", client="server", label="local server", messages=w.messages, size=w.size,
            seconds=result.pop("seconds"), client_cpu_seconds=0.0, mode=w.name, extra=result,
        ))
        print(f"  {w.name}: stored +{result['stored_growth'] / MIB:.1f} MiB", flush=True)
    return figures


def _mib(value: float) -> str:
    return f"{value / MIB:.1f}"


def _message_memory() -> int:
    """What this SDK's writer charges per message beside its payload (0 for a version that did not)."""
    try:
        from ydb_topic_async.writer.buffer import MESSAGE_MEMORY
    except ImportError:
        return 0
    return MESSAGE_MEMORY


def report(chosen: list[Workload], figures: list[Figure], clients: list[str]) -> None:
    by = {(f.mode, f.extra.get("setting"), f.client): f for f in figures}
    rows = [(w, s) for w in chosen if w.kind != "server" for s in w.settings]
    if rows:
        print("\n| workload | setting | " + " | ".join(f"{LABELS[c]} MiB (x setting)" for c in clients)
              + " | caller holds MiB | ours / (setting + held) | ours after close MiB |")
        print("|---|---|" + "---:|" * len(clients) + "---:|---:|---:|")
    for w, setting in rows:
        # What the limits let the client hold: a writer limited by its message count before its
        # bytes (small messages) is measured against the bytes that count admits, as this SDK's
        # writer charges them (each message's payload and MESSAGE_MEMORY).
        admitted = min(setting, w.max_messages * (w.size + _message_memory())) if w.max_messages else setting
        cells = []
        for client in clients:
            f = by.get((w.name, setting, client))
            if f is None:
                cells.append("-")
                continue
            growth = f.extra["peak_growth"]
            low, high = f.extra["peak_range"]
            spread = f" [{_mib(low)}-{_mib(high)}]" if f.extra["rounds"] > 1 else ""
            cells.append(f"{_mib(growth)}{spread} ({growth / admitted:.2f}x)")
        ours = by.get((w.name, setting, "ours"))
        held = ours.extra["held_peak"] if ours else 0
        bound = f"{ours.extra['peak_growth'] / (admitted + held):.2f}" if ours else "-"
        after = _mib(ours.extra["after_close"]) if ours else "-"
        name = f"{w.name}: {w.messages} x {_size(w.size)} {w.codec}"
        what = f"{'buffer_size_bytes' if w.kind == 'read' else 'max_buffer_bytes'} {setting // MIB} MiB"
        if w.max_messages:
            what += f", max_buffer_messages {w.max_messages} ({_mib(admitted)} MiB as charged)"
        print(f"| {name} | {what} | " + " | ".join(cells), end="")
        print(f" | {_mib(held)} | {bound} | {after} |")
    servers = [f for f in figures if f.client == "server"]
    if servers:
        print("\n| local server | stored payload MiB | peak growth MiB | growth once stored MiB | bytes per message"
              " | x payload | after retention MiB | returned |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for f in servers:
        e = f.extra
        payload = f.messages * f.size
        stored = e["stored_growth"]
        returned = 1 - e["after_retention"] / stored if stored > 0 else 0.0
        print(
            f"| {f.messages} x {_size(f.size)} | {_mib(payload)} | {_mib(e['peak_growth'])} | {_mib(stored)} |"
            f" {stored / f.messages:,.0f} | {stored / payload:.2f} | {_mib(e['after_retention'])} | {returned:.0%} |"
        )


def _size(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size} B"


# --- accounting ---------------------------------------------------------------------------------


async def account(args: argparse.Namespace, w: Workload) -> dict[str, Any]:
    """This SDK alone on ``w`` (its first setting), with the probe; prints where its peak went."""
    setting = w.settings[0]
    with ServerProcess() as server:
        endpoint, database = server.endpoint, server.database
        topic = f"account-{w.name}"
        if w.kind == "read":
            await fill(endpoint, database, w, topic, ["ours"])
        else:
            await _create(endpoint, database, topic, [])
        p = Params(
            w.name, "ours", endpoint, database, topic, "ours", w.messages, w.size, setting, w.max_messages, w.codec,
            args.slow_ms / 1000 if w.name == "read-raw" else 0.0, account=True,
        )
        result = in_child(p, PINNED_ALLOCATOR if args.pinned_allocator else None)
    captures = result.get("captures", {})
    moments = [m for m in ("rss_peak", "live_peak") if m in captures]
    print(f"\n{w.description}: {w.messages} x {_size(w.size)} {w.codec}, setting {setting // MIB} MiB")
    print(f"peak growth (VmHWM) {_mib(result['peak_growth'])} MiB; after close {_mib(result['after_close'])} MiB")
    print("| MiB (growth since the start) | " + " | ".join(moments) + " |")
    print("|---|" + "---:|" * len(moments))

    def row(name: str, get: Callable[[dict[str, Any]], Any]) -> None:
        cells = []
        for moment in moments:
            value = get(captures[moment])
            cells.append(value if isinstance(value, str) else _mib(value) if value is not None else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")

    row("RSS", lambda c: c["rss_growth"])
    row("Python allocations (tracemalloc)", lambda c: c["traced"])
    names = list(dict.fromkeys(n for m in moments for n in captures[m]["components"]))
    for name in names:
        row(f"- {name}", lambda c, n=name: c["components"].get(n, [0, 0])[0])
    row("malloc: in use (tracemalloc's own excluded)", lambda c: c["malloc"]["in_use"] - c["tracemalloc_overhead"])
    row("malloc: free but held", lambda c: c["malloc"]["free_held"])
    row("malloc: mmapped blocks", lambda c: c["malloc"]["mmapped"])
    row("malloc arenas: count", lambda c: str(len(c["arenas"])))
    row("malloc arenas grown by 1 MiB+: size", lambda c: _arenas_cell(c["arenas"], "size"))
    row("malloc arenas grown by 1 MiB+: free held", lambda c: _arenas_cell(c["arenas"], "free"))
    keys = list(dict.fromkeys(k for m in moments for k in captures[m]["state"]))
    for key in keys:
        row(f"state: {key}", lambda c, k=key: _state_cell(k, c["state"].get(k)))
    for moment in moments:
        print(f"\ntop Python allocation sites at {moment}:")
        for site, (size, count) in captures[moment]["sites"].items():
            print(f"  {_mib(size):>7} MiB  {count:>6} blocks  {site}")
    return result


def _arenas_cell(arenas: list[dict[str, int]], key: str) -> str:
    """The arenas (main first) that grew by a MiB or more: ``key`` of each, in MiB."""
    return " + ".join(f"{_mib(a[key])}" + ("" if i else " (main)") for i, a in enumerate(arenas) if a["size"] >= MIB)


_COUNTS = frozenset({"parts", "responses_in_buffer", "responses_kept_by_caller_only", "messages", "unsent", "inflight"})
"""State entries that count things (the others are bytes)."""


def _state_cell(key: str, value: Any) -> str:
    if isinstance(value, int) and key not in _COUNTS:
        return _mib(value)
    return "-" if value is None else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CI-sized workloads (see the sizes in brackets above)")
    parser.add_argument("--workloads", nargs="+", choices=list(workloads(False)), help="default: all")
    parser.add_argument("--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    parser.add_argument("--rounds", type=int, default=1, help="runs per client and workload; the median is shown")
    parser.add_argument("--slow-ms", type=float, default=4.0, help="the slow consumer's time per message (read-raw)")
    parser.add_argument("--messages", type=int, help="override every chosen workload's message count")
    parser.add_argument("--account", choices=[n for n, w in workloads(False).items() if w.kind != "server"],
                        help="account for this SDK's peak on one workload instead (see above)")
    parser.add_argument(
        "--pinned-allocator", action="store_true",
        help="a diagnosis, not a setting to recommend: run the clients with glibc's mmap threshold fixed and one"
        " arena (see PINNED_ALLOCATOR); the difference from a default run is memory the allocator kept",
    )
    parser.add_argument("--json", help="write the figures to this JSON file")
    args = parser.parse_args()
    table = workloads(args.quick)
    if args.messages:
        table = {name: replace(w, messages=args.messages) for name, w in table.items()}
    print(f"machine: {describe_machine(machine())}")
    started = time.perf_counter()
    if args.account:
        result = asyncio.run(account(args, table[args.account]))
        write_json(args.json, "memory-account", args, [], account=result)
        return
    if args.pinned_allocator:
        print("clients run with " + " ".join(f"{k}={v}" for k, v in PINNED_ALLOCATOR.items()) + " (a diagnosis)")
    chosen = [table[name] for name in (args.workloads or list(table))]
    figures = asyncio.run(run_client_workloads(args, chosen))
    figures += asyncio.run(run_server_workloads(chosen))
    report(chosen, figures, list(args.clients))
    print(f"\n{time.perf_counter() - started:.0f} s in all")
    write_json(args.json, "memory", args, figures)


if __name__ == "__main__":
    main()
