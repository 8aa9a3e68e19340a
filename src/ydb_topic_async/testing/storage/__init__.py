"""The local server's storage: topics, partitions and their append-only message logs.

Everything the server knows lives here, in plain Python objects owned by one event loop, one
concern per module, lowest first:

- ``log``: a partition's append-only log of stored messages (offset = index + start offset; the
  start moves when retention deletes old messages), what a read of it costs, and the
  deduplication state (source id -> max seq_no);
- ``consumers``: a consumer's committed offset per partition and what its readers were sent;
- ``topics``: ``Topic`` (settings, consumers, partitions, which partition each source id is bound
  to, splits) and ``Partition`` (a log with its key range, parents and children, and node);
- ``transactions``: a transaction's writes and offset commits, held until it commits
  (``PendingWrites`` reach the log only then, at consecutive offsets; ``PendingOffsets`` are
  checked and applied with them);
- ``database``: ``TopicStorage``, path -> ``Topic``: creation, lookup, drop, placement on nodes,
  change notification, and the ``ChangeLog`` every acknowledged change is reported to
  (``change_log``: nothing in memory, the ``journal`` in durable mode).

The value types they hold (``StoredMessage``, ``TopicSettings``, ``StorageError``) are ``stored``'s.

Stream handlers never poll: they register a wake-up event (``TopicStorage.listen``) and are woken
whenever anything they may care about changes (an append, a commit, a split); code that follows a
single partition can ``await partition.wait_for_offset(n)`` instead. Tests split a partition with
``TopicStorage.split_partition`` and inspect messages with ``TopicStorage.read``.
"""

from .consumers import SERVICE_TYPE, Consumer
from .database import TopicStorage
from .log import NewMessage, PartitionLog
from .topics import Partition, Topic, source_key
from .transactions import PendingOffsets, PendingWrites

__all__ = [
    "SERVICE_TYPE",
    "Consumer",
    "NewMessage",
    "Partition",
    "PartitionLog",
    "PendingOffsets",
    "PendingWrites",
    "Topic",
    "TopicStorage",
    "source_key",
]
