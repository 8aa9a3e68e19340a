"""One view of a transaction for transactional writers and readers, whichever SDK made it.

Two kinds of transaction objects are accepted: ours (``Transaction``) and the official ``ydb``
package's asyncio query transactions (``session.transaction()`` of ``ydb.aio.QuerySessionPool``).
The official ones take hooks through their callback registry (``_add_callback`` with the event
names ``BEFORE_COMMIT``, ``AFTER_COMMIT``, ``BEFORE_ROLLBACK``, ``AFTER_ROLLBACK``), run the
before-commit callbacks only for a transaction that began, and refuse to commit once an external
error was set on them. The ``ydb`` package is never imported here: the objects are recognised
by shape, and the private fields relied on are checked when a transaction is first bound, so
an incompatible ``ydb`` release fails there with a clear error rather than at some later call.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import InvalidArgumentError, NotFoundError, TransactionEndedError
from .._proto import ydb_query_pb2 as qpb
from .._proto import ydb_topic_pb2 as tpb
from . import _rpc
from ._outcome import OffsetsProbe
from .transaction import Transaction

if TYPE_CHECKING:
    from .._transport import Transport

logger = logging.getLogger("ydb_topic_async.query")

BeforeFn = Callable[[], Awaitable[None]]
AfterFn = Callable[[BaseException | None], Awaitable[None]]


class TxBinding:
    """What a transactional writer or reader needs from a transaction."""

    tx: Any

    def describe(self) -> str:
        return repr(self.tx)

    async def identity(self) -> tpb.TransactionIdentity:
        """The identity for topic requests; begins the transaction if needed."""
        raise NotImplementedError

    def current_identity(self) -> tpb.TransactionIdentity | None:
        """The identity if the transaction began (no checks; for hooks)."""
        raise NotImplementedError

    def node_id(self) -> int | None:
        """The node the transaction's session lives on, where calls naming it belong (None: unknown)."""
        return None

    def check_accepting(self) -> None:
        """Raise ``TransactionEndedError`` unless work may still join the transaction."""
        raise NotImplementedError

    def on_before_commit(self, fn: BeforeFn) -> None:
        raise NotImplementedError

    def on_after_commit(self, fn: AfterFn) -> None:
        raise NotImplementedError

    def on_before_rollback(self, fn: BeforeFn) -> None:
        raise NotImplementedError

    def on_after_rollback(self, fn: AfterFn) -> None:
        raise NotImplementedError

    def fail(self, error: BaseException) -> None:
        """Make sure the transaction can never commit any more."""
        raise NotImplementedError

    def on_commit_lost(self, probe: OffsetsProbe) -> None:
        """Offer ``probe`` (the consumer offsets the transaction commits) to settle a commit
        whose answer is lost; a transaction that cannot settle ignores it."""

    async def abort(self, transport: Transport, error: BaseException) -> None:
        """``fail``, and make sure the server drops what the transaction holds."""
        self.fail(error)


class _OwnBinding(TxBinding):
    def __init__(self, tx: Transaction) -> None:
        self.tx = tx

    async def identity(self) -> tpb.TransactionIdentity:
        identity: tpb.TransactionIdentity = await self.tx._identity()
        return identity

    def current_identity(self) -> tpb.TransactionIdentity | None:
        if self.tx.tx_id is None or self.tx.session_id is None:
            return None
        return tpb.TransactionIdentity(id=self.tx.tx_id, session=self.tx.session_id)

    def node_id(self) -> int | None:
        session = self.tx._session
        return None if session is None else session.node_id

    def check_accepting(self) -> None:
        self.tx._check_accepting()

    def on_before_commit(self, fn: BeforeFn) -> None:
        async def hook(tx: Transaction) -> None:
            await fn()

        self.tx.before_commit(hook)
        owner = getattr(fn, "__self__", None)  # a writer's bound hook: say which writer joined
        if owner is not None:
            self.tx._joined(owner)

    def on_commit_lost(self, probe: OffsetsProbe) -> None:
        self.tx._on_commit_lost(probe)

    def on_after_commit(self, fn: AfterFn) -> None:
        async def hook(tx: Transaction, error: BaseException | None) -> None:
            await fn(error)

        self.tx.after_commit(hook)

    def on_before_rollback(self, fn: BeforeFn) -> None:
        async def hook(tx: Transaction) -> None:
            await fn()

        self.tx.before_rollback(hook)

    def on_after_rollback(self, fn: AfterFn) -> None:
        async def hook(tx: Transaction, error: BaseException | None) -> None:
            await fn(error)

        self.tx.after_rollback(hook)

    def fail(self, error: BaseException) -> None:
        self.tx._fail(error)


_OPEN_STATES = ("NOT_INITIALIZED", "BEGINED")
_BINDING_ATTRIBUTE = "_ydb_topic_async_binding"
_ROLLBACK_TIMEOUT = 5.0


