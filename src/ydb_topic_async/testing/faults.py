"""Fault injection for the local server: break streams and answer chosen statuses on purpose.

    server.faults.drop_write_streams()             # break every open write stream now
    server.faults.drop_read_streams()              # break every open read stream now
    server.faults.drop_direct_read_streams()       # break every open direct read stream now
    server.faults.drop_write_stream_after(100)     # break a write stream once 100 more messages are stored
    server.faults.fail_next("CreateTopic", "OVERLOADED")       # next unary CreateTopic answers OVERLOADED
    server.faults.fail_next("StreamWrite", "UNAVAILABLE", times=3)  # next 3 write streams fail at init
    server.faults.abort_next("StreamDirectRead", "UNIMPLEMENTED")  # next direct read stream: that gRPC status
    server.faults.hang_next("StreamDirectRead")    # next direct read stream never answers its handshake
    server.faults.kill_query_sessions()           # end every query session: its transactions abort
    server.faults.kill_query_session(session_id)  # end one query session
    held = server.faults.hold_next_commit()       # the next CommitTransaction is held unanswered

A held commit is what a commit in flight looks like when its node goes away: the server has the
request and the client waits for an answer. ``LocalTopicCluster.stop_node_during_commit(held,
apply=...)`` then applies it or not and stops the node holding its query session, so the client's
call ends without an answer; ``held.release()`` alone answers it UNDETERMINED (a node that
answered too late to know).

A broken stream ends with gRPC status UNAVAILABLE, as when a node goes away; clients see the
same error as in production and must reconnect.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Protocol

import grpc

from ._replies import status_code

_BROKEN_DETAILS = "stream broken by fault injection"


class StreamHandle:
    """One open stream the fault injector can break."""

    __slots__ = ("broken", "kind", "stop_partitions", "wakeup")

    def __init__(self, kind: str, wakeup: asyncio.Event) -> None:
        self.kind = kind
        self.broken = False
        self.stop_partitions = False
        """A read stream without a consumer is to stop its partition sessions (then clears it)."""
        self.wakeup = wakeup

    def is_broken(self) -> bool:
        return self.broken

    def break_(self) -> None:
        self.broken = True
        self.wakeup.set()


class HeldCommit:
    """A ``CommitTransaction`` the server received and holds without answering (see
    ``Faults.hold_next_commit``). Nothing of it is applied unless the holder applies it."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        """Set once the commit request arrived (``session_id``, ``tx_id`` and ``node_id`` are known)."""
        self.released = asyncio.Event()
        """Set by ``release``: the held call then answers UNDETERMINED (if its node still serves it)."""
        self.session_id = ""
        self.tx_id = ""
        self.node_id = 0
        """The node the transaction's query session lives on (0: the session was not found)."""

    def arrive(self, session_id: str, tx_id: str, node_id: int) -> None:
        self.session_id, self.tx_id, self.node_id = session_id, tx_id, node_id
        self.arrived.set()

    async def wait_arrived(self, timeout: float) -> None:
        """Wait until the held commit arrives; ``TimeoutError`` after ``timeout`` seconds."""
        await asyncio.wait_for(self.arrived.wait(), timeout)

    def release(self) -> None:
        """Stop holding: the call (unless its node stopped) answers UNDETERMINED."""
        self.released.set()

    def __repr__(self) -> str:
        state = "arrived" if self.arrived.is_set() else "armed"
        return f"HeldCommit({self.tx_id or '?'}, session node {self.node_id}, {state})"


class SessionKiller(Protocol):
    """What the query service offers the injector: end sessions as if they died on the server."""

    def kill(self, session_id: str | None, reason: str) -> int: ...


