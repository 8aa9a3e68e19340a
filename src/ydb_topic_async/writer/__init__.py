"""The topic writer: buffered, reconnecting, deduplicated writes to one partition."""

from .messages import InitInfo, Message, Skipped, WriteResult, WriteStatistics, Written, WrittenInTx
from .tx_writer import TxWriter
from .writer import DEFAULT_MAX_BUFFER_BYTES, DEFAULT_MAX_BUFFER_MESSAGES, TopicWriter

__all__ = [
    "DEFAULT_MAX_BUFFER_BYTES",
    "DEFAULT_MAX_BUFFER_MESSAGES",
    "InitInfo",
    "Message",
    "Skipped",
    "TopicWriter",
    "TxWriter",
    "WriteResult",
    "WriteStatistics",
    "Written",
    "WrittenInTx",
]
