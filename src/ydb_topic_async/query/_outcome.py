"""Settling a commit whose answer was lost, from the consumer offsets the transaction carried.

A transaction that read topic messages (``receive_batch_with_tx``) commits, with its writes, the
consumer's offsets of what it read: for each partition one contiguous span ``[start, end)``.
YDB applies such a commit only if the consumer's committed offset of the partition is exactly
``start`` at that moment (otherwise it aborts the transaction), and then moves it to exactly
``end``, atomically with the writes. So when the answer to ``CommitTransaction`` is lost, the
committed offset tells the outcome:

- it is ``end``: the transaction committed (its writes are stored);
- it is ``start``: it did not, and can no longer commit after a repeat that reads the same
  messages has committed (a second commit from ``start`` is aborted), so repeating is safe;
- anything else: something other than this transaction moved the offsets, and nothing can tell.

What makes the reading sound is that nothing else moves those offsets between the commit and
the check. The reader that read the messages holds the partition through its partition session
and commits it only through transactions; while that partition session lives, the server gives
the partition to no other reader of the consumer. The check therefore asks the partition session
itself (``PartitionSessionStatusRequest`` on the same read stream): an answer for that session
proves it was held throughout, from the read to the answer. When the partition session was lost
(its read stream broke too), the offsets are read with ``DescribeConsumer``; the verdict is then
exact unless another reader of the same consumer took the partition over in the meantime and
committed exactly the same span, in which case the messages were consumed once, by that
reader's transaction, and this one's writes are not stored (``OffsetsObservation.held`` tells
which case it was).

The reader records what a transaction read (``ReadSpan``) and how to observe the offsets
(``OffsetsProbe``); the transaction asks when its commit's outcome is lost (``settle``).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ReadSpan:
    """The offsets ``[start, end)`` of one partition a transaction commits for ``consumer``."""

    path: str
    consumer: str
    partition_id: int
    start: int
    end: int

    def __str__(self) -> str:
        return f"{self.path}:{self.partition_id} [{self.start}, {self.end}) of consumer {self.consumer!r}"


@dataclass(frozen=True)
class OffsetsObservation:
    """The committed offset of a span's partition as the server reported it after the commit.

    ``held`` is True when the partition session that read the span answered (it held the
    partition from the read to the answer), False when the offset came from ``DescribeConsumer``.
    """

    span: ReadSpan
    committed_offset: int
    held: bool


OffsetsProbe = Callable[[float], Awaitable[Sequence[OffsetsObservation]]]
"""``await probe(timeout)``: the committed offsets of the spans a reader recorded, within
``timeout`` seconds; raises when the server could not be asked."""


class Verdict(enum.Enum):
    COMMITTED = "committed"
    NOT_COMMITTED = "not committed"
    UNKNOWN = "unknown"


def judge(observations: Sequence[OffsetsObservation]) -> Verdict:
    """What the committed offsets say about the commit (see the module docstring).

    Every span must say the same: a transaction commits all its offsets or none.
    """
    verdicts = set()
    for seen in observations:
        if seen.committed_offset == seen.span.end:
            verdicts.add(Verdict.COMMITTED)
        elif seen.committed_offset == seen.span.start:
            verdicts.add(Verdict.NOT_COMMITTED)
        else:
            verdicts.add(Verdict.UNKNOWN)
    if len(verdicts) != 1:
        return Verdict.UNKNOWN  # none at all, or spans that disagree
    return verdicts.pop()


def describe(observations: Sequence[OffsetsObservation]) -> str:
    """The observations for a log line or an error: span, committed offset, how it was read."""
    return "; ".join(
        f"{seen.span}: committed offset {seen.committed_offset}"
        f" ({'from the partition session' if seen.held else 'partition session lost; from DescribeConsumer'})"
        for seen in observations
    )
