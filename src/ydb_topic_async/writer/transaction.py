"""A writer's part in one transaction: ``WriteTransaction``, shared by ``TxWriter`` and ``KeyedTxWriter``.

A transactional writer is made with a ``WriteTransaction`` and hands it to every stream writer it
runs (``TopicWriter(..., transaction=...)``), whose WriteRequests then carry the transaction's
identity. The identity is known before anything is written: every write first ``begin``s the
transaction (beginning it on the server if it has not begun) and only then hands its messages
over.

The transaction's hooks are written here once for both writers. The before-commit hook seals
the writer (a later write raises ``TransactionEndedError``), waits for the writes under way,
closes the writer (which waits for every acknowledgement) and checks that each message was
written into the transaction; on any failure it makes sure the transaction can never commit
and the server drops what it holds. The after-commit and rollback hooks stop the writer with
``TransactionEndedError``, so a writer never serves a second transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Protocol

from .._errors import InternalError, TransactionEndedError, WriterClosedError
from .._futures import suppress_future_errors
from ..query._binding import bind
from .messages import Skipped, WriteResult, WrittenInTx

if TYPE_CHECKING:
    from .._proto import ydb_topic_pb2 as pb
    from .._transport import Transport


class TransactionalWriter(Protocol):
    """What the hooks need of the writer that joined the transaction."""

    path: str

    @property
    def closed(self) -> bool: ...

    @property
    def failure(self) -> BaseException | None: ...

    def _check_usable(self) -> None: ...

    async def close(self, timeout: float | None = None) -> None: ...

    async def _shutdown(self, reason: BaseException) -> None: ...


def check_written_in_tx(path: str, result: WriteResult) -> None:
    """Raise ``InternalError`` unless ``result`` acknowledges a write into the transaction
    (``Skipped``: a resend after a lost acknowledgement, deduplicated by its producer id)."""
    if not isinstance(result, WrittenInTx | Skipped):
        raise InternalError(
            f"the server acknowledged a transactional write to {path} as {result!r}, outside the transaction"
        )


async def wait_written(futures: Sequence[asyncio.Future[WriteResult]]) -> None:
    """Wait for the acknowledgement of each of ``futures``; raise the first failure among them."""
    if not futures:
        return
    await asyncio.wait(futures)
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error.with_traceback(None)


class WriteTransaction:
    """The transaction ``tx`` as one writer takes part in it (see the module's docstring).

    Made before the writer (``TopicWriter`` and ``KeyedWriter`` take it at construction), then
    ``join``ed by it, which registers the hooks.
    """

    def __init__(self, tx: object, transport: Transport) -> None:
        binding = bind(tx)
        binding.check_accepting()
        self._binding = binding
        self._transport = transport
        self._identity: pb.TransactionIdentity | None = None
        self._writer: TransactionalWriter | None = None
        self._name = "the transactional writer"
        self._results: list[asyncio.Future[WriteResult]] = []
        """The result of every message written: the commit checks each went into the transaction."""
        self._writing = 0
        """Writes under way that have not handed their messages over yet."""
        self._writes_settled = asyncio.Event()
        self._writes_settled.set()
        self._sealed = False
        self.ended: str | None = None
        """How the transaction ended ("committed", "was rolled back", ...), or None while it runs."""

    def __repr__(self) -> str:
        # What a lost commit says it held: the writer itself, as its own repr shows it.
        return repr(self._writer) if self._writer is not None else f"WriteTransaction({self._name})"

    def join(self, writer: TransactionalWriter, name: str) -> None:
        """Take ``writer`` (named ``name`` in errors: "the keyed writer for /local/t") into the
        transaction: its hooks run at the commit or rollback."""
        self._writer = writer
        self._name = name
        binding = self._binding
        binding.on_before_commit(self._before_commit)
        binding.on_after_commit(self._after_commit)
        binding.on_before_rollback(self._before_rollback)
        binding.on_after_rollback(self._after_rollback)

    @property
    def identity(self) -> pb.TransactionIdentity:
        """The transaction's identity, which every WriteRequest carries (known once ``begin`` returned)."""
        if self._identity is None:
            raise InternalError(f"{self._name} sent a request before its transaction began")
        return self._identity

    # --- writing -----------------------------------------------------------------------------

    def check_usable(self) -> None:
        """Raise ``TransactionEndedError`` once the transaction ended or began to commit.

        Checked as a call begins (``begin`` for writes), not again while it waits: a write under
        way when the commit begins joins it."""
        if self.ended is not None:
            raise self._ended_error()
        if self._sealed:
            raise TransactionEndedError(
                f"the transaction of {self._name} is committing: nothing more can be written to it"
            )
        self._binding.check_accepting()

    def _ended_error(self) -> TransactionEndedError:
        return TransactionEndedError(f"{self._name} stopped: its transaction {self.ended}")

    async def begin(self) -> None:
        """Check that the writer may write, and begin the transaction if it has not begun."""
        writer = self._writer
        assert writer is not None
        self.check_usable()
        writer._check_usable()
        if self._identity is None:
            identity = await self._binding.identity()
            self.check_usable()
            writer._check_usable()
            self._identity = identity

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Around a write until it handed its messages over (and gave their results to
        ``expect``): a commit that begins meanwhile waits for it."""
        self._writing += 1
        self._writes_settled.clear()
        try:
            yield
        finally:
            self._writing -= 1
            if not self._writing:
                self._writes_settled.set()

    def expect(self, results: Sequence[asyncio.Future[WriteResult]]) -> None:
        """The results of messages written: the commit waits for them and checks each."""
        self._results.extend(results)

    # --- hooks -------------------------------------------------------------------------------

    async def _before_commit(self) -> None:
        self._sealed = True
        try:
            await self._settle()
        except BaseException as exc:
            # However the caller reacts, this transaction must never commit without these messages.
            await self._binding.abort(self._transport, exc)
            raise

    async def _settle(self) -> None:
        """Wait until every message written is acknowledged, in the transaction, and the writer closed."""
        if self.ended is not None:
            if self.ended == "committed":
                return
            raise self._ended_error()
        writer = self._writer
        assert writer is not None
        # Writes that began before the commit may still wait for the transaction or for buffer
        # space; no new one can start (the writer is sealed).
        await self._writes_settled.wait()
        if writer.failure is not None:
            raise writer.failure.with_traceback(None)
        if not writer.closed:
            await writer.close()  # waits for every acknowledgement, then closes the streams
        for future in list(self._results):
            if not future.done():
                raise WriterClosedError(f"{self._name} was closed before its messages were written")
            error = future.exception()
            if error is not None:
                raise error.with_traceback(None)
            check_written_in_tx(writer.path, future.result())

    async def _after_commit(self, error: BaseException | None) -> None:
        await self._end("committed" if error is None else f"failed to commit ({error!r})")

    async def _before_rollback(self) -> None:
        await self._end("was rolled back")

    async def _after_rollback(self, error: BaseException | None) -> None:
        await self._end("was rolled back")

    async def _end(self, how: str) -> None:
        if self.ended is None:
            self.ended = how
        if self._writer is not None:
            await self._writer._shutdown(TransactionEndedError(f"the transaction {how} before these were acknowledged"))
        results, self._results = self._results, []
        suppress_future_errors(results)


__all__ = ["TransactionalWriter", "WriteTransaction", "check_written_in_tx", "wait_written"]
