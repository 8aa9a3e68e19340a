"""Topic administration and the factories for writers and readers."""

from .admin import TopicAdmin
from .client import TopicClient
from .types import (
    AlterConsumerSettings,
    AutoPartitioningSettings,
    AutoPartitioningStrategy,
    ConsumerDescription,
    ConsumerPartitionInfo,
    ConsumerSettings,
    ConsumerStats,
    MeteringMode,
    MetricsLevel,
    PartitionInfo,
    PartitionLocation,
    PartitionStats,
    TopicDescription,
)

__all__ = [
    "AlterConsumerSettings",
    "AutoPartitioningSettings",
    "AutoPartitioningStrategy",
    "ConsumerDescription",
    "ConsumerPartitionInfo",
    "ConsumerSettings",
    "ConsumerStats",
    "MeteringMode",
    "MetricsLevel",
    "PartitionInfo",
    "PartitionLocation",
    "PartitionStats",
    "TopicAdmin",
    "TopicClient",
    "TopicDescription",
]
