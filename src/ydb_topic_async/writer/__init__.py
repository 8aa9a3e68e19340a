"""The topic writer: buffered, reconnecting, deduplicated writes to one partition; the keyed
writer spreads messages over a topic's partitions by key; the transactional writer publishes
when a transaction commits."""

from .keyed import KeyedWriter, PartitionWriterStatus
from .keyed_tx import KeyedTxWriter
from .messages import InitInfo, Message, Skipped, WriteResult, WriteStatistics, Written, WrittenInTx
from .partitioning import PARTITION_KEY_METADATA, Partitioner, PartitionFunction, partition_for_key, partition_key
from .settings import (
    DEFAULT_MAX_BUFFER_BYTES,
    DEFAULT_MAX_BUFFER_MESSAGES,
    KeyedWriterOptions,
    WriterOptions,
    WriterSettings,
)
from .tx_writer import TxWriter
from .writer import TopicWriter

__all__ = [
    "DEFAULT_MAX_BUFFER_BYTES",
    "DEFAULT_MAX_BUFFER_MESSAGES",
    "PARTITION_KEY_METADATA",
    "InitInfo",
    "KeyedTxWriter",
    "KeyedWriter",
    "KeyedWriterOptions",
    "Message",
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
]
