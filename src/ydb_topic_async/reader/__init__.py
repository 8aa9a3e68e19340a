"""The topic reader: ``driver.topic.reader(...)``."""

from .bookkeeping import PartitionSessionState
from .messages import (
    CommitAck,
    MessageBatch,
    MessageColumns,
    PartitionSession,
    PartitionStatus,
    SkippedOffsets,
    StartOffsets,
    TopicMessage,
    TopicSelector,
)
from .reader import TopicReader, TopicsArg
from .settings import ReaderOptions, ReaderSettings

__all__ = [
    "CommitAck",
    "MessageBatch",
    "MessageColumns",
    "PartitionSession",
    "PartitionSessionState",
    "PartitionStatus",
    "ReaderOptions",
    "ReaderSettings",
    "SkippedOffsets",
    "StartOffsets",
    "TopicMessage",
    "TopicReader",
    "TopicSelector",
    "TopicsArg",
]
