"""The topic reader: ``driver.topic.reader(...)``."""

from .messages import (
    CommitAck,
    MessageBatch,
    MessageColumns,
    PartitionSession,
    PartitionSessionState,
    PartitionStatus,
    SkippedOffsets,
    StartOffsets,
    TopicMessage,
    TopicSelector,
)
from .reader import ReaderOptions, TopicReader, TopicsArg

__all__ = [
    "CommitAck",
    "MessageBatch",
    "MessageColumns",
    "PartitionSession",
    "PartitionSessionState",
    "PartitionStatus",
    "ReaderOptions",
    "SkippedOffsets",
    "StartOffsets",
    "TopicMessage",
    "TopicReader",
    "TopicSelector",
    "TopicsArg",
]