class _OfficialBinding(TxBinding):
    """An official ``ydb`` asyncio query transaction (``ydb.aio.query.transaction.QueryTxContext``)."""

    def __init__(self, tx: Any) -> None:
        self.tx = tx
        self._begin_lock = asyncio.Lock()
        self._ending = False
        self._rolled_back = False

        async def mark_ending(*_: Any, **__: Any) -> None:
            self._ending = True

        # Once the transaction starts to end, nothing more may join it.
        tx._add_callback("BEFORE_COMMIT", mark_ending, None)
        tx._add_callback("BEFORE_ROLLBACK", mark_ending, None)

    def check_accepting(self) -> None:
        tx = self.tx
        name = _official_state(tx)
        if self._ending or name not in _OPEN_STATES:
            raise TransactionEndedError(f"the ydb transaction {tx.tx_id!r} is {name}: nothing more can join it")
        if tx._external_error is not None:
            raise TransactionEndedError(f"the ydb transaction {tx.tx_id!r} already failed: {tx._external_error}")

    async def identity(self) -> tpb.TransactionIdentity:
        self.check_accepting()
        if self.tx.tx_id is None:
            async with self._begin_lock:
                self.check_accepting()
                if self.tx.tx_id is None:
                    await self.tx.begin()
        identity = self.current_identity()
        assert identity is not None
        return identity

    def node_id(self) -> int | None:
        node_id = getattr(getattr(self.tx, "session", None), "node_id", None)
        return node_id if isinstance(node_id, int) and not isinstance(node_id, bool) else None

    def current_identity(self) -> tpb.TransactionIdentity | None:
        tx_id, session_id = self.tx.tx_id, self.tx.session_id
        if not tx_id or not session_id:
            return None
        return tpb.TransactionIdentity(id=tx_id, session=session_id)

    def on_before_commit(self, fn: BeforeFn) -> None:
        async def callback(tx: Any) -> None:
            await fn()

        self.tx._add_callback("BEFORE_COMMIT", callback, None)

    def on_after_commit(self, fn: AfterFn) -> None:
        async def callback(tx: Any, exc: BaseException | None = None) -> None:
            await fn(exc)

        self.tx._add_callback("AFTER_COMMIT", callback, None)

    def on_before_rollback(self, fn: BeforeFn) -> None:
        async def callback(tx: Any) -> None:
            await fn()

        self.tx._add_callback("BEFORE_ROLLBACK", callback, None)

    def on_after_rollback(self, fn: AfterFn) -> None:
        async def callback(tx: Any, exc: BaseException | None = None) -> None:
            await fn(exc)

        self.tx._add_callback("AFTER_ROLLBACK", callback, None)

    def fail(self, error: BaseException) -> None:
        self.tx._set_external_error(error)

    async def abort(self, transport: Transport, error: BaseException) -> None:
        # With an external error set, the official commit() and rollback() raise at once and its
        # context manager skips the rollback: roll the server transaction back here, or it stays
        # open on a pooled session, holding its writes and offsets.
        self.fail(error)
        identity = self.current_identity()
        if identity is None or self._rolled_back:
            return
        self._rolled_back = True
        request = qpb.RollbackTransactionRequest(session_id=identity.session, tx_id=identity.id)
        with anyio.CancelScope(shield=True):
            try:
                await _rpc.call(
                    transport,
                    "RollbackTransaction",
                    request,
                    qpb.RollbackTransactionResponse,
                    timeout=_ROLLBACK_TIMEOUT,
                )
            except NotFoundError:
                pass  # already gone on the server
            except Exception as exc:
                logger.warning("rolling back the failed ydb transaction %s failed: %s", identity.id, exc)


def _official_state(tx: Any) -> str:
    state = tx._tx_state._state
    name: str = state.name
    return name


def _check_official_shape(tx: Any) -> None:
    """Fail now, clearly, when this ``ydb`` release lacks the private fields the adapter reads."""
    try:
        name = _official_state(tx)
        tx._external_error  # noqa: B018 - probing that the attribute exists
        callbacks = tx._callbacks
    except AttributeError as exc:
        raise InvalidArgumentError(
            f"unsupported ydb package version: its transaction object {type(tx).__name__} lacks {exc.name!r},"
            " which transactional topic writers and readers rely on"
        ) from None
    if not isinstance(name, str) or not hasattr(callbacks, "__getitem__"):
        raise InvalidArgumentError(
            f"unsupported ydb package version: unexpected transaction state {name!r} of {type(tx).__name__}"
        )


def _is_official_async_tx(tx: Any) -> bool:
    module = type(tx).__module__
    return (
        module.startswith("ydb.")
        and callable(getattr(tx, "_add_callback", None))
        and callable(getattr(tx, "_set_external_error", None))
        and inspect.iscoroutinefunction(getattr(tx, "begin", None))
        and inspect.iscoroutinefunction(getattr(tx, "commit", None))
    )


def bind(tx: object) -> TxBinding:
    """The binding for ``tx``; one per official transaction, so its state is shared.

    An official transaction keeps its binding as an attribute, so the binding (which refers to
    it) lives exactly as long as the transaction does.
    """
    if isinstance(tx, Transaction):
        return _OwnBinding(tx)
    if _is_official_async_tx(tx):
        binding = getattr(tx, _BINDING_ATTRIBUTE, None)
        if binding is None:
            _check_official_shape(tx)
        if binding is None:
            binding = _OfficialBinding(tx)
            try:
                setattr(tx, _BINDING_ATTRIBUTE, binding)
            except AttributeError:
                raise InvalidArgumentError(
                    f"unsupported ydb package version: cannot attach to {type(tx).__name__} objects"
                ) from None
        assert isinstance(binding, _OfficialBinding)
        return binding
    raise InvalidArgumentError(
        "tx must be a transaction from driver.query.transaction() or from the ydb package's asyncio"
        f" query client (session.transaction()), not {type(tx).__name__}"
    )
