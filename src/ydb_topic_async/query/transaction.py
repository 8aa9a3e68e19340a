"""``Transaction``: a serializable read-write transaction of one query session, with hooks.

The transaction begins lazily: the first thing that needs its id (``begin``, a transactional
writer's first write, ``receive_batch_with_tx``) borrows a session from the pool and sends
``BeginTransaction``. ``commit`` runs the before-commit hooks in registration order (any failure
aborts: the transaction is rolled back on the server and ``commit`` raises that error), then
``CommitTransaction``, then the after-commit hooks with the outcome. ``rollback`` runs the
before-rollback hooks, ``RollbackTransaction`` and the after-rollback hooks. Every transaction
that began ends with either the after-commit or the after-rollback hooks, which is what
transactional writers and readers rely on to stop (and, for readers, to re-read).

A commit whose answer is lost after the request left is settled before the hooks run, from the
consumer offsets the transaction carried (``_outcome``): committed (``commit`` returns), not
committed (``commit`` raises the lost error, and the transaction may be repeated), or, when
nothing can tell, ``CommitOutcomeUnknownError``. A commit that failed before any byte of it left
(``ConnectFailedError``, no token) was not applied.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable, MutableSet
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

import anyio

from .._errors import (
    AbortedError,
    BadSessionError,
    CommitOutcomeUnknownError,
    ConnectFailedError,
    CredentialsError,
    InvalidArgumentError,
    NotFoundError,
    OperationTimeoutError,
    ServerCancelledError,
    ServerError,
    ServerTimeoutError,
    SessionBusyError,
    SessionExpiredError,
    TransactionEndedError,
    TransportError,
    UndeterminedError,
)
from .._futures import deadline, run_within
from .._proto import ydb_query_pb2 as qpb
from .._proto import ydb_topic_pb2 as tpb
from . import _rpc
from ._outcome import OffsetsObservation, OffsetsProbe, Verdict, describe, judge

if TYPE_CHECKING:
    from .._transport import Transport
    from .session_pool import QuerySession, SessionPool

logger = logging.getLogger("ydb_topic_async.query")

BeforeHook = Callable[["Transaction"], Awaitable[None] | None]
"""``hook(tx)``; may be a coroutine function."""
AfterHook = Callable[["Transaction", BaseException | None], Awaitable[None] | None]
"""``hook(tx, error)``: ``error`` is None on success; may be a coroutine function."""
H = TypeVar("H", BeforeHook, AfterHook)

_CLEANUP_TIMEOUT = 5.0
"""Bounds the rollback and session hand-back done after a failure or a cancellation."""
SETTLE_TIMEOUT = 15.0
"""Bounds asking the server for the consumer offsets that settle a commit whose answer was lost."""


class TransactionState(enum.Enum):
    NOT_STARTED = "not started"
    ACTIVE = "active"
    COMMITTING = "committing"
    COMMITTED = "committed"
    ROLLING_BACK = "rolling back"
    ROLLED_BACK = "rolled back"
    FAILED = "failed"
    """A commit failed: the server rolled the transaction back (or it died with its session)."""


_ENDED = (TransactionState.COMMITTED, TransactionState.ROLLED_BACK, TransactionState.FAILED)


class Transaction:
    """A serializable read-write transaction; get one from ``driver.query.transaction()``.

    ``async with driver.query.transaction() as tx`` commits when the block ends normally and
    rolls back when it raises. ``commit``/``rollback`` may also be called explicitly (after
    which the block's end does nothing). Hooks: ``before_commit(fn)`` (``await fn(tx)``; an
    exception aborts the commit, rolls back and is raised by ``commit``), ``after_commit(fn)``
    (``fn(tx, error)``, ``error`` None when committed), ``before_rollback(fn)`` and
    ``after_rollback(fn)``. Errors of the other hooks are logged, not raised. Each registration
    method returns ``fn``, so it also works as a decorator.
    """

    def __init__(self, pool: SessionPool, transport: Transport, open_transactions: MutableSet[Transaction]) -> None:
        self._pool = pool
        self._transport = transport
        self._open_transactions = open_transactions
        """Where the client keeps the transactions that have begun and not ended (closing the
        driver rolls them back)."""
        self._state = TransactionState.NOT_STARTED
        self._session: QuerySession | None = None
        self._tx_id: str | None = None
        self._begin_lock = asyncio.Lock()
        self._before_commit: list[BeforeHook] = []
        self._after_commit: list[AfterHook] = []
        self._before_rollback: list[BeforeHook] = []
        self._after_rollback: list[AfterHook] = []
        self._doomed: BaseException | None = None
        self._released = False
        self._outcome_unknown = False
        self._probes: list[OffsetsProbe] = []
        """How to read the consumer offsets this transaction commits (one per reader that read in it)."""
        self._participants: list[str] = []
        """What joined the transaction (its writers and readers), to say what a lost commit held."""
        self._settled: Verdict | None = None

    # --- identity ----------------------------------------------------------------------------

    @property
    def tx_id(self) -> str | None:
        """The server's transaction id; None until the transaction began."""
        return self._tx_id

    @property
    def session_id(self) -> str | None:
        """The id of the query session the transaction runs in; None until it began."""
        return self._session.id if self._session is not None else None

    @property
    def state(self) -> TransactionState:
        return self._state

    @property
    def ended(self) -> bool:
        """True once committed, rolled back or failed."""
        return self._state in _ENDED

    @property
    def outcome_unknown(self) -> bool:
        """True when the commit request was sent, its answer was lost and nothing could settle
        it: it may have committed (``commit`` raised ``CommitOutcomeUnknownError``)."""
        return self._outcome_unknown

    @property
    def commit_settled(self) -> str | None:
        """``"committed"`` or ``"not committed"`` when the commit's answer was lost and the
        consumer offsets the transaction carried settled it; None otherwise."""
        return None if self._settled is None or self._settled is Verdict.UNKNOWN else self._settled.value

    @property
    def accepting(self) -> bool:
        """Whether work may still join the transaction (it has not started to end)."""
        return self._state in (TransactionState.NOT_STARTED, TransactionState.ACTIVE) and self._doomed is None

    def _check_accepting(self) -> None:
        if self._doomed is not None:
            raise TransactionEndedError(f"{self!r} can no longer commit: {self._doomed}") from self._doomed
        if not self.accepting:
            raise TransactionEndedError(f"{self!r} is {self._state.value}: nothing more can join it")

    # --- hooks -------------------------------------------------------------------------------

    def _register(self, hooks: list[H], fn: H) -> H:
        if not callable(fn):
            raise InvalidArgumentError(f"a transaction hook must be callable, got {fn!r}")
        if self.ended:
            raise TransactionEndedError(f"{self!r} is {self._state.value}: its hooks have already run")
        hooks.append(fn)
        return fn

    def before_commit(self, fn: BeforeHook) -> BeforeHook:
        """Run ``await fn(tx)`` before the commit; an exception aborts and rolls back."""
        return self._register(self._before_commit, fn)

    def after_commit(self, fn: AfterHook) -> AfterHook:
        """Run ``fn(tx, error)`` after a commit attempt (``error`` None when it committed)."""
        return self._register(self._after_commit, fn)

    def before_rollback(self, fn: BeforeHook) -> BeforeHook:
        """Run ``fn(tx)`` before an explicit rollback (or the rollback of a failed block)."""
        return self._register(self._before_rollback, fn)

    def after_rollback(self, fn: AfterHook) -> AfterHook:
        """Run ``fn(tx, error)`` after a rollback (``error`` is the rollback call's failure, if any)."""
        return self._register(self._after_rollback, fn)

    def _fail(self, error: BaseException) -> None:
        """Doom the transaction: it can no longer commit, whatever happens next."""
        if self._doomed is None:
            self._doomed = error

    def _on_commit_lost(self, probe: OffsetsProbe) -> None:
        """Register how to read the consumer offsets this transaction commits (a reader's), to
        settle a commit whose answer is lost."""
        self._probes.append(probe)

    def _joined(self, participant: object) -> None:
        """Note a writer or reader that joined (for what a lost commit held)."""
        text = repr(participant)
        if text not in self._participants:
            self._participants.append(text)

    # --- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            await self.commit()
            return
        if self._state in (TransactionState.NOT_STARTED, TransactionState.ACTIVE):
            try:
                await self.rollback()
            except Exception:
                # The block's own error is the one to see; the rollback's is only logged.
                logger.warning("rolling back %r after an error also failed", self, exc_info=True)

    async def begin(self, timeout: float | None = None) -> Transaction:
        """Begin on the server now (otherwise the first use does); returns the transaction."""
        await self._identity(timeout)
        return self

    async def _identity(self, timeout: float | None = None) -> tpb.TransactionIdentity:
        """The (tx id, session id) pair topic requests carry; begins the transaction if needed."""
        self._check_accepting()
        if self._tx_id is None:
            async with self._begin_lock:
                self._check_accepting()
                if self._tx_id is None:
                    error: BaseException | None = None
                    async with deadline(timeout) as scope:
                        try:
                            await self._begin()
                        except BaseException as exc:
                            error = exc
                    if scope.expired():
                        raise OperationTimeoutError(f"the transaction did not begin within {timeout}s") from error
                    if error is not None:
                        raise error
        assert self._session is not None and self._tx_id is not None
        return tpb.TransactionIdentity(id=self._tx_id, session=self._session.id)

    async def _begin(self) -> None:
        session = await self._pool.acquire()
        try:
            request = qpb.BeginTransactionRequest(session_id=session.id)
            request.tx_settings.serializable_read_write.SetInParent()
            response = await _rpc.call(
                self._transport,
                "BeginTransaction",
                request,
                qpb.BeginTransactionResponse,
                timeout=None,
                node_id=session.node_id,
            )
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                if _session_suspect(exc) or isinstance(exc, SessionBusyError):
                    session.invalidate(exc)
                await self._pool.release(session)
            raise
        self._session = session
        self._tx_id = response.tx_meta.id
        if self._state is not TransactionState.NOT_STARTED:
            # commit() and rollback() wait for a begin under way, so this is only a safety net:
            # never let a late answer turn an ended transaction back into an active one.
            state = self._state
            with anyio.CancelScope(shield=True):
                await self._rollback_call(quiet=True)
                await self._release()
            raise TransactionEndedError(f"{self!r} ended while it was beginning ({state.value})")
        self._state = TransactionState.ACTIVE
        self._open_transactions.add(self)

    async def _settle_begin(self) -> None:
        """Wait for a lazy begin that is under way (a write or read joining the transaction)."""
        if self._begin_lock.locked():
            async with self._begin_lock:
                pass

    async def commit(self, timeout: float | None = None) -> None:
        """Run the before-commit hooks, commit, run the after-commit hooks.

        Committing twice does nothing; committing after a rollback or failure raises
        ``TransactionEndedError``. A begin under way (e.g. a first write that has not returned
        yet) is waited for first. When a hook or the commit fails, the transaction is rolled
        back and the error is raised. ``timeout`` bounds the hooks and the commit together
        (``OperationTimeoutError``). When the commit was sent but its outcome cannot be known
        (UNDETERMINED, TIMEOUT, CANCELLED, a broken connection), ``outcome_unknown`` is True and
        the session is dropped, and the outcome is settled from the consumer offsets the
        transaction carried (its ``receive_batch_with_tx`` reads): when they moved to the
        transaction's end it committed, and ``commit`` returns (``commit_settled`` is
        ``"committed"``); when they did not move it did not, and the lost error is raised
        (``commit_settled`` is ``"not committed"``). When nothing can tell (no topic reads, or
        the offsets moved otherwise), ``CommitOutcomeUnknownError`` is raised and
        ``outcome_unknown`` is True. The settling takes at most ``SETTLE_TIMEOUT`` seconds
        more.
        """
        if self._state is TransactionState.COMMITTED:
            return
        self._check_endable("committed")
        error: BaseException | None = None
        sent = False
        started = False
        async with deadline(timeout) as scope:
            try:
                await self._settle_begin()
                if self._state_now() is TransactionState.COMMITTED:
                    return
                self._check_endable("committed")
                self._state = TransactionState.COMMITTING
                started = True
                if self._session is not None:
                    self._session.check_alive()  # no point waiting for the hooks of a dead transaction
                if self._doomed is None:
                    await self._run_before(self._before_commit)
                if self._doomed is not None:
                    raise self._doomed.with_traceback(None)
                if self._tx_id is not None:
                    assert self._session is not None
                    self._session.check_alive()
                    sent = True
                    await _rpc.call(
                        self._transport,
                        "CommitTransaction",
                        qpb.CommitTransactionRequest(session_id=self._session.id, tx_id=self._tx_id),
                        qpb.CommitTransactionResponse,
                        timeout=None,
                        node_id=self._session.node_id,
                    )
            except BaseException as exc:
                error = exc
                if isinstance(exc, ConnectFailedError | CredentialsError):
                    sent = False  # failed before any byte of the request left
        if scope.expired():
            error = _timed_out("commit", timeout, error)
        if not started:
            if error is not None:
                raise error  # waiting for the begin failed: nothing was touched
            return
        if error is not None and sent and _outcome_uncertain(error):
            # The commit may have been applied, or may still be running on the session: never
            # reuse it. Unless the caller is going away (cancelled), ask the server what the
            # consumer offsets say.
            self._invalidate_session(error)
            if isinstance(error, Exception):
                try:
                    error = await self._settle(error)
                except BaseException as exc:  # cancelled while asking: unknown, and end as below
                    error = exc
            else:
                self._outcome_unknown = True
            if error is None:
                logger.info("the answer to the commit of %r was lost; the consumer offsets show it committed", self)
        with anyio.CancelScope(shield=True):
            if error is None:
                self._state = TransactionState.COMMITTED
                await self._release()
            else:
                self._state = TransactionState.FAILED
                if self._settled is not None or self._outcome_unknown:
                    pass  # the session was dropped; its transaction cannot be rolled back now
                elif sent and isinstance(error, BadSessionError | SessionExpiredError | SessionBusyError):
                    self._invalidate_session(error)
                elif not (sent and isinstance(error, AbortedError | NotFoundError)):
                    # The server has not ended the transaction (a hook failed, or the commit was
                    # refused, e.g. OVERLOADED): end it, so the session goes back clean.
                    await self._rollback_call(quiet=True)
                await self._release()
            await self._run_after(self._after_commit, error)
        if error is not None:
            raise error

    async def _settle(self, lost: BaseException) -> BaseException | None:
        """Settle a commit whose answer was lost with ``lost``: None when the consumer offsets
        show it committed, ``lost`` when they show it did not, ``CommitOutcomeUnknownError``
        (caused by ``lost``) when nothing tells."""
        observations: list[OffsetsObservation] = []
        problem = ""
        if not self._probes:
            problem = "it read no topic messages, whose consumer offsets would tell"
        else:
            try:
                async with deadline(SETTLE_TIMEOUT):
                    for probe in self._probes:
                        observations.extend(await probe(SETTLE_TIMEOUT))
            except asyncio.CancelledError:
                self._settled = Verdict.UNKNOWN
                self._outcome_unknown = True
                raise
            except Exception as exc:
                problem = f"the consumer offsets could not be read ({exc!r})"
        verdict = judge(observations) if not problem else Verdict.UNKNOWN
        self._settled = verdict
        if verdict is Verdict.COMMITTED:
            return None
        if verdict is Verdict.NOT_COMMITTED:
            logger.info(
                "the answer to the commit of %r was lost (%s); the consumer offsets show it did not commit: %s",
                self, lost, describe(observations),
            )
            return lost
        self._outcome_unknown = True
        if not problem:
            problem = f"its consumer offsets moved otherwise: {describe(observations)}"
        held = ", ".join(self._participants) or "nothing joined it"
        unknown = CommitOutcomeUnknownError(
            f"the answer to the commit of transaction {self._tx_id} was lost ({lost}) and nothing tells whether"
            f" it was applied: {problem}; it held: {held}",
            tx_id=self._tx_id,
            session_id=self.session_id,
            held=held,
        )
        unknown.__cause__ = lost
        return unknown

    async def rollback(self, timeout: float | None = None) -> None:
        """Run the before-rollback hooks, roll back, run the after-rollback hooks.

        Does nothing after a rollback or a failed commit; raises ``TransactionEndedError`` after
        a commit. A begin under way is waited for first. A transaction the server has already
        ended (NOT_FOUND) counts as rolled back. Another failing rollback call (e.g. the session
        died, which also ends the transaction) is raised after the hooks ran.
        """
        if self._state in (TransactionState.ROLLED_BACK, TransactionState.FAILED):
            return
        self._check_endable("rolled back")
        error: BaseException | None = None
        started = False
        async with deadline(timeout) as scope:
            try:
                await self._settle_begin()
                if self._state_now() in (TransactionState.ROLLED_BACK, TransactionState.FAILED):
                    return
                self._check_endable("rolled back")
                self._state = TransactionState.ROLLING_BACK
                started = True
                await self._run_before(self._before_rollback, quiet=True)
                await self._rollback_call(quiet=False)
            except BaseException as exc:
                error = exc
        if scope.expired():
            error = _timed_out("rollback", timeout, error)
        if not started:
            if error is not None:
                raise error
            return
        with anyio.CancelScope(shield=True):
            self._state = TransactionState.ROLLED_BACK
            if error is not None and _session_suspect(error):
                self._invalidate_session(error)
            await self._release()
            await self._run_after(self._after_rollback, error)
        if error is not None:
            raise error

    def _state_now(self) -> TransactionState:
        # Re-read after an await: another task may have ended the transaction meanwhile.
        return self._state

    def _check_endable(self, goal: str) -> None:
        if self._state not in (TransactionState.NOT_STARTED, TransactionState.ACTIVE):
            raise TransactionEndedError(f"{self!r} is {self._state.value}: it cannot be {goal}")

    async def _rollback_call(self, *, quiet: bool) -> None:
        session = self._session
        if self._tx_id is None or session is None or not session.alive:
            return
        try:
            await _rpc.call(
                self._transport,
                "RollbackTransaction",
                qpb.RollbackTransactionRequest(session_id=session.id, tx_id=self._tx_id),
                qpb.RollbackTransactionResponse,
                timeout=_CLEANUP_TIMEOUT,
                node_id=session.node_id,
            )
            return
        except NotFoundError:
            return  # the server already ended it (aborted, or its session went away)
        except Exception as exc:
            error = exc
        if _session_suspect(error) or isinstance(error, SessionBusyError):
            self._invalidate_session(error)
        if not quiet:
            raise error
        logger.warning("rolling back %r failed: %s", self, error)

    def _invalidate_session(self, error: BaseException) -> None:
        if self._session is not None:
            self._session.invalidate(error)

    async def _release(self) -> None:
        self._open_transactions.discard(self)
        if self._session is not None and not self._released:
            self._released = True
            await run_within(self._pool.release(self._session), _CLEANUP_TIMEOUT)

    async def _run_before(self, hooks: list[BeforeHook], *, quiet: bool = False) -> None:
        index = 0
        while index < len(hooks):  # a hook may register more hooks
            hook = hooks[index]
            index += 1
            try:
                result = hook(self)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                if not quiet:
                    raise
                logger.warning("a before-rollback hook of %r failed", self, exc_info=True)

    async def _run_after(self, hooks: list[AfterHook], error: BaseException | None) -> None:
        for hook in list(hooks):
            try:
                result = hook(self, error)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.warning("an after-hook of %r failed", self, exc_info=True)

    def __repr__(self) -> str:
        return f"Transaction(tx_id={self._tx_id!r}, session_id={self.session_id!r}, {self._state.value})"


def _session_suspect(error: BaseException) -> bool:
    """Whether ``error`` leaves the session in an unknown or broken state."""
    if isinstance(error, BadSessionError | SessionExpiredError | TransportError):
        return True
    if isinstance(error, ServerTimeoutError | ServerCancelledError | UndeterminedError):
        return True  # the operation may still be running on the session
    # Any other server status leaves the session usable; cancellation or a timeout may leave a
    # call still running on it.
    return not isinstance(error, ServerError)


def _outcome_uncertain(error: BaseException) -> bool:
    """Whether a commit that failed with ``error`` after it was sent may nevertheless have applied."""
    if isinstance(error, BadSessionError | SessionExpiredError):
        return False  # a dead session takes its open transaction with it
    if isinstance(error, UndeterminedError | ServerTimeoutError | ServerCancelledError | TransportError):
        return True
    # A cancellation or a deadline while the request was out: no answer, no knowing.
    return not isinstance(error, ServerError)


def _timed_out(what: str, timeout: float | None, cause: BaseException | None) -> OperationTimeoutError:
    error = OperationTimeoutError(f"the {what} did not finish within {timeout}s")
    error.__cause__ = cause
    return error
