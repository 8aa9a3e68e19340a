"""``OpenTelemetryMetrics`` end to end on the local server: the figures a user's meter provider
gets (read with the OpenTelemetry SDK's in-memory reader) equal what was written, read, committed
and left unread, and the Prometheus scrape shown in the observability guide runs as shown."""

from __future__ import annotations

import asyncio
import pathlib
import re
import socket
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint

import ydb_topic_async as yta
from ydb_topic_async.observability import otel_metrics
from ydb_topic_async.testing import LocalTopicServer

from .._polling import eventually

pytestmark = pytest.mark.timeout(60)

GUIDE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "observability.md"


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def metrics(reader: InMemoryMetricReader) -> yta.OpenTelemetryMetrics:
    return yta.OpenTelemetryMetrics(meter_provider=MeterProvider(metric_readers=[reader]))


def _points(reader: InMemoryMetricReader, name: str) -> Iterator[tuple[Mapping[str, Any], Any]]:
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        yield dict(point.attributes or {}), point


PARTITION = "messaging.destination.partition.id"
TOPIC = "messaging.destination.name"
GROUP = "messaging.consumer.group.name"
OPERATION = "messaging.operation.name"
STATUS = "messaging.ydb.write_status"


def value(reader: InMemoryMetricReader, name: str, wanted: Mapping[str, str] | None = None) -> int:
    """The sum of a counter's (or up-down counter's) points whose attributes include ``wanted``."""
    wanted = wanted or {}
    total = 0
    for attributes, point in _points(reader, name):
        assert isinstance(point, NumberDataPoint), (name, point)
        if all(attributes.get(key) == v for key, v in wanted.items()):
            total += int(point.value)
    return total


def histogram(reader: InMemoryMetricReader, name: str, wanted: Mapping[str, str]) -> list[HistogramDataPoint]:
    found = []
    for attributes, point in _points(reader, name):
        if all(attributes.get(key) == v for key, v in wanted.items()):
            assert isinstance(point, HistogramDataPoint)
            found.append(point)
    return found


def attribute_sets(reader: InMemoryMetricReader, name: str) -> list[Mapping[str, Any]]:
    return [attributes for attributes, _ in _points(reader, name)]


async def test_counts_bytes_latencies_and_reconnects_of_writers_equal_what_was_written(
    server: LocalTopicServer, reader: InMemoryMetricReader, metrics: yta.OpenTelemetryMetrics
) -> None:
    """Messages and payload bytes acknowledged per partition, a duplicate after a real broken
    stream (the server's fault hook: it stores the message and drops the stream before the ack),
    one acknowledgement latency per request, the buffer gauge back to 0, the reconnect."""
    async with yta.Driver(server.endpoint, server.database, discovery=False, metrics=metrics) as driver:
        await driver.topic.create_topic("otel-writes", min_active_partitions=2)
        path = driver.topic.full_path("otel-writes")
        first = [b"a" * n for n in (3, 5, 7)]
        second = [b"b" * n for n in (11, 13)]
        async with driver.topic.writer("otel-writes", producer_id="p0", partition_id=0) as writer:
            for data in first:
                assert isinstance(await writer.write_with_ack(data), yta.Written)
            server.faults.drop_write_stream_after(1)
            assert isinstance(await writer.write_with_ack(b"c" * 17), yta.Skipped)  # stored, its ack lost
        async with driver.topic.writer("otel-writes", producer_id="p1", partition_id=1) as writer:
            for data in second:
                assert isinstance(await writer.write_with_ack(data), yta.Written)
        stored = await driver.topic.describe_topic("otel-writes", include_stats=True)
        assert [p.stats.end_offset for p in stored.partitions if p.stats] == [4, 2]

    sent = otel_metrics.SENT_MESSAGES
    assert value(reader, sent, {TOPIC: path, PARTITION: "0", STATUS: "written"}) == 3
    assert value(reader, sent, {TOPIC: path, PARTITION: "0", STATUS: "skipped"}) == 1
    assert value(reader, sent, {TOPIC: path, PARTITION: "1", STATUS: "written"}) == 2
    assert value(reader, sent) == 4 + 2  # every message the partitions hold, each once
    assert {a["messaging.operation.name"] for a in attribute_sets(reader, sent)} == {"write"}
    assert {a["messaging.system"] for a in attribute_sets(reader, sent)} == {"ydb"}
    # Payload bytes of the stored messages (the skipped one was stored by its first attempt).
    assert value(reader, otel_metrics.SENT_BYTES, {PARTITION: "0"}) == 3 + 5 + 7
    assert value(reader, otel_metrics.SENT_BYTES, {PARTITION: "1"}) == 11 + 13

    (durations,) = histogram(reader, otel_metrics.OPERATION_DURATION, {OPERATION: "write"})
    assert durations.count == 4 + 2  # one request per write_with_ack; the resent one counts once
    assert 0 < durations.sum < 10 * durations.count
    assert list(durations.explicit_bounds) == list(otel_metrics.DURATION_BUCKETS)

    assert value(reader, otel_metrics.WRITER_BUFFER_MESSAGES, {TOPIC: path}) == 0
    assert value(reader, otel_metrics.WRITER_BUFFER_SIZE, {TOPIC: path}) == 0
    (reconnect,) = attribute_sets(reader, otel_metrics.RECONNECTS)
    assert value(reader, otel_metrics.RECONNECTS) == 1
    assert reconnect["messaging.operation.type"] == "send" and reconnect["messaging.destination.name"] == path
    assert issubclass(getattr(yta, reconnect["error.type"]), yta.TransportError)


