"""The metrics hook: exact counts from a recording implementation against the local server."""

from __future__ import annotations

import pytest

import ydb_topic_async as yta
from ydb_topic_async.observability.metrics import ReaderReport, WriterReport, reader_report, writer_report
from ydb_topic_async.testing import LocalTopicServer
from ydb_topic_async.testing.proxy import proxy_to

from .._helpers import proxied_driver
from .._polling import eventually
from ._recording import RecordingMetrics

pytestmark = pytest.mark.timeout(30)


def _totals(rows: list[tuple[object, ...]], *columns: int) -> tuple[int, ...]:
    return tuple(sum(int(row[c]) for row in rows) for c in columns)  # type: ignore[call-overload]


async def test_writer_reports_acks_latency_buffer_and_a_reconnect(server: LocalTopicServer) -> None:
    metrics = RecordingMetrics()
    async with yta.Driver(server.endpoint, server.database, discovery=False, metrics=metrics) as driver:
        await driver.topic.create_topic("metrics-writer")
        path = driver.topic.full_path("metrics-writer")
        async with driver.topic.writer("metrics-writer", producer_id="p", partition_id=0) as writer:
            for _ in range(3):
                assert isinstance(await writer.write_with_ack(b"x" * 10), yta.Written)
            # The server stores the next message but the stream breaks before its ack: the writer
            # reconnects, resends it, and the server answers that it is already written.
            server.faults.drop_write_stream_after(1)
            assert isinstance(await writer.write_with_ack(b"y" * 20), yta.Skipped)
            results = await writer.write_with_ack([yta.Message(b"z" * 7, metadata={"k": b"v"}), b"w" * 5])
            assert all(isinstance(r, yta.Written) for r in results)

    acks = metrics.of("writer_acks")
    assert {(row[0], row[1]) for row in acks} == {(path, 0)}
    assert _totals(acks, 2, 3, 4) == (5, 1, 3 * 10 + 7 + 5)  # written, skipped, payload bytes written

    reconnects = metrics.of("writer_reconnect")
    assert len(reconnects) == 1
    assert reconnects[0][0] == path
    assert isinstance(reconnects[0][1], yta.TransportError)  # the stream broke under the writer

    latencies = metrics.of("writer_ack_latency")
    assert sum(row[2] for row in latencies) == 6  # every acknowledged message, the resent one once
    assert all(row[0] == path and 0 <= row[1] < 10 for row in latencies)

    gauge = metrics.gauge("writer_buffer_change", path)
    assert max(messages for messages, _ in gauge) >= 1  # seen while messages awaited acks
    assert gauge[-1] == (0, 0)  # everything acknowledged at the end
    assert metrics.of("retry") == []


async def test_reader_reports_messages_buffer_commits_and_a_reconnect(server: LocalTopicServer) -> None:
    metrics = RecordingMetrics()
    async with yta.Driver(server.endpoint, server.database, discovery=False, metrics=metrics) as driver:
        await driver.topic.create_topic("metrics-reader", consumers=["c"])
        path = driver.topic.full_path("metrics-reader")
        first = [b"a" * n for n in (1, 2, 3, 4, 5)]
        second = [b"b" * n for n in (10, 20, 30)]
        async with driver.topic.writer("metrics-reader", producer_id="p", partition_id=0) as writer:
            await writer.write_with_ack(list(first))
            async with driver.topic.reader("metrics-reader", consumer="c") as reader:
                received = [await reader.receive_message(timeout=10) for _ in first]
                assert [m.data for m in received] == first
                for message in received[:-1]:
                    reader.commit(message)  # commits are contiguous: every message is committed
                await reader.commit_with_ack(received[-1], timeout=10)
                assert server.faults.drop_read_streams() == 1
                await writer.write_with_ack(list(second))
                received = [await reader.receive_message(timeout=10) for _ in second]
                assert [m.data for m in received] == second  # committed ones are not delivered again
                for message in received[:-1]:
                    reader.commit(message)  # commits are contiguous: every message is committed
                await reader.commit_with_ack(received[-1], timeout=10)
                await eventually(lambda: metrics.gauge("reader_buffer_change", "c")[-1] == (0, 0))

    messages = metrics.of("reader_messages")
    assert {(row[0], row[1]) for row in messages} == {(path, 0)}
    assert _totals(messages, 2, 3) == (8, sum(map(len, first + second)))

    reconnects = metrics.of("reader_reconnect")
    assert [row[0] for row in reconnects] == ["c"]
    assert isinstance(reconnects[0][1], yta.TransportError)  # the stream broke under the reader

    commits = metrics.of("reader_commit_ack")
    assert {(row[0], row[1]) for row in commits} == {(path, 0)}
    assert (path, 0, 5, 0) in commits  # the first stream's commit, nothing received past it
    assert commits[-1] == (path, 0, 8, 0)

    gauge = metrics.gauge("reader_buffer_change", "c")
    assert max(messages for messages, _ in gauge) >= 1
    assert max(nbytes for _, nbytes in gauge) > 0
    assert gauge[-1] == (0, 0)


