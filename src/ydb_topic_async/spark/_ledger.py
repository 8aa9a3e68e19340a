"""The exactly-once sink's ledger: what the sink needs to know about a micro-batch before any of
its tasks writes, kept in the query's checkpoint directory.

A sink task knows its own Spark partition, never how many tasks its micro-batch has, nor whether
an earlier attempt of the batch ran with another layout (other ``minPartitions``, another
``repartition``): pyspark hands neither to a Python sink. What it can be told is decided on the
driver, where Spark pickles the sink's writer into the batch's tasks after writing the batch's
offsets (``<checkpoint>/offsets/<batch>``) and before starting them. There this module looks the
batch up under ``<checkpoint>/ydb_topic_sink/<batch>``:

- no record: the first attempt. The record is written, with the end offsets the output topic has
  now (nothing of the batch can be before them), then the tasks run.
- a record: an earlier attempt of this batch was planned (and may have stored rows) in a run
  that ended before Spark committed the batch. The tasks get the record's end offsets, read
  back everything any earlier attempt of the batch stored, and check their rows against all of
  it before writing one (``_write.replay``).

Reading the checkpoint needs the file system Spark writes it to: local paths and ``file:`` URIs
directly, other URIs through ``pyarrow.fs`` (``s3://``, ``s3a://``, ``gs://``, ``hdfs://``, ...).
When it cannot be read or written from Python (or the query has no ``checkpointLocation``
option), the sink says so in the driver's log and checks a replay per Spark partition only.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import Driver
from ..observability import sdk_logger
from ._bridge import runtime
from ._options import SourceOptions

logger = sdk_logger("spark")

LEDGER = "ydb_topic_sink"
"""The sink's directory in the checkpoint."""
KEEP = 100
"""Records kept behind the last committed micro-batch (Spark keeps 100 offsets by default)."""


@dataclass(frozen=True)
class ReplayBounds:
    """Where an earlier attempt of a micro-batch can have stored its rows."""

    planned_at_ms: int
    """When the first attempt was planned (the driver's clock)."""
    ends: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    """Topic path -> partition id -> its end offset then: every row the batch stored is after it."""


@dataclass(frozen=True)
class SinkPlan:
    """What the driver found out about a micro-batch before its tasks run."""

    batch: int | None = None
    """The micro-batch planned (None: none pending, or the checkpoint could not be read)."""
    query_id: str | None = None
    attempt: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    """This attempt's id (8 bytes as hex), stamped on its messages: a replay's read-back skips the
    messages its own tasks are writing meanwhile."""
    replay: ReplayBounds | None = None
    """Set when an earlier attempt of the batch was planned."""
    unavailable: str | None = None
    """Why the ledger could not be used (the sink then checks replays per Spark partition only)."""


def plan_batch(options: SourceOptions) -> SinkPlan:
    """Look the micro-batch Spark is about to run up in the ledger (on the driver); record it
    when it is new. Never raises for the ledger's sake: a ledger that cannot be used is reported
    in the plan and logged."""
    location = options.checkpoint_location
    if not location:
        return _unavailable(
            "the query has no checkpointLocation option (a location set for the session only is not passed to "
            "the sink)"
        )
    try:
        checkpoint = Checkpoint(location)
        query_id = checkpoint.query_id()
        batch = checkpoint.pending_batch()
    except Exception as exc:
        return _unavailable(f"its checkpoint {location!r} cannot be read from Python: {exc}")
    if batch is None:
        return SinkPlan(query_id=query_id)
    try:
        record = checkpoint.read_record(batch)
    except Exception as exc:
        return _unavailable(f"its record of micro-batch {batch} in {location!r} cannot be read: {exc}")
    if record is not None:
        logger.info("ydb_topic: micro-batch %d runs again: its tasks check their rows against what earlier "
                    "attempts stored", batch)
        return SinkPlan(batch, query_id, replay=record)
    ends = _ends(options)
    try:
        checkpoint.write_record(batch, ReplayBounds(int(time.time() * 1000), ends))
    except Exception as exc:
        return _unavailable(f"its record of micro-batch {batch} cannot be written to {location!r}: {exc}")
    return SinkPlan(batch, query_id)


def forget_before(options: SourceOptions, batch: int) -> None:
    """Drop the records of micro-batches long committed (on the driver, after a commit)."""
    if not options.checkpoint_location:
        return
    try:
        Checkpoint(options.checkpoint_location).forget_below(batch - KEEP)
    except Exception:
        logger.debug("ydb_topic: pruning the sink's records failed", exc_info=True)