async def test_counts_lag_buffer_commit_latency_and_reconnects_of_readers_equal_what_was_read(
    server: LocalTopicServer, reader: InMemoryMetricReader, metrics: yta.OpenTelemetryMetrics
) -> None:
    """Consumer lag is what the partition holds past the consumer's committed offset: after
    commits, after new messages arrive, across a real broken read stream (the reader's share of
    the old partition sessions is taken out, the new ones' put in), and 0 once all is committed.
    Consumed messages count every delivery: after the reconnect the server delivers again what
    was not committed."""
    async with yta.Driver(server.endpoint, server.database, discovery=False, metrics=metrics) as driver:
        await driver.topic.create_topic("otel-reads", min_active_partitions=2, consumers=["c"])
        path = driver.topic.full_path("otel-reads")
        sizes = {0: [1, 2, 3, 4, 5], 1: [10, 20, 30]}
        for pid, lengths in sizes.items():
            async with driver.topic.writer("otel-reads", producer_id=f"p{pid}", partition_id=pid) as writer:
                await writer.write_with_ack([bytes([65 + pid]) * n for n in lengths])

        def lag(pid: int) -> int:
            return value(reader, otel_metrics.CONSUMER_LAG, {PARTITION: str(pid)})

        async with driver.topic.reader("otel-reads", consumer="c") as topic_reader:
            received = [await topic_reader.receive_message(timeout=10) for _ in range(8)]
            by_partition = {pid: [m for m in received if m.partition_id == pid] for pid in sizes}
            assert [len(m.data) for m in by_partition[0]] == sizes[0]
            # Nothing committed yet: the lag is all they hold.
            await eventually(lambda: (lag(0), lag(1)) == (5, 3), "the lag of what the partitions hold")
            commits = 0
            for message in by_partition[0][:3]:
                await topic_reader.commit_with_ack(message, timeout=10)
                commits += 1
            for message in by_partition[1][:-1]:
                topic_reader.commit(message)  # sent with the next one, in one request
            await topic_reader.commit_with_ack(by_partition[1][-1], timeout=10)
            commits += 1
            assert (lag(0), lag(1)) == (2, 0)  # set before commit_with_ack returns

            # New messages: the end the reader knows moves as they arrive; they wait in its buffer.
            async with driver.topic.writer("otel-reads", producer_id="p1", partition_id=1) as writer:
                await writer.write_with_ack([b"n" * 7] * 4)
            await eventually(lambda: lag(1) == 4, "the lag of the new messages")
            assert value(reader, otel_metrics.READER_BUFFER_MESSAGES, {GROUP: "c"}) == 4
            # Counted as the reader's buffer_size_bytes counts them: the server's size of the
            # responses, payloads and their framing.
            assert value(reader, otel_metrics.READER_BUFFER_SIZE, {GROUP: "c"}) >= 4 * 7

            # A broken stream: the partition sessions end and start again; the lag stays what is unread.
            assert server.faults.drop_read_streams() == 1
            # Counted once the reader has ended the broken stream and dropped what it buffered
            # (until then a receive may still hand out the old stream's messages).
            await eventually(
                lambda: value(reader, otel_metrics.RECONNECTS, {"messaging.operation.type": "receive"}) == 1,
                "the reconnect",
            )
            again = [await topic_reader.receive_message(timeout=10) for _ in range(2 + 4)]
            assert sorted((m.partition_id, m.offset) for m in again) == [(0, 3), (0, 4), *((1, o) for o in range(3, 7))]
            assert (lag(0), lag(1)) == (2, 4)
            for message in again[:-1]:
                topic_reader.commit(message)
            await topic_reader.commit_with_ack(again[-1], timeout=10)
            commits += 2  # one request, one confirmation per partition
            await eventually(lambda: (lag(0), lag(1)) == (0, 0), "no lag once everything is committed")

        # Every delivery, the second ones after the reconnect included.
        assert value(reader, otel_metrics.CONSUMED_MESSAGES, {PARTITION: "0"}) == 5 + 2
        assert value(reader, otel_metrics.CONSUMED_MESSAGES, {PARTITION: "1"}) == 3 + 4 + 4
        assert value(reader, otel_metrics.CONSUMED_BYTES, {PARTITION: "0"}) == 15 + 4 + 5
        assert value(reader, otel_metrics.CONSUMED_BYTES, {PARTITION: "1"}) == 60 + 2 * 28
        for attributes in attribute_sets(reader, otel_metrics.CONSUMED_MESSAGES):
            assert attributes["messaging.destination.name"] == path
            assert attributes["messaging.operation.type"] == "receive"

        (durations,) = histogram(reader, otel_metrics.OPERATION_DURATION, {OPERATION: "commit"})
        assert durations.count == commits
        assert 0 < durations.sum < 10 * commits
        (commit_attributes,) = [
            a for a in attribute_sets(reader, otel_metrics.OPERATION_DURATION) if a[OPERATION] == "commit"
        ]
        assert commit_attributes["messaging.consumer.group.name"] == "c"
        assert commit_attributes["messaging.operation.type"] == "settle"

        assert value(reader, otel_metrics.RECONNECTS) == 1
        (reconnect,) = attribute_sets(reader, otel_metrics.RECONNECTS)
        assert reconnect["messaging.consumer.group.name"] == "c"
        # Closed: nothing it held or lagged on counts any more.
        assert value(reader, otel_metrics.READER_BUFFER_MESSAGES) == 0
        assert value(reader, otel_metrics.READER_BUFFER_SIZE) == 0
        assert lag(0) == lag(1) == 0


