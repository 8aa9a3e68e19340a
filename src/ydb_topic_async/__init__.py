"""asyncio-native SDK for YDB Topics.

    async with Driver("grpc://localhost:2136/?database=/local") as driver:
        await driver.topic.create_topic("events", consumers=["analytics"])
"""

from ._codecs import LZ4_CODEC, Codec, ThreadSafe, lz4_decode, lz4_encode
from ._credentials import (
    AccessTokenCredentials,
    AnonymousCredentials,
    Credentials,
    FixedTokenSource,
    JwtTokenSource,
    MetadataUrlCredentials,
    Oauth2TokenExchangeCredentials,
    ServiceAccountCredentials,
    StaticCredentials,
    TokenProviderCredentials,
    TokenSource,
    credentials_from_env,
)
from ._driver import Driver
from ._errors import *  # noqa: F403 - the exception tree is public as a whole
from ._errors import __all__ as _error_names
from ._retry import BackoffSchedule, RetryPolicy, RetryState, retry_call
from ._stream import ConnectionState
from ._topic_client import TopicClient
from ._version import __version__
from .observability import MetricsRecorder, NoopMetrics, OpenTelemetryMetrics, OpenTelemetryTracing
from .query import QueryClient, Transaction, TransactionState
from .reader import (
    CommitAck,
    MessageBatch,
    MessageColumns,
    PartitionSession,
    PartitionSessionState,
    PartitionStatus,
    ReaderOptions,
    ReaderSettings,
    SkippedOffsets,
    StartOffsets,
    TopicMessage,
    TopicReader,
    TopicsArg,
    TopicSelector,
)
from .topic import (
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
from .writer import (
    PARTITION_KEY_METADATA,
    InitInfo,
    KeyedTxWriter,
    KeyedWriter,
    KeyedWriterOptions,
    Message,
    Partitioner,
    PartitionFunction,
    PartitionWriterStatus,
    Skipped,
    TopicWriter,
    TxWriter,
    WriteResult,
    WriterOptions,
    WriterSettings,
    WriteStatistics,
    Written,
    WrittenInTx,
    partition_for_key,
    partition_key,
)

__all__ = [
    # The driver: connection, credentials, retries.
    "AccessTokenCredentials",
    "AnonymousCredentials",
    "BackoffSchedule",
    "ConnectionState",
    "Credentials",
    "Driver",
    "FixedTokenSource",
    "JwtTokenSource",
    "MetadataUrlCredentials",
    "Oauth2TokenExchangeCredentials",
    "RetryPolicy",
    "RetryState",
    "ServiceAccountCredentials",
    "StaticCredentials",
    "TokenProviderCredentials",
    "TokenSource",
    "credentials_from_env",
    "retry_call",
    # Topic administration (driver.topic).
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
    "TopicClient",
    "TopicDescription",
    # Writing.
    "InitInfo",
    "KeyedTxWriter",
    "KeyedWriter",
    "KeyedWriterOptions",
    "Message",
    "PARTITION_KEY_METADATA",
    "PartitionFunction",
    "PartitionWriterStatus",
    "Partitioner",
    "Skipped",
    "TopicWriter",
    "TxWriter",
    "WriteResult",
    "WriteStatistics",
    "WriterOptions",
    "WriterSettings",
    "Written",
    "WrittenInTx",
    "partition_for_key",
    "partition_key",
    # Reading.
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
    # Transactions (driver.query).
    "QueryClient",
    "Transaction",
    "TransactionState",
    # Codecs.
    "LZ4_CODEC",
    "Codec",
    "ThreadSafe",
    "lz4_decode",
    "lz4_encode",
    # Observability.
    "MetricsRecorder",
    "NoopMetrics",
    "OpenTelemetryMetrics",
    "OpenTelemetryTracing",
    # The version, and the exception tree (see ``YdbTopicError``).
    "__version__",
    *_error_names,
]
