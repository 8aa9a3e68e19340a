"""A metrics recorder that keeps every call, for asserting exact counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RecordingMetrics:
    """Implements every ``MetricsRecorder`` method (structurally, without subclassing)."""

    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for method, args in self.calls if method == name]

    def gauge(self, name: str, label: str) -> list[tuple[int, int]]:
        """The (messages, bytes) a gauge fed by ``name`` changes showed under ``label``, after each change."""
        levels: list[tuple[int, int]] = []
        messages = nbytes = 0
        for row in self.of(name):
            if row[0] == label:
                messages += row[1]
                nbytes += row[2]
                levels.append((messages, nbytes))
        return levels

    def writer_acks(self, topic: str, partition_id: int, written: int, skipped: int, written_bytes: int) -> None:
        self.calls.append(("writer_acks", (topic, partition_id, written, skipped, written_bytes)))

    def writer_ack_latency(self, topic: str, seconds: float, messages: int) -> None:
        self.calls.append(("writer_ack_latency", (topic, seconds, messages)))

    def writer_buffer_change(self, topic: str, messages: int, nbytes: int) -> None:
        self.calls.append(("writer_buffer_change", (topic, messages, nbytes)))

    def writer_reconnect(self, topic: str, error: BaseException) -> None:
        self.calls.append(("writer_reconnect", (topic, error)))

    def reader_messages(self, topic: str, partition_id: int, messages: int, nbytes: int) -> None:
        self.calls.append(("reader_messages", (topic, partition_id, messages, nbytes)))

    def reader_buffer_change(self, consumer: str, messages: int, nbytes: int) -> None:
        self.calls.append(("reader_buffer_change", (consumer, messages, nbytes)))

    def reader_commit_ack(self, topic: str, partition_id: int, committed_offset: int, lag: int) -> None:
        self.calls.append(("reader_commit_ack", (topic, partition_id, committed_offset, lag)))

    def reader_commit_latency(self, topic: str, consumer: str, seconds: float) -> None:
        self.calls.append(("reader_commit_latency", (topic, consumer, seconds)))

    def reader_lag_change(self, topic: str, partition_id: int, consumer: str, change: int) -> None:
        self.calls.append(("reader_lag_change", (topic, partition_id, consumer, change)))

    def reader_reconnect(self, consumer: str, error: BaseException) -> None:
        self.calls.append(("reader_reconnect", (consumer, error)))

    def retry(self, operation: str, error: BaseException) -> None:
        self.calls.append(("retry", (operation, error)))

    def transaction_attempt(self, outcome: str, settled: bool) -> None:
        self.calls.append(("transaction_attempt", (outcome, settled)))