async def test_the_lag_summed_over_readers_stays_what_is_unread_as_partitions_move(
    server: LocalTopicServer, reader: InMemoryMetricReader, metrics: yta.OpenTelemetryMetrics
) -> None:
    """A second reader of the consumer takes partitions from the first; the first takes its share
    of their lag out, the second puts it in: the gauge of each partition never counts twice."""
    async with yta.Driver(server.endpoint, server.database, discovery=False, metrics=metrics) as driver:
        await driver.topic.create_topic("otel-moves", min_active_partitions=4, consumers=["c"])
        for pid in range(4):
            async with driver.topic.writer("otel-moves", producer_id=f"p{pid}", partition_id=pid) as writer:
                await writer.write_with_ack([b"x"] * (pid + 1))

        def lags() -> list[int]:
            return [
                value(reader, otel_metrics.CONSUMER_LAG, {PARTITION: str(pid)}) for pid in range(4)
            ]

        # The first reader hands everything out (a partition it still buffers is not given up)
        # and commits nothing; it gives up a partition a moment after the server asks.
        async with driver.topic.reader("otel-moves", consumer="c", graceful_stop_timeout=0.2) as first:
            assert len([await first.receive_message(timeout=10) for _ in range(1 + 2 + 3 + 4)]) == 10
            assert lags() == [1, 2, 3, 4]
            moved: list[int] = []
            async with driver.topic.reader(
                "otel-moves", consumer="c", on_partition_start=lambda session: moved.append(session.partition_id)
            ):
                await eventually(lambda: len(moved) == 2, "two partitions moved to the second reader")
                await eventually(lambda: lags() == [1, 2, 3, 4], "the lag after the move")
            # The second reader left: its partitions go back to the first.
            await eventually(lambda: lags() == [1, 2, 3, 4], "the lag once the second reader left")
        assert lags() == [0, 0, 0, 0]


