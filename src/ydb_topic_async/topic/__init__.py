"""Topic administration and the factories for writers and readers."""

from .client import TopicClient
from .types import (
    AutoPartitioningSettings,
    AutoPartitioningStrategy,
    ConsumerDescription,
    ConsumerPartitionInfo,
    ConsumerSettings,
    MeteringMode,
    PartitionInfo,
    PartitionStats,
    TopicDescription,
)

__all__ = [
    "AutoPartitioningSettings",
    "AutoPartitioningStrategy",
    "ConsumerDescription",
    "ConsumerPartitionInfo",
    "ConsumerSettings",
    "MeteringMode",
    "PartitionInfo",
    "PartitionStats",
    "TopicClient",
    "TopicDescription",
]