async def test_buffer_gauges_of_writers_sharing_a_topic_add_up_and_return_to_zero(server: LocalTopicServer) -> None:
    metrics = RecordingMetrics()
    async with proxy_to(server) as network, proxied_driver(server, network, metrics=metrics) as driver:
        await driver.topic.create_topic("metrics-shared", min_active_partitions=3)
        path = driver.topic.full_path("metrics-shared")
        first = driver.topic.writer("metrics-shared", producer_id="first", partition_id=0)
        second = driver.topic.writer("metrics-shared", producer_id="second", partition_id=1)
        doomed = driver.topic.writer(
            "metrics-shared", producer_id="doomed", partition_id=2, retry=yta.RetryPolicy.no_retries()
        )
        writers = (first, second, doomed)

        def gauge() -> tuple[int, int]:
            levels = metrics.gauge("writer_buffer_change", path)
            return levels[-1] if levels else (0, 0)

        def buffered() -> tuple[int, int]:
            return sum(w.buffered_messages for w in writers), sum(w.buffered_bytes for w in writers)

        async with first, second:
            for writer in writers:
                await writer.wait_init(timeout=10)
            network.stall()  # the requests go out, the acks cannot come back
            try:
                await first.write([b"a" * 10] * 3)
                await second.write([b"b" * 7] * 5)
                await doomed.write([b"c" * 4] * 2)
                assert buffered() == (10, 30 + 35 + 8)
                await eventually(lambda: gauge() == buffered())
                # A writer stopped before its messages were acknowledged takes them out of the gauge.
                with pytest.raises(yta.OperationTimeoutError):
                    await first.close(timeout=0.1)
                assert gauge() == buffered() == (7, 35 + 8)
                # So does one that fails: its stream breaks and it may not reconnect.
                server.faults.drop_write_streams()
            finally:
                network.resume()
            await eventually(lambda: doomed.failure is not None)
            assert doomed.buffered_messages == 0
            assert gauge() == buffered() and gauge()[0] in (5, 0)  # the other may have resent and been acknowledged
            with pytest.raises(yta.YdbTopicError):
                await doomed.close()
        # The last one reconnected, resent, was acknowledged and closed.
        assert second.failure is None
        assert gauge() == (0, 0)


async def test_buffer_gauge_of_a_closed_reader_returns_to_zero(server: LocalTopicServer) -> None:
    metrics = RecordingMetrics()
    async with yta.Driver(server.endpoint, server.database, discovery=False, metrics=metrics) as driver:
        await driver.topic.create_topic("metrics-reader-close", consumers=["c"])
        async with driver.topic.writer("metrics-reader-close", producer_id="p", partition_id=0) as writer:
            await writer.write_with_ack([b"m" * 5] * 4)
        async with driver.topic.reader("metrics-reader-close", consumer="c") as reader:
            assert (await reader.receive_message(timeout=10)).data == b"m" * 5
            assert metrics.gauge("reader_buffer_change", "c")[-1][0] >= 3
        # Closed with messages it never handed out: they no longer count.
        assert metrics.gauge("reader_buffer_change", "c")[-1] == (0, 0)


async def test_retries_of_unary_calls_are_counted(server: LocalTopicServer) -> None:
    metrics = RecordingMetrics()
    async with yta.Driver(server.endpoint, server.database, discovery=False, metrics=metrics) as driver:
        await driver.topic.create_topic("metrics-retry")
        server.faults.fail_next("DescribeTopic", "UNAVAILABLE", times=2)
        description = await driver.topic.describe_topic("metrics-retry")
        assert description.path.endswith("metrics-retry")
    retries = metrics.of("retry")
    assert [row[0] for row in retries] == ["DescribeTopic", "DescribeTopic"]
    assert all(isinstance(row[1], yta.UnavailableError) for row in retries)


async def test_partial_recorder_subclasses_noop_metrics(server: LocalTopicServer) -> None:
    class AckCounter(yta.NoopMetrics):
        def __init__(self) -> None:
            self.written = 0

        def writer_acks(self, topic: str, partition_id: int, written: int, skipped: int, written_bytes: int) -> None:
            self.written += written

    counter = AckCounter()
    async with yta.Driver(server.endpoint, server.database, discovery=False, metrics=counter) as driver:
        await driver.topic.create_topic("metrics-partial")
        async with driver.topic.writer("metrics-partial") as writer:
            for i in range(4):
                await writer.write(f"m{i}")
    assert counter.written == 4


def test_driver_refuses_an_incomplete_recorder() -> None:
    class OnlyAcks:
        def writer_acks(self, topic: str, partition_id: int, written: int, skipped: int, written_bytes: int) -> None:
            pass

    with pytest.raises(yta.InvalidArgumentError, match="subclass NoopMetrics"):
        yta.Driver("grpc://127.0.0.1:2136", "/local", metrics=OnlyAcks())  # type: ignore[arg-type]


def test_the_default_recorder_is_a_noop() -> None:
    driver = yta.Driver("grpc://127.0.0.1:2136", "/local")
    assert type(driver.metrics) is yta.NoopMetrics
    # The hot paths skip metric work entirely: writers and readers made with the driver's
    # recorder get the shared no-op report (the factories every writer and reader use).
    no_buffer = lambda: (0, 0)  # noqa: E731
    assert type(writer_report(driver.metrics, "t", no_buffer)) is WriterReport
    assert type(reader_report(driver.metrics, "c", no_buffer)) is ReaderReport
    assert type(writer_report(RecordingMetrics(), "t", no_buffer)) is not WriterReport
