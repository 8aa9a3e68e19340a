"""Executor side of writes, one file each: the rows and where they go (``rows``), what every
write task is made of (``tasks``), batch writes (``batch``), the exactly-once streaming sink
(``sink``, its producers and digests in ``producers``) and the replay of a micro-batch an earlier
run started (``replay``)."""

from .batch import write_batch_task
from .rows import DIGEST_KEY, Chunk, Columns, Record, chunks_from_arrow, chunks_from_rows
from .sink import write_sink_task
from .tasks import YdbTopicCommitMessage
from .tasks import read_between as _read_between

__all__ = [
    "DIGEST_KEY",
    "Chunk",
    "Columns",
    "Record",
    "YdbTopicCommitMessage",
    "_read_between",
    "chunks_from_arrow",
    "chunks_from_rows",
    "write_batch_task",
    "write_sink_task",
]
