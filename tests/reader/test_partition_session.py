"""``PartitionSession`` shows users what they read, read-only and documented; the reader's own
bookkeeping about it stays out of sight."""

from __future__ import annotations

import inspect
import pydoc

import pytest

import ydb_topic_async as yta

from .._helpers import fill

WHAT_USERS_READ = {
    "id",
    "topic_path",
    "partition_id",
    "committed_offset",
    "partition_start_offset",
    "partition_end_offset",
    "state",
    "closed",
    "ended",
    "child_partition_ids",
}


def test_its_public_surface_is_what_users_read() -> None:
    assert {name for name in dir(yta.PartitionSession) if not name.startswith("_")} == WHAT_USERS_READ
    for name in WHAT_USERS_READ:
        attribute = inspect.getattr_static(yta.PartitionSession, name)
        assert isinstance(attribute, property) and attribute.fset is None, name
        assert attribute.__doc__ and attribute.__doc__.strip(), f"{name} has no docstring"
    session = yta.PartitionSession(7, "/local/t", 2, 5, 0, 10)
    with pytest.raises(AttributeError):
        session.committed_offset = 6  # type: ignore[misc]
    assert (session.id, session.partition_id, session.committed_offset, session.partition_end_offset) == (7, 2, 5, 10)
    assert session.state is yta.PartitionSessionState.ACTIVE and not session.closed and not session.ended


def test_help_lists_only_its_documented_read_only_properties() -> None:
    text = pydoc.render_doc(yta.PartitionSession, renderer=pydoc.plaintext)  # type: ignore[attr-defined]
    properties = text.split("Readonly properties defined here:")[1]
    listed = {line.strip(" |") for line in properties.splitlines() if line.startswith(" |  ") and line[4:5].strip()}
    assert listed == WHAT_USERS_READ
    assert "Data descriptors defined here" not in text  # nothing writable
    for name in WHAT_USERS_READ:
        # Each property's docstring follows its name.
        assert f" |  {name}\n |      " in text, name


async def test_the_session_shows_what_the_reader_keeps(driver: yta.Driver, topic: str) -> None:
    """The read-only view follows the reader's bookkeeping: the committed offset moves with the
    server's acknowledgement, and the session is closed when the reader closes."""
    await fill(driver, topic, [b"a", b"b", b"c"])
    async with driver.topic.reader(topic, consumer="consumer") as reader:
        batch = await reader.receive_batch(timeout=10)
        session = batch.partition_session
        assert (session.committed_offset, session.partition_end_offset, session.state) == (
            0,
            3,
            yta.PartitionSessionState.ACTIVE,
        )
        await reader.commit_with_ack(batch, timeout=10)
        assert session.committed_offset == batch.end_offset == 3
    assert session.closed and session.state is yta.PartitionSessionState.CLOSED
