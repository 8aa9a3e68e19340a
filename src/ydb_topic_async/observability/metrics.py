"""The metrics hook: what the writers and readers of a driver report, for any metrics system.

Implement ``MetricsRecorder`` (most simply by subclassing ``NoopMetrics`` and overriding what
you need) and pass it as ``Driver(..., metrics=recorder)``. The SDK calls it from the event loop
thread, once per server response or per reconnect, never per message, so a recorder must be
cheap and must not block: increment counters and observe histograms, do no I/O. Gauges are
reported as changes (``*_change``), so that several writers or readers sharing a label add up.

Labels are plain arguments: ``topic`` is the full topic path, ``partition_id`` the partition,
``consumer`` the reader's consumer ("" for a reader without one). Producer ids and session ids
are deliberately not passed: they are unbounded and would explode a metric's cardinality.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Protocol, runtime_checkable


@runtime_checkable
class MetricsRecorder(Protocol):
    """Receives the SDK's counters, gauges and latencies."""

    def writer_acks(self, topic: str, partition_id: int, written: int, skipped: int, written_bytes: int) -> None:
        """The server acknowledged ``written`` messages as stored (``written_bytes`` of payload) and
        ``skipped`` as duplicates already stored earlier. Once per WriteResponse."""
        ...

    def writer_ack_latency(self, topic: str, seconds: float, messages: int) -> None:
        """``messages`` sent in one request were acknowledged ``seconds`` after they were sent."""
        ...

    def writer_buffer_change(self, topic: str, messages: int, nbytes: int) -> None:
        """Gauge change: add ``messages`` and ``nbytes`` (either may be negative) to the messages, and
        their bytes, accepted by the writers of ``topic`` and not yet acknowledged.

        Each writer reports how its own buffer changed since its previous report (when it sends a
        batch or receives acknowledgements), and takes out what it still held when it closes or
        fails, so the sum over all writers of a topic stays exact and returns to 0. With
        Prometheus: ``gauge.labels(topic).inc(messages)``.
        """
        ...

    def writer_reconnect(self, topic: str, error: BaseException) -> None:
        """A write stream broke with ``error`` and the writer is about to open a new one."""
        ...

    def reader_messages(self, topic: str, partition_id: int, messages: int, nbytes: int) -> None:
        """``messages`` arrived for one partition (``nbytes`` of decoded payload, as their writers
        declared it). Once per partition per ReadResponse."""
        ...

    def reader_buffer_change(self, consumer: str, messages: int, nbytes: int) -> None:
        """Gauge change: add ``messages`` and ``nbytes`` (either may be negative) to the messages
        received by the readers of ``consumer`` and not yet handed to the user, and the bytes they
        hold (decoded, the unit of the reader's ``buffer_size_bytes``).

        Each reader reports how its own buffer changed since its previous report (when a response
        arrives and when freed buffer space is granted back), and takes out what it still held
        when it closes or fails, so the sum over all readers stays exact and returns to 0.
        """
        ...

    def reader_commit_ack(self, topic: str, partition_id: int, committed_offset: int, lag: int) -> None:
        """The server confirmed ``committed_offset`` for a partition; ``lag`` is how many offsets the
        reader has received past it (received but not yet committed)."""
        ...

    def reader_commit_latency(self, topic: str, consumer: str, seconds: float) -> None:
        """The server confirmed a commit of one partition's offsets ``seconds`` after the request
        carrying it was sent (once per partition per CommitOffsetRequest)."""
        ...

    def reader_lag_change(self, topic: str, partition_id: int, consumer: str, change: int) -> None:
        """Gauge change: add ``change`` (may be negative) to the consumer lag of a partition, the
        offsets between ``consumer``'s committed offset and the partition's end.

        A reader reports the lag of each partition it reads with a consumer: when it starts
        reading the partition, when messages arrive (the end moves), when a commit is confirmed,
        and when it learns a partition's status; it takes its share back out when it stops reading
        the partition, so the sum over every reader stays exact as partitions move between them.
        The end is the one the reader knows: of a partition it cannot take more of (its buffer is
        full) it learns newer messages only as it receives them.
        """
        ...

    def reader_reconnect(self, consumer: str, error: BaseException) -> None:
        """A read stream broke with ``error`` and the reader is about to open a new one."""
        ...

    def retry(self, operation: str, error: BaseException) -> None:
        """A unary call (``operation`` is its method name, e.g. ``DescribeTopic``) failed with a
        retriable ``error`` and is about to be tried again."""
        ...

    def transaction_attempt(self, outcome: str, settled: bool) -> None:
        """One attempt of ``driver.query.retry_tx`` (or of a transactional consumer's batch)
        ended: ``outcome`` is ``"committed"``, ``"retried"`` (nothing was committed; it runs
        again) or ``"failed"`` (raised, or left to the consumer's restart). ``settled`` is True
        when the commit's answer was lost and the consumer offsets the transaction carried
        settled it (committed or not)."""
        ...


