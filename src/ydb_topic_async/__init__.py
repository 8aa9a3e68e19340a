"""asyncio-native SDK for YDB Topics.

    async with Driver("grpc://localhost:2136/?database=/local") as driver:
        await driver.topic.create_topic("events", consumers=["analytics"])
"""

from ._codecs import LZ4_CODEC, Codec, ThreadSafe, lz4_decode, lz4_encode
from ._credentials import (
    AccessTokenCredentials,
    AnonymousCredentials,
    Credentials,
    StaticCredentials,
    TokenProviderCredentials,
)
from ._driver import Driver
from ._errors import *  # noqa: F403 - the exception tree is public as a whole
from ._errors import __all__ as _error_names
from ._retry import BackoffSchedule, RetryPolicy
from ._stream import ConnectionState
from ._version import __version__
from .observability import MetricsRecorder, NoopMetrics, OpenTelemetryTracing
from .query import QueryClient, Transaction, TransactionState
from .reader import (
    MessageBatch,
    MessageColumns,
    PartitionSession,
    PartitionStatus,
    StartOffsets,
    TopicMessage,
    TopicReader,
    TopicSelector,
)
from .topic import (
    AutoPartitioningSettings,
    AutoPartitioningStrategy,
    ConsumerDescription,
    ConsumerPartitionInfo,
    ConsumerSettings,
    MeteringMode,
    PartitionInfo,
    PartitionStats,
    TopicClient,
    TopicDescription,
)
from .topic.types import AlterConsumerSettings, PartitionLocation
from .writer import (
    InitInfo,
    KeyedWriter,
    Message,
    Skipped,
    TopicWriter,
    TxWriter,
    WriteResult,
    WriteStatistics,
    Written,
    WrittenInTx,
)

__all__ = [
    "LZ4_CODEC",
    "AccessTokenCredentials",
    "AlterConsumerSettings",
    "AnonymousCredentials",
    "AutoPartitioningSettings",
    "AutoPartitioningStrategy",
    "BackoffSchedule",
    "Codec",
    "ConnectionState",
    "ConsumerDescription",
    "ConsumerPartitionInfo",
    "ConsumerSettings",
    "Credentials",
    "Driver",
    "MeteringMode",
    "MetricsRecorder",
    "NoopMetrics",
    "OpenTelemetryTracing",
    "PartitionInfo",
    "PartitionLocation",
    "PartitionStats",
    "QueryClient",
    "RetryPolicy",
    "StaticCredentials",
    "TokenProviderCredentials",
    "TopicClient",
    "TopicDescription",
    "ThreadSafe",
    "InitInfo",
    "KeyedWriter",
    "MessageBatch",
    "MessageColumns",
    "PartitionSession",
    "PartitionStatus",
    "StartOffsets",
    "TopicMessage",
    "TopicReader",
    "TopicSelector",
    "Message",
    "Skipped",
    "TopicWriter",
    "Transaction",
    "TransactionState",
    "TxWriter",
    "WriteResult",
    "WriteStatistics",
    "Written",
    "WrittenInTx",
    "__version__",
    "lz4_decode",
    "lz4_encode",
    *_error_names,
]