async def test_retries_of_unary_calls_are_counted_by_method_and_error(
    server: LocalTopicServer, reader: InMemoryMetricReader, metrics: yta.OpenTelemetryMetrics
) -> None:
    async with yta.Driver(server.endpoint, server.database, discovery=False, metrics=metrics) as driver:
        await driver.topic.create_topic("otel-retry")
        server.faults.fail_next("DescribeTopic", "UNAVAILABLE", times=2)
        await driver.topic.describe_topic("otel-retry")
    assert attribute_sets(reader, otel_metrics.RETRIES) == [
        {"messaging.system": "ydb", "rpc.method": "DescribeTopic", "error.type": "UnavailableError"}
    ]
    assert value(reader, otel_metrics.RETRIES) == 2


async def test_transaction_attempts_are_counted_by_outcome(
    server: LocalTopicServer, reader: InMemoryMetricReader, metrics: yta.OpenTelemetryMetrics
) -> None:
    async with yta.Driver(server.endpoint, server.database, discovery=False, metrics=metrics) as driver:

        async def begin(tx: yta.Transaction) -> None:
            await tx.begin()

        server.faults.fail_next("CommitTransaction", "ABORTED")
        await driver.query.retry_tx(begin)
    outcome, settled = "messaging.ydb.transaction.outcome", "messaging.ydb.transaction.settled"
    counted = {
        (attributes[outcome], attributes[settled]): point.value
        for attributes, point in _points(reader, otel_metrics.TRANSACTION_ATTEMPTS)
    }
    assert counted == {("retried", False): 1, ("committed", False): 1}  # the ABORTED attempt, then the repeat


def test_a_meter_provider_of_another_kind_is_refused() -> None:
    with pytest.raises(yta.InvalidArgumentError, match="meter_provider must be an OpenTelemetry MeterProvider"):
        yta.OpenTelemetryMetrics(meter_provider="global")  # type: ignore[arg-type]


def test_without_opentelemetry_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(yta.MissingDependencyError, match=r"pip install -e \"\.\[otel\]\" in a clone"):
        yta.OpenTelemetryMetrics()


# --- the guide's Prometheus scrape -------------------------------------------------------------


def _prometheus_block() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text(), re.MULTILINE | re.DOTALL)
    (found,) = [b for b in blocks if "PrometheusMetricReader" in b]
    return str(found)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_guides_prometheus_scrape_runs_and_shows_what_was_written_and_read(
    server: LocalTopicServer, tmp_path: pathlib.Path
) -> None:
    """The guide's block, run as a user would (its own process, its own Prometheus endpoint),
    changed only in the server's endpoint and the port: the scrape it prints shows the messages
    written and read, their bytes, and the lag of the two it left uncommitted."""
    code = _prometheus_block()
    assert "grpc://localhost:2136" in code and "9464" in code
    script = tmp_path / "scrape.py"
    script.write_text(code.replace("grpc://localhost:2136", server.endpoint).replace("9464", str(_free_port())))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), cwd=tmp_path,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 45)
    assert proc.returncode == 0, err.decode()
    scrape = out.decode()
    documented = GUIDE.read_text()

    def sample(name: str, **labels: str) -> float:
        """The one sample of ``name`` whose labels include ``labels``."""
        found = []
        for line in scrape.splitlines():
            match = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
            if match and match[1] == name:
                have = dict(re.findall(r'(\w+)="([^"]*)"', match[2]))
                if all(have.get(k) == v for k, v in labels.items()):
                    found.append(float(match[3]))
        assert len(found) == 1, (name, labels, scrape)
        return found[0]

    written = {"messaging_ydb_write_status": "written"}
    assert sample("messaging_client_sent_messages_total", **written) == 3
    assert sample("messaging_ydb_client_sent_bytes_total") == len(b"one") + len(b"two") + len(b"three")
    assert sample("messaging_client_consumed_messages_total") == 3
    assert sample("messaging_ydb_client_consumed_bytes_total") == 11
    assert sample("messaging_ydb_consumer_lag", messaging_consumer_group_name="billing") == 2
    assert sample("messaging_client_operation_duration_seconds_count", messaging_operation_name="commit") == 1
    # The guide shows the output of this very program: every metric it prints is there.
    for line in scrape.splitlines():
        name = line.split("{", 1)[0]
        assert name in documented, f"the guide's sample output lacks {name}"