class NoopMetrics:
    """A recorder that records nothing: the default, and a base class for partial recorders.

    Subclass it and override only the methods you need; new methods added to the protocol in
    later versions then keep working as no-ops. With this recorder (exactly this class) the SDK
    skips the work of computing metrics altogether.
    """

    def writer_acks(self, topic: str, partition_id: int, written: int, skipped: int, written_bytes: int) -> None:
        pass

    def writer_ack_latency(self, topic: str, seconds: float, messages: int) -> None:
        pass

    def writer_buffer_change(self, topic: str, messages: int, nbytes: int) -> None:
        pass

    def writer_reconnect(self, topic: str, error: BaseException) -> None:
        pass

    def reader_messages(self, topic: str, partition_id: int, messages: int, nbytes: int) -> None:
        pass

    def reader_buffer_change(self, consumer: str, messages: int, nbytes: int) -> None:
        pass

    def reader_commit_ack(self, topic: str, partition_id: int, committed_offset: int, lag: int) -> None:
        pass

    def reader_commit_latency(self, topic: str, consumer: str, seconds: float) -> None:
        pass

    def reader_lag_change(self, topic: str, partition_id: int, consumer: str, change: int) -> None:
        pass

    def reader_reconnect(self, consumer: str, error: BaseException) -> None:
        pass

    def retry(self, operation: str, error: BaseException) -> None:
        pass

    def transaction_attempt(self, outcome: str, settled: bool) -> None:
        pass


def active_recorder(recorder: MetricsRecorder | None) -> MetricsRecorder | None:
    """The recorder the SDK should call, or None when nothing would be recorded (so the hot paths
    can skip computing the values)."""
    if recorder is None or type(recorder) is NoopMetrics:
        return None
    return recorder


class GaugeShare:
    """One writer's or reader's part of a messages/bytes gauge that several of them add to.

    Recorders take changes, not levels: ``report`` passes on how the level moved since the
    previous report, so reporting ``0, 0`` at the end takes the whole share back out.
    """

    __slots__ = ("messages", "nbytes")

    def __init__(self) -> None:
        self.messages = 0
        self.nbytes = 0

    def report(self, change: Callable[[str, int, int], None], label: str, messages: int, nbytes: int) -> None:
        """Call ``change(label, ...)`` with the difference to the previous report, if there is one."""
        reported_messages, reported_bytes = self.messages, self.nbytes
        if messages != reported_messages or nbytes != reported_bytes:
            self.messages, self.nbytes = messages, nbytes
            change(label, messages - reported_messages, nbytes - reported_bytes)


# --- what writers and readers report -------------------------------------------------------------
#
# The stream code calls one report object per writer or reader at fixed points (a request sent,
# acknowledgements received, a response received, a reconnect), with plain values: topics,
# partition ids, counts, bytes, offsets. Without a recorder that object is a shared no-op, so the
# protocol code never asks whether metrics are on, except where a value costs work to compute
# (``WriterReport.wants_statuses``, ``ReaderReport.recording``).


