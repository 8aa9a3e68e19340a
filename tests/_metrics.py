"""A metrics recorder for tests that counts what they assert on."""

from __future__ import annotations

import ydb_topic_async as yta


class RetryCount(yta.NoopMetrics):
    """Counts the retries of unary calls (``retry``), by operation too."""

    def __init__(self) -> None:
        self.count = 0
        self.operations: list[str] = []

    def retry(self, operation: str, error: BaseException) -> None:
        self.count += 1
        self.operations.append(operation)
