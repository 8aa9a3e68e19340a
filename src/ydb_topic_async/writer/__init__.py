"""The topic writer: buffered, reconnecting, deduplicated writes to one partition; the keyed
writer spreads messages over a topic's partitions by key."""

from .keyed import KeyedWriter
from .messages import InitInfo, Message, Skipped, WriteResult, WriteStatistics, Written, WrittenInTx
from .tx_writer import TxWriter
from .writer import DEFAULT_MAX_BUFFER_BYTES, DEFAULT_MAX_BUFFER_MESSAGES, TopicWriter

__all__ = [
    "DEFAULT_MAX_BUFFER_BYTES",
    "DEFAULT_MAX_BUFFER_MESSAGES",
    "InitInfo",
    "KeyedWriter",
    "Message",
    "Skipped",
    "TopicWriter",
    "TxWriter",
    "WriteResult",
    "WriteStatistics",
    "Written",
    "WrittenInTx",
]