class WriterReport:
    """What one writer reports; this base reports nothing (metrics off)."""

    __slots__ = ()

    wants_statuses = False
    """Whether ``acked`` needs the written/skipped split (reading each ack's status costs time)."""

    def sent(self, messages: int) -> None:
        """A request with ``messages`` messages went out on the current stream."""

    def acked(self, partition_id: int, count: int, skipped: int, written_bytes: int) -> None:
        """``count`` messages were acknowledged, ``skipped`` of them as duplicates."""

    def buffer_changed(self) -> None:
        """The writer's buffer changed (messages sent, acknowledged or dropped)."""

    def stream_started(self) -> None:
        """A new stream starts: requests of the old one will not be acknowledged."""

    def reconnect(self, error: BaseException) -> None:
        """The stream broke with ``error`` and the writer opens a new one."""

    def closed(self) -> None:
        """The writer stopped: nothing it held counts any more."""


class _RecordingWriterReport(WriterReport):
    __slots__ = ("_buffer", "_recorder", "_sent", "_share", "_topic")

    wants_statuses = True

    def __init__(self, recorder: MetricsRecorder, topic: str, buffer: Callable[[], tuple[int, int]]) -> None:
        self._recorder = recorder
        self._topic = topic
        self._buffer = buffer
        self._share = GaugeShare()
        self._sent: deque[list[float]] = deque()
        """Per request of the current stream, oldest first: [sent at, messages awaiting acks]."""

    def sent(self, messages: int) -> None:
        self._sent.append([time.monotonic(), messages])

    def acked(self, partition_id: int, count: int, skipped: int, written_bytes: int) -> None:
        recorder, topic = self._recorder, self._topic
        recorder.writer_acks(topic, partition_id, count - skipped, skipped, written_bytes)
        # Acks come in seq_no order, and requests were sent in that order: the oldest marks are theirs.
        now = time.monotonic()
        marks = self._sent
        left = count
        while left and marks:
            mark = marks[0]
            taken = min(left, int(mark[1]))
            recorder.writer_ack_latency(topic, now - mark[0], taken)
            left -= taken
            mark[1] -= taken
            if not mark[1]:
                marks.popleft()

    def buffer_changed(self) -> None:
        messages, nbytes = self._buffer()
        self._share.report(self._recorder.writer_buffer_change, self._topic, messages, nbytes)

    def stream_started(self) -> None:
        self._sent.clear()

    def reconnect(self, error: BaseException) -> None:
        self._recorder.writer_reconnect(self._topic, error)

    def closed(self) -> None:
        # Stopped or failed: whatever the buffer still holds is the writer's no longer, and the
        # gauge summed over every writer of the topic must not keep it.
        self._share.report(self._recorder.writer_buffer_change, self._topic, 0, 0)


class ReaderReport:
    """What one reader reports; this base reports nothing (metrics off)."""

    __slots__ = ()

    recording = False
    """Whether ``received`` and ``commit_acked`` record anything: the reader computes their values
    (summing a response's payload sizes costs a pass over its messages) only when they do."""

    def received(self, topic: str, partition_id: int, messages: int, nbytes: int) -> None:
        """``messages`` of one partition arrived in one response, ``nbytes`` of decoded payload
        as their writers declared it."""

    def buffer_changed(self) -> None:
        """The reader's buffer changed (a response arrived, credit was granted back)."""

    def commit_acked(self, topic: str, partition_id: int, committed_offset: int, lag: int) -> None:
        """The server confirmed ``committed_offset`` for a partition; ``lag``: the offsets
        received past it."""

    def partition_progress(
        self, session_id: int, topic: str, partition_id: int, end_offset: int, committed_offset: int
    ) -> None:
        """A partition session's end (as far as the reader knows it) or committed offset moved."""

    def commit_sent(self, session_id: int, end_offset: int) -> None:
        """A commit of a partition session's offsets up to ``end_offset`` went out."""

    def partition_closed(self, session_id: int) -> None:
        """A partition session ended: its lag is no longer this reader's to report."""

    def reconnect(self, error: BaseException) -> None:
        """The stream broke with ``error`` and the reader opens a new one."""

    def closed(self) -> None:
        """The reader stopped: nothing it held counts any more."""


