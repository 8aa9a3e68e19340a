"""Topic administration (``TopicAdmin``) and the types it describes topics with; ``driver.topic``
(``TopicClient``) adds the writer and reader factories on top."""

from .admin import TopicAdmin
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
    "TopicDescription",
]
