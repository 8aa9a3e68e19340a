"""The errors the ``ydb_topic`` data source raises for data it cannot account for."""

from __future__ import annotations

from .. import YdbTopicError


class DataLossError(YdbTopicError):
    """Messages the query should read are gone (expired, topic recreated, offsets moved back) or
    the requested offsets do not exist. Raised while ``failOnDataLoss`` is true (the default)."""


class ReplayMismatchError(YdbTopicError):
    """A re-executed micro-batch produced rows that differ from what an earlier attempt of the same
    batch already stored, so the exactly-once sink cannot deduplicate it. Nothing of the mismatching
    part was written; ``onReplayMismatch`` = ``atLeastOnce`` writes it again instead."""
