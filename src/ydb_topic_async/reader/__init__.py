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
from .reader import TopicReader

__all__ = [
    "MessageBatch",
    "MessageColumns",
    "PartitionSession",
    "PartitionSessionState",
    "PartitionStatus",
    "StartOffsets",
    "TopicMessage",
    "TopicReader",
    "TopicSelector",
]