class _PartitionShare:
    """One partition session's part of the consumer lag gauge, and its commits awaiting the server."""

    __slots__ = ("commits", "lag", "partition_id", "topic")

    def __init__(self, topic: str, partition_id: int) -> None:
        self.topic = topic
        self.partition_id = partition_id
        self.lag = 0
        self.commits: deque[tuple[float, int]] = deque()
        """(sent at, end offset) of each commit sent and not yet confirmed, oldest first."""


class _RecordingReaderReport(ReaderReport):
    __slots__ = ("_buffer", "_consumer", "_partitions", "_recorder", "_share")

    recording = True

    def __init__(self, recorder: MetricsRecorder, consumer: str, buffer: Callable[[], tuple[int, int]]) -> None:
        self._recorder = recorder
        self._consumer = consumer
        self._buffer = buffer
        self._share = GaugeShare()
        self._partitions: dict[int, _PartitionShare] = {}
        """Per partition session id: its lag share and pending commits (with a consumer only:
        without one nothing is committed and there is no lag to speak of)."""

    def received(self, topic: str, partition_id: int, messages: int, nbytes: int) -> None:
        self._recorder.reader_messages(topic, partition_id, messages, nbytes)

    def buffer_changed(self) -> None:
        messages, nbytes = self._buffer()
        self._share.report(self._recorder.reader_buffer_change, self._consumer, messages, nbytes)

    def commit_acked(self, topic: str, partition_id: int, committed_offset: int, lag: int) -> None:
        self._recorder.reader_commit_ack(topic, partition_id, committed_offset, lag)

    def partition_progress(
        self, session_id: int, topic: str, partition_id: int, end_offset: int, committed_offset: int
    ) -> None:
        if not self._consumer:
            return
        share = self._partitions.get(session_id)
        if share is None:
            share = self._partitions[session_id] = _PartitionShare(topic, partition_id)
        commits = share.commits
        if commits and commits[0][1] <= committed_offset:
            now = time.monotonic()
            while commits and commits[0][1] <= committed_offset:
                self._recorder.reader_commit_latency(topic, self._consumer, now - commits.popleft()[0])
        lag = end_offset - committed_offset if end_offset > committed_offset else 0
        if lag != share.lag:
            change, share.lag = lag - share.lag, lag
            self._recorder.reader_lag_change(topic, partition_id, self._consumer, change)

    def commit_sent(self, session_id: int, end_offset: int) -> None:
        share = self._partitions.get(session_id)
        if share is not None:
            share.commits.append((time.monotonic(), end_offset))

    def partition_closed(self, session_id: int) -> None:
        share = self._partitions.pop(session_id, None)
        if share is not None and share.lag:
            self._recorder.reader_lag_change(share.topic, share.partition_id, self._consumer, -share.lag)

    def reconnect(self, error: BaseException) -> None:
        self._recorder.reader_reconnect(self._consumer, error)

    def closed(self) -> None:
        self._share.report(self._recorder.reader_buffer_change, self._consumer, 0, 0)
        for session_id in list(self._partitions):
            self.partition_closed(session_id)


_NO_WRITER_REPORT = WriterReport()
_NO_READER_REPORT = ReaderReport()


def writer_report(recorder: MetricsRecorder | None, topic: str, buffer: Callable[[], tuple[int, int]]) -> WriterReport:
    """The report of one writer of ``topic``; ``buffer()`` gives its (messages, bytes) held."""
    active = active_recorder(recorder)
    return _NO_WRITER_REPORT if active is None else _RecordingWriterReport(active, topic, buffer)


def reader_report(
    recorder: MetricsRecorder | None, consumer: str, buffer: Callable[[], tuple[int, int]]
) -> ReaderReport:
    """The report of one reader of ``consumer``; ``buffer()`` gives its (messages, bytes) held."""
    active = active_recorder(recorder)
    return _NO_READER_REPORT if active is None else _RecordingReaderReport(active, consumer, buffer)


__all__ = ["MetricsRecorder", "NoopMetrics"]
