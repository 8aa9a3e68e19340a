"""The topic reader: ``driver.topic.reader(...)``."""

from .messages import (
    MessageBatch,
    MessageColumns,
    PartitionSession,
    PartitionSessionState,
    PartitionStatus,
    StartOffsets,
    TopicMessage,
    TopicSelector,
)
from .reader import ReaderOptions, TopicReader, TopicsArg

__all__ = [
    "MessageBatch",
    "MessageColumns",
    "PartitionSession",
    "PartitionSessionState",
    "PartitionStatus",
    "ReaderOptions",
    "StartOffsets",
    "TopicMessage",
    "TopicReader",
    "TopicSelector",
    "TopicsArg",
]
