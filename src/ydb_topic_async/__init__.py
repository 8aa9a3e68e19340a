"""asyncio-native SDK for YDB Topics.

    async with Driver("grpc://localhost:2136/?database=/local") as driver:
        await driver.topic.create_topic("events", consumers=["analytics"])
"""

import dataclasses as _dataclasses
import inspect as _inspect
import sys as _sys
import typing as _typing

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


def _publish(names: list[str]) -> None:
    """Give each exported class and function this package as its module, as httpx does: reprs,
    tracebacks and pickles name ``ydb_topic_async.X``, where users import it from, not the private
    module that defines it.

    A class's own annotations are resolved first, in the module that defines it: tools that read
    them (``typing.get_type_hints``, dataclass and pydantic introspection) look the names of
    string annotations up in the module ``__module__`` names, which would no longer hold them.
    """
    package = _sys.modules[__name__]
    published = []
    for name in names:
        obj = getattr(package, name)
        if not (isinstance(obj, type) or _inspect.isfunction(_inspect.unwrap(obj))):
            continue  # constants and type aliases have no module of their own
        if not obj.__module__.startswith(__name__ + ".") or getattr(package, obj.__qualname__, None) is not obj:
            continue  # not ours, or exported under another name: pickles must find it by its own
        if isinstance(obj, type):
            _resolve_annotations(obj)
        published.append(obj)
    for obj in published:
        obj.__module__ = __name__


def _resolve_annotations(cls: type) -> None:
    own = _inspect.get_annotations(cls)
    if not own:
        return
    hints = _typing.get_type_hints(cls, include_extras=True)
    cls.__annotations__ = {key: hints[key] for key in own}
    if _dataclasses.is_dataclass(cls):
        for field in _dataclasses.fields(cls):
            field.type = hints[field.name]


_publish(__all__)
