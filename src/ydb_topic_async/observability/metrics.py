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
        """``messages`` arrived for one partition (``nbytes`` of decoded payload). Once per partition
        per ReadResponse."""
        ...

    def reader_buffer_change(self, consumer: str, messages: int, nbytes: int) -> None:
        """Gauge change: add ``messages`` and ``nbytes`` (either may be negative) to the messages
        received by the readers of ``consumer`` and not yet handed to the user, and the bytes they
        hold (as the server counts them, the unit of the reader's ``buffer_size_bytes``).

        Each reader reports how its own buffer changed since its previous report (when a response
        arrives and when freed buffer space is granted back), and takes out what it still held
        when it closes or fails, so the sum over all readers stays exact and returns to 0.
        """
        ...

    def reader_commit_ack(self, topic: str, partition_id: int, committed_offset: int, lag: int) -> None:
        """The server confirmed ``committed_offset`` for a partition; ``lag`` is how many offsets the
        reader has received past it (received but not yet committed)."""
        ...

    def reader_reconnect(self, consumer: str, error: BaseException) -> None:
        """A read stream broke with ``error`` and the reader is about to open a new one."""
        ...

    def retry(self, operation: str, error: BaseException) -> None:
        """A unary call (``operation`` is its method name, e.g. ``DescribeTopic``) failed with a
        retriable ``error`` and is about to be tried again."""
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

    def reader_reconnect(self, consumer: str, error: BaseException) -> None:
        pass

    def retry(self, operation: str, error: BaseException) -> None:
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


__all__ = ["MetricsRecorder", "NoopMetrics"]
