"""QueryService on the local server: sessions and transactions for topics, without YQL.

YDB's query sessions carry the transactions that topic writes and consumer offsets join:

- ``CreateSession`` opens a session; ``AttachSession`` is a server stream whose first state is
  SUCCESS and which stays open while the session lives. When the session ends (DeleteSession,
  ``faults.kill_query_session``, server stop) the stream gets a BAD_SESSION state and closes;
  when the client closes the stream, the session ends, as in YDB.
- ``BeginTransaction`` / ``CommitTransaction`` / ``RollbackTransaction`` manage a session's
  transactions. A commit checks every consumer offset range the transaction recorded
  (``UpdateOffsetsInTransaction``) and that every held write can still be appended; on a
  conflict it answers ABORTED and applies nothing. Otherwise offsets are committed and held
  messages appended at consecutive offsets, in one step of the event loop.
- A session that ends aborts its open transactions and discards their writes and offsets.
- ``ExecuteQuery`` answers UNSUPPORTED: the local server does not execute YQL.
- A commit held by ``faults.hold_next_commit`` is taken and left unanswered, as a commit in
  flight on a node that goes away (see ``LocalTopicCluster.stop_node_during_commit``).

Statuses follow YDB: an unknown session is BAD_SESSION, an unknown or finished transaction is
NOT_FOUND. A failed operation inside a transaction (a rejected offset update, an aborted
commit) ends that transaction, so later calls naming it answer NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from .._proto import ydb_query_pb2 as qpb
from ._replies import SUCCESS, issues, metadata, rpc_handler, status_code
from .faults import HeldCommit
from .nodes import ServerNode
from .state import ServerState
from .storage import PendingOffsets, PendingWrites
from .stored import StorageError

_READ_WRITE_MODES = frozenset({"serializable_read_write", "snapshot_read_write", "strict_serializable_read_write"})
_EXECUTE_UNSUPPORTED = (
    "the local topic server does not execute YQL queries; it serves sessions and transactions "
    "(BeginTransaction, CommitTransaction, RollbackTransaction) for topic writes and offsets only"
)


_BAD_SESSION = status_code("BAD_SESSION")


def _reply(response_cls: Any, status: int, message: str = "") -> Any:
    """A QueryService response or stream part with ``status`` and, for a failure, one issue."""
    return response_cls(status=status, issues=issues(message))


class Transaction:
    """An open transaction of a query session and the topic effects it holds until commit."""

    def __init__(self, tx_id: str, session: QuerySession, mode: str) -> None:
        self.tx_id = tx_id
        self.session = session
        self.mode = mode
        self.writes = PendingWrites()
        self.offsets = PendingOffsets()

    @property
    def read_write(self) -> bool:
        return self.mode in _READ_WRITE_MODES

    def require_read_write(self, what: str) -> None:
        if not self.read_write:
            raise StorageError("BAD_REQUEST", f"{what} needs a read-write transaction; {self.tx_id} is {self.mode}")

    def discard(self) -> None:
        self.writes.discard()
        self.offsets.discard()


class QuerySession:
    """One query session: its open transactions and whether it is still alive."""

    def __init__(self, session_id: str, node_id: int) -> None:
        self.session_id = session_id
        self.node_id = node_id
        """The node the session lives on (the one that created it): it ends when that node stops."""
        self.transactions: dict[str, Transaction] = {}
        self.alive = True
        self.end_reason = ""
        self.ended = asyncio.Event()


class QueryService:
    """Every query session of one server, and the QueryService gRPC handlers over them."""

    _tx_counter = itertools.count(1)

    def __init__(self, state: ServerState) -> None:
        self.state = state
        """Used for: the storage (commits, offsets in transactions), admission, the fault injector."""
        self.sessions: dict[str, QuerySession] = {}
        """Live sessions by id (for inspection in tests)."""
        self.committed_transactions = 0
        self.aborted_transactions = 0
        """Transactions aborted by a conflict, a failed operation or the end of their session."""
        state.faults.serve_sessions(self)

    # --- registry ---------------------------------------------------------------------------

    def create_session(self, node_id: int = 1) -> QuerySession:
        """A new session on node ``node_id``."""
        session_id = f"ydb://session/3?node_id={node_id}&id={uuid.uuid4().hex}"
        session = QuerySession(session_id, node_id)
        self.sessions[session_id] = session
        return session

    def session(self, session_id: str) -> QuerySession:
        session = self.sessions.get(session_id)
        if session is None:
            raise StorageError("BAD_SESSION", f"session not found: {session_id!r}")
        return session

    def transaction(self, session_id: str, tx_id: str) -> Transaction:
        """The open transaction ``tx_id`` of ``session_id``: BAD_SESSION or NOT_FOUND otherwise."""
        tx = self.session(session_id).transactions.get(tx_id)
        if tx is None:
            raise StorageError("NOT_FOUND", f"transaction not found: {tx_id!r}; it may have been committed or aborted")
        return tx

    def begin(self, session_id: str, settings: Any) -> Transaction:
        session = self.session(session_id)
        mode = settings.WhichOneof("tx_mode")
        if mode is None:
            raise StorageError("BAD_REQUEST", "tx_settings must name a transaction mode")
        tx_id = f"01local{next(self._tx_counter):08d}{uuid.uuid4().hex[:12]}"
        tx = Transaction(tx_id, session, mode)
        session.transactions[tx_id] = tx
        return tx

    def commit(self, session_id: str, tx_id: str) -> None:
        """Apply the transaction's offsets and writes atomically, or abort it (ABORTED) with nothing applied."""
        tx = self.transaction(session_id, tx_id)
        del tx.session.transactions[tx_id]
        storage = self.state.storage
        try:
            offsets = tx.offsets.check(storage.topic)
            tx.writes.check()
        except StorageError:
            tx.discard()
            self.aborted_transactions += 1
            raise
        storage.apply_transaction(offsets, tx.writes)
        self.committed_transactions += 1

    async def _hold(self, request: Any, held: HeldCommit) -> Any:
        """Hold a commit request unanswered (``Faults.hold_next_commit``) until released; the
        call is cancelled first when its node stops."""
        session = self.sessions.get(request.session_id)
        held.arrive(request.session_id, request.tx_id, session.node_id if session is not None else 0)
        await held.released.wait()
        return _reply(
            qpb.CommitTransactionResponse, status_code("UNDETERMINED"), "the commit was held by fault injection"
        )

    def apply_held(self, held: HeldCommit) -> bool:
        """Apply a held commit now (its answer stays held); False when its transaction is gone
        or aborted on a conflict."""
        try:
            self.commit(held.session_id, held.tx_id)
        except StorageError:
            return False
        return True

    def rollback(self, session_id: str, tx_id: str) -> None:
        tx = self.transaction(session_id, tx_id)
        del tx.session.transactions[tx_id]
        tx.discard()

    def abort(self, tx: Transaction) -> None:
        """End ``tx`` after a failed operation inside it, dropping what it held."""
        if tx.session.transactions.pop(tx.tx_id, None) is not None:
            tx.discard()
            self.aborted_transactions += 1

    def end_session(self, session_id: str, reason: str) -> bool:
        """End a session: abort its transactions and close its AttachSession stream."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        for tx in list(session.transactions.values()):
            self.abort(tx)
        session.alive = False
        session.end_reason = reason
        session.ended.set()
        return True

    def end_node_sessions(self, node_id: int, reason: str) -> int:
        """End every session living on node ``node_id`` (the node stopped); returns how many."""
        targets = [sid for sid, session in self.sessions.items() if session.node_id == node_id]
        return sum(self.end_session(sid, reason) for sid in targets)

    def kill(self, session_id: str | None, reason: str) -> int:
        """End one session (or all with None); returns how many ended."""
        targets = list(self.sessions) if session_id is None else [session_id]
        return sum(self.end_session(sid, reason) for sid in targets)

    # --- unary handlers ---------------------------------------------------------------------

    def handle_create_session(self, request: Any, node: ServerNode) -> Any:
        session = self.create_session(node.node_id)
        return qpb.CreateSessionResponse(status=SUCCESS, session_id=session.session_id, node_id=session.node_id)

    def handle_delete_session(self, request: Any) -> Any:
        self.session(request.session_id)
        self.end_session(request.session_id, "session deleted by the client")
        return qpb.DeleteSessionResponse(status=SUCCESS)

    def handle_begin_transaction(self, request: Any) -> Any:
        tx = self.begin(request.session_id, request.tx_settings)
        return qpb.BeginTransactionResponse(status=SUCCESS, tx_meta=qpb.TransactionMeta(id=tx.tx_id))

    def handle_commit_transaction(self, request: Any) -> Any:
        self.commit(request.session_id, request.tx_id)
        response = qpb.CommitTransactionResponse(status=SUCCESS)
        now_ms = time.time_ns() // 1_000_000
        response.commit_timestamp.plan_step = now_ms
        response.commit_timestamp.tx_id = self.committed_transactions
        return response

    def handle_rollback_transaction(self, request: Any) -> Any:
        self.rollback(request.session_id, request.tx_id)
        return qpb.RollbackTransactionResponse(status=SUCCESS)

    def _admit(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> tuple[int, str] | None:
        """The gate's refusal or an injected failure, as ``(status, message)``; None to proceed."""
        return self.state.admit(method, metadata(context))

    def unary(self, name: str, handler: Callable[[Any], Any], response_cls: Any) -> Callable[..., Awaitable[Any]]:
        """A gRPC handler for a QueryService unary method: its responses carry status and issues directly."""

        async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            refusal = self._admit(name, context)
            if refusal is not None:
                return _reply(response_cls, *refusal)
            if name == "CommitTransaction":
                held = self.state.faults.take_commit_hold()
                if held is not None:
                    return await self._hold(request, held)
            try:
                return handler(request)
            except StorageError as exc:
                return _reply(response_cls, status_code(exc.status), exc.message)

        return call

    # --- stream handlers --------------------------------------------------------------------

    async def attach_session(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        """SUCCESS first, then nothing until the session ends; closing the stream ends the session."""
        refusal = self._admit("AttachSession", context)
        if refusal is not None:
            yield _reply(qpb.SessionState, *refusal)
            return
        session = self.sessions.get(request.session_id)
        if session is None:
            yield _reply(qpb.SessionState, _BAD_SESSION, f"session not found: {request.session_id!r}")
            return
        try:
            yield _reply(qpb.SessionState, SUCCESS)
            await session.ended.wait()
            yield _reply(qpb.SessionState, _BAD_SESSION, session.end_reason)
        finally:
            # The client closed the stream (or the server is going away): YDB ends the session with it.
            self.end_session(session.session_id, "the AttachSession stream was closed")

    async def execute_query(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        refusal = self._admit("ExecuteQuery", context)
        if refusal is not None:
            yield _reply(qpb.ExecuteQueryResponsePart, *refusal)
        elif request.session_id not in self.sessions:
            yield _reply(qpb.ExecuteQueryResponsePart, _BAD_SESSION, f"session not found: {request.session_id!r}")
        else:
            yield _reply(qpb.ExecuteQueryResponsePart, status_code("UNSUPPORTED"), _EXECUTE_UNSUPPORTED)

    def handlers(self, node: ServerNode) -> grpc.GenericRpcHandler:
        """QueryService's method handlers as served by ``node`` (sessions it creates live on it)."""
        def unary(name: str, handler: Callable[[Any], Any], request_cls: Any, response_cls: Any) -> Any:
            behaviour = self.unary(name, handler, response_cls)
            return rpc_handler(grpc.unary_unary_rpc_method_handler, behaviour, request_cls, response_cls)

        def server_stream(handler: Any, request_cls: Any, response_cls: Any) -> Any:
            return rpc_handler(grpc.unary_stream_rpc_method_handler, handler, request_cls, response_cls)

        methods = {
            "CreateSession": unary(
                "CreateSession",
                functools.partial(self.handle_create_session, node=node),
                qpb.CreateSessionRequest, qpb.CreateSessionResponse
            ),
            "DeleteSession": unary(
                "DeleteSession", self.handle_delete_session, qpb.DeleteSessionRequest, qpb.DeleteSessionResponse
            ),
            "AttachSession": server_stream(self.attach_session, qpb.AttachSessionRequest, qpb.SessionState),
            "BeginTransaction": unary(
                "BeginTransaction",
                self.handle_begin_transaction,
                qpb.BeginTransactionRequest,
                qpb.BeginTransactionResponse,
            ),
            "CommitTransaction": unary(
                "CommitTransaction",
                self.handle_commit_transaction,
                qpb.CommitTransactionRequest,
                qpb.CommitTransactionResponse,
            ),
            "RollbackTransaction": unary(
                "RollbackTransaction",
                self.handle_rollback_transaction,
                qpb.RollbackTransactionRequest,
                qpb.RollbackTransactionResponse,
            ),
            "ExecuteQuery": server_stream(self.execute_query, qpb.ExecuteQueryRequest, qpb.ExecuteQueryResponsePart),
        }
        return grpc.method_handlers_generic_handler("Ydb.Query.V1.QueryService", methods)

    # --- topic operations inside transactions -----------------------------------------------

    def update_offsets(self, request: Any) -> None:
        """``TopicService.UpdateOffsetsInTransaction``: record consumer offset ranges in a transaction."""
        tx = self.transaction(request.tx.session, request.tx.id)
        try:
            tx.require_read_write("UpdateOffsetsInTransaction")
            if not request.consumer:
                raise StorageError("BAD_REQUEST", "consumer must not be empty")
            storage = self.state.storage
            recorded: list[tuple[str, int, int, int]] = []
            for topic_offsets in request.topics:
                topic = storage.topic(topic_offsets.path)
                topic.consumer(request.consumer)
                for partition_offsets in topic_offsets.partitions:
                    partition = topic.partition(partition_offsets.partition_id)
                    for r in partition_offsets.partition_offsets:
                        if not 0 <= r.start < r.end:
                            raise StorageError(
                                "BAD_REQUEST",
                                f"offset range [{r.start}, {r.end}) of partition {partition.partition_id} is empty "
                                "or negative",
                            )
                        key = (topic.path, partition.partition_id)
                        if tx.offsets.overlapping(topic.path, request.consumer, *key[1:], r.start, r.end) or any(
                            (path, pid) == key and start < r.end and r.start < end
                            for path, pid, start, end in recorded
                        ):
                            raise StorageError(
                                "BAD_REQUEST",
                                f"offset range [{r.start}, {r.end}) of partition {partition.partition_id} of "
                                f"{topic.path} overlaps a range already added to the transaction",
                            )
                        recorded.append((topic.path, partition.partition_id, r.start, r.end))
        except StorageError:
            self.abort(tx)
            raise
        for path, partition_id, start, end in recorded:
            tx.offsets.add(path, request.consumer, partition_id, start, end)

    def shutdown(self) -> None:
        """End every session: the server is stopping."""
        self.kill(None, "the server is shutting down")