class Faults:
    """The fault hooks of one ``LocalTopicServer`` (its ``faults`` attribute)."""

    details = _BROKEN_DETAILS

    def __init__(self) -> None:
        self._streams: set[StreamHandle] = set()
        self._statuses: dict[str, list[int]] = defaultdict(list)
        self._aborts: dict[str, list[grpc.StatusCode | None]] = defaultdict(list)
        """Per stream method: the gRPC statuses to end its next handshakes with (None: never answer)."""
        self._write_budget: int | None = None
        self._sessions: SessionKiller | None = None
        self._commit_holds: list[HeldCommit] = []
        self.dropped_streams = 0
        """How many streams the injector has broken so far."""

    # --- public hooks -------------------------------------------------------------------------

    def drop_write_streams(self) -> int:
        """Break every open write stream; returns how many."""
        return self._drop("write")

    def drop_read_streams(self) -> int:
        """Break every open read stream; returns how many."""
        return self._drop("read")

    def drop_direct_read_streams(self) -> int:
        """Break every open direct read stream (StreamDirectRead), leaving the read streams open;
        returns how many."""
        return self._drop("direct_read")

    def stop_partition_sessions_without_consumer(self) -> int:
        """Stop (not gracefully) every partition session of every open read stream without a
        consumer, leaving the streams open; returns how many read streams were open (those with a
        consumer ignore it).

        The protocol lets the server stop a partition session at any time; a client must not
        take the stop for the partition's end. The stream gets no new session for the partition.
        """
        told = 0
        for handle in self._streams:
            if handle.kind == "read":
                handle.stop_partitions = True
                handle.wakeup.set()
                told += 1
        return told

    def drop_write_stream_after(self, messages: int) -> None:
        """Break the write stream that stores the ``messages``-th message from now (once).

        Messages held by a transaction count as stored: the stream breaks after holding them,
        before their acks are sent.
        """
        if messages < 0:
            raise ValueError("messages must be >= 0")
        self._write_budget = messages

    def fail_next(self, method: str, status: str, *, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` with YDB ``status`` (e.g. "OVERLOADED").

        ``method`` is a unary method name (``"DescribeTopic"``, ``"CommitTransaction"``) or a stream
        (``"StreamWrite"``, ``"StreamRead"``, ``"StreamDirectRead"``, ``"AttachSession"``,
        ``"ExecuteQuery"``); a stream fails at its handshake with that status.
        """
        code = status_code(status)
        self._statuses[method].extend([code] * times)

    def abort_next(self, method: str, code: str, *, times: int = 1) -> None:
        """End the next ``times`` calls of stream ``method`` at their handshake with gRPC status
        ``code`` (a ``grpc.StatusCode`` name, e.g. ``"UNIMPLEMENTED"``, as a server without the
        method answers), instead of a YDB status."""
        status = grpc.StatusCode[code]
        self._aborts[method].extend([status] * times)

    def hang_next(self, method: str, *, times: int = 1) -> None:
        """Leave the next ``times`` calls of stream ``method`` unanswered after their InitRequest,
        until the client cancels them (a server that accepts the call and never answers)."""
        self._aborts[method].extend([None] * times)

    def kill_query_sessions(self) -> int:
        """End every query session, as when its node loses it; returns how many.

        Each session's AttachSession stream gets a BAD_SESSION state and ends, its open
        transactions are aborted with their held writes and offsets, and later calls naming it
        answer BAD_SESSION.
        """
        return self._kill_sessions(None)

    def kill_query_session(self, session_id: str) -> bool:
        """End one query session (see ``kill_query_sessions``); False when it did not exist."""
        return self._kill_sessions(session_id) > 0

    def hold_next_commit(self) -> HeldCommit:
        """Hold the next ``CommitTransaction`` (after any failure ``fail_next`` injects for it):
        the server takes the request, applies nothing and does not answer until the
        ``HeldCommit`` is released or its node stops."""
        held = HeldCommit()
        self._commit_holds.append(held)
        return held

    def clear(self) -> None:
        """Forget every pending injected failure (and release held commits)."""
        self._statuses.clear()
        self._aborts.clear()
        self._write_budget = None
        for held in self._commit_holds:
            held.release()
        self._commit_holds.clear()

    # --- used by the services -----------------------------------------------------------------

    def register(self, kind: str, wakeup: asyncio.Event) -> StreamHandle:
        handle = StreamHandle(kind, wakeup)
        self._streams.add(handle)
        return handle

    def unregister(self, handle: StreamHandle) -> None:
        self._streams.discard(handle)

    def wake_all(self) -> None:
        """Wake every open stream's handler and release held commits (the server is stopping:
        waits must end)."""
        for handle in self._streams:
            handle.wakeup.set()
        self.clear()

    def take_commit_hold(self) -> HeldCommit | None:
        """The hold armed for the commit arriving now, if any."""
        return self._commit_holds.pop(0) if self._commit_holds else None

    def serve_sessions(self, sessions: SessionKiller) -> None:
        self._sessions = sessions

    def take_abort(self, method: str) -> tuple[bool, grpc.StatusCode | None]:
        """Whether a handshake of stream ``method`` is to be aborted, and with which gRPC status (None: hang)."""
        pending = self._aborts.get(method)
        if pending:
            return True, pending.pop(0)
        return False, None

    def take_status(self, method: str) -> int | None:
        pending = self._statuses.get(method)
        if pending:
            return pending.pop(0)
        return None

    def messages_stored(self, handle: StreamHandle, count: int) -> None:
        """A write stream stored ``count`` messages; break it if the budget ran out."""
        if self._write_budget is None:
            return
        self._write_budget -= count
        if self._write_budget <= 0:
            self._write_budget = None
            self.dropped_streams += 1
            handle.break_()

    def _drop(self, kind: str) -> int:
        handles = [h for h in self._streams if h.kind == kind and not h.broken]
        for handle in handles:
            handle.break_()
        self.dropped_streams += len(handles)
        return len(handles)

    def _kill_sessions(self, session_id: str | None) -> int:
        if self._sessions is None:
            return 0
        return self._sessions.kill(session_id, "session killed by fault injection")