_warned: set[str] = set()


def _unavailable(why: str) -> SinkPlan:
    if why in _warned:  # the planning process lives as long as the query: once is enough
        return SinkPlan(unavailable=why)
    _warned.add(why)
    logger.warning(
        "ydb_topic: the exactly-once sink cannot keep its record of micro-batches: %s. A replayed micro-batch is "
        "then checked per Spark partition only, which cannot tell when rows moved between Spark partitions "
        "(for example after changing repartition() or coalesce() between a crash and the restart).", why,
    )
    return SinkPlan(unavailable=why)


def _ends(options: SourceOptions) -> dict[str, dict[int, int]]:
    """The output topic's end offsets now (none when each row names its topic)."""
    if not options.topic:
        return {}

    async def main() -> dict[str, dict[int, int]]:
        driver: Driver = await rt.driver(options.connection)
        description = await driver.topic.describe_topic(
            options.topic, include_stats=True, wait_for_topic=options.wait_for_topic
        )
        ends = {p.partition_id: p.stats.end_offset if p.stats else 0 for p in description.partitions}
        return {description.path: ends}

    rt = runtime()
    return rt.run(main())


class Checkpoint:
    """The parts of a Spark checkpoint directory the sink reads (``metadata``, ``offsets``,
    ``commits``) and its own records, on whatever file system holds it."""

    def __init__(self, location: str) -> None:
        from pyarrow import fs

        self._fs: Any
        if "://" in location and not location.startswith("file://"):
            uri = location.replace("s3a://", "s3://", 1).replace("s3n://", "s3://", 1)
            self._fs, self._root = fs.FileSystem.from_uri(uri)
        else:
            path = location.removeprefix("file://").removeprefix("file:")
            if location.startswith("dbfs:/"):
                path = "/dbfs/" + location.removeprefix("dbfs:").lstrip("/")
            self._fs, self._root = fs.LocalFileSystem(), os.path.abspath(path)
        self._root = self._root.rstrip("/")

    def _read(self, *parts: str) -> bytes | None:
        from pyarrow import fs

        path = "/".join((self._root, *parts))
        if self._fs.get_file_info(path).type != fs.FileType.File:
            return None
        with self._fs.open_input_stream(path) as stream:
            data: bytes = stream.read()
            return data

    def _numbers(self, directory: str) -> list[int]:
        from pyarrow import fs

        path = f"{self._root}/{directory}"
        if self._fs.get_file_info(path).type != fs.FileType.Directory:
            return []
        infos = self._fs.get_file_info(fs.FileSelector(path))
        return sorted(int(info.base_name) for info in infos if info.base_name.isdigit())

    def query_id(self) -> str | None:
        data = self._read("metadata")
        if data is None:
            return None
        value = json.loads(data.decode().splitlines()[0]).get("id")
        return value if isinstance(value, str) else None

    def pending_batch(self) -> int | None:
        """The micro-batch whose offsets Spark logged but whose commit it has not: the one it runs."""
        offsets = self._numbers("offsets")
        if not offsets or offsets[-1] in set(self._numbers("commits")):
            return None
        return offsets[-1]

    def read_record(self, batch: int) -> ReplayBounds | None:
        data = self._read(LEDGER, str(batch))
        if data is None:
            return None
        value = json.loads(data)
        ends = {str(path): {int(pid): int(end) for pid, end in parts.items()} for path, parts in value["ends"].items()}
        return ReplayBounds(int(value["plannedAtMs"]), ends)

    def write_record(self, batch: int, record: ReplayBounds) -> None:
        directory = f"{self._root}/{LEDGER}"
        self._fs.create_dir(directory, recursive=True)
        body = json.dumps({
            "version": 1,
            "plannedAtMs": record.planned_at_ms,
            "ends": {path: {str(pid): end for pid, end in parts.items()} for path, parts in record.ends.items()},
        }).encode()
        temporary = f"{directory}/.{batch}.{uuid.uuid4().hex}.tmp"
        with self._fs.open_output_stream(temporary) as stream:
            stream.write(body)
        self._fs.move(temporary, f"{directory}/{batch}")

    def forget_below(self, batch: int) -> None:
        for number in self._numbers(LEDGER):
            if number < batch:
                self._fs.delete_file(f"{self._root}/{LEDGER}/{number}")
