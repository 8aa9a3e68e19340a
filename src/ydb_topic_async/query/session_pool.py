"""Query sessions and the small pool that keeps them.

A session is created with ``CreateSession`` and then attached: ``AttachSession`` is a server
stream that keeps the session alive while it is open and ends (or reports a non-success status)
when the server drops the session. A background task per session watches that stream, so a
session's death is known before the next call on it. Sessions go back to the pool after a
transaction unless they died or the server hinted at a shutdown; ``DeleteSession`` ends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio
import grpc
import grpc.aio

from .._errors import (
    BadSessionError,
    ClosedError,
    ConnectionLostError,
    DeadlineExceededError,
    InvalidArgumentError,
    OperationTimeoutError,
    YdbTopicError,
    error_from_grpc,
    error_from_status,
)
from .._futures import wait_within
from .._proto import ydb_query_pb2 as qpb
from .._proto import ydb_status_codes_pb2
from .._retry import retry_call
from . import _rpc

if TYPE_CHECKING:
    from .._transport import Transport

logger = logging.getLogger("ydb_topic_async.query")

_SUCCESS = ydb_status_codes_pb2.StatusIds.SUCCESS
DEFAULT_POOL_SIZE = 50
_DELETE_TIMEOUT = 2.0


class QuerySession:
    """One attached query session. Transactions borrow it from the pool; users rarely see it."""

    def __init__(self, transport: Transport, session_id: str, node_id: int) -> None:
        self._transport = transport
        self.id = session_id
        self.node_id = node_id
        self._stream: grpc.aio.UnaryStreamCall[Any, Any] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._death: BaseException | None = None
        self._draining = False
        self._closed = False
        self.died = asyncio.Event()
        """Set when the server dropped the session (or it was closed)."""

    @classmethod
    async def create(cls, transport: Transport, timeout: float) -> QuerySession:
        """``CreateSession`` then ``AttachSession``; the session is alive when this returns."""
        response = await _rpc.call(
            transport, "CreateSession", qpb.CreateSessionRequest(), qpb.CreateSessionResponse, timeout=timeout
        )
        session = cls(transport, response.session_id, response.node_id)
        try:
            await session._attach(timeout)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await session.close()
            raise
        return session

    async def _attach(self, timeout: float) -> None:
        stream = await _rpc.open_attach_stream(self._transport, self.id, self.node_id)
        self._stream = stream
        try:
            first = await wait_within(stream.read(), timeout)
        except TimeoutError:
            raise DeadlineExceededError(f"session {self.id} was not attached within {timeout}s") from None
        except grpc.aio.AioRpcError as exc:
            raise error_from_grpc(exc) from None
        if first is grpc.aio.EOF:
            raise BadSessionError(f"the server ended the attach stream of session {self.id} at once")
        if first.status != _SUCCESS:
            raise error_from_status(first.status, first.issues, f"attaching session {self.id}")
        self._watcher = asyncio.get_running_loop().create_task(self._watch(stream), name=f"query session {self.id}")

    async def _watch(self, stream: grpc.aio.UnaryStreamCall[Any, Any]) -> None:
        try:
            while True:
                try:
                    state = await stream.read()
                except grpc.aio.AioRpcError as exc:
                    self._die(BadSessionError(f"session {self.id} lost its attach stream: {error_from_grpc(exc)}"))
                    return
                if state is grpc.aio.EOF:
                    self._die(BadSessionError(f"the server closed session {self.id}"))
                    return
                if state.status != _SUCCESS:
                    cause = error_from_status(state.status, state.issues)
                    self._die(BadSessionError(f"session {self.id} died: {cause}"))
                    return
                if state.HasField("session_shutdown") or state.HasField("node_shutdown"):
                    # Still usable for the transaction under way, but not to be reused.
                    self._draining = True
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any other stream failure means the session cannot be trusted
            self._die(ConnectionLostError(f"session {self.id} lost its attach stream: {exc!r}"))

    def _die(self, error: BaseException) -> None:
        if self._death is None:
            self._death = error
            logger.debug("query session %s is gone: %s", self.id, error)
        self.died.set()

    @property
    def alive(self) -> bool:
        """False once the server dropped the session or it was closed."""
        return self._death is None and not self._closed

    @property
    def reusable(self) -> bool:
        return self.alive and not self._draining

    def check_alive(self) -> None:
        """Raise the reason the session is gone, if it is."""
        if self._death is not None:
            raise self._death.with_traceback(None)
        if self._closed:
            raise BadSessionError(f"session {self.id} was closed")

    def invalidate(self, error: BaseException) -> None:
        """Mark the session unusable (e.g. a call on it ended with an unknown outcome)."""
        self._die(error)

    async def close(self, timeout: float | None = None) -> None:
        """``DeleteSession`` (best effort, within ``timeout`` and 2 seconds), then stop watching;
        a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._death is None and not self._transport.closed:
                with contextlib.suppress(YdbTopicError):
                    await _rpc.call(
                        self._transport,
                        "DeleteSession",
                        qpb.DeleteSessionRequest(session_id=self.id),
                        qpb.DeleteSessionResponse,
                        timeout=_DELETE_TIMEOUT if timeout is None else min(_DELETE_TIMEOUT, timeout),
                        node_id=self.node_id,
                    )
        finally:
            self._die(ClosedError(f"session {self.id} was closed"))
            stream, self._stream = self._stream, None
            if stream is not None:
                stream.cancel()
            watcher, self._watcher = self._watcher, None
            if watcher is not None and not watcher.done():
                watcher.cancel()
                await asyncio.wait([watcher])

    def __repr__(self) -> str:
        state = "alive" if self.alive else "dead"
        return f"QuerySession({self.id!r}, node={self.node_id}, {state})"


class SessionPool:
    """At most ``size`` sessions; ``acquire`` reuses an idle live one or creates one."""

    def __init__(self, transport: Transport, size: int = DEFAULT_POOL_SIZE, create_timeout: float = 10.0) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise InvalidArgumentError(f"size must be a positive int, got {size!r}")
        if not create_timeout > 0:
            raise InvalidArgumentError("create_timeout must be positive")
        self._transport = transport
        self.size = size
        self._create_timeout = create_timeout
        self._slots = asyncio.Semaphore(size)
        self._idle: deque[QuerySession] = deque()
        self._all: set[QuerySession] = set()
        self._closed = False

    async def acquire(self, timeout: float | None = None) -> QuerySession:
        """A live session for the caller's exclusive use; give it back with ``release``."""
        self._check_open()
        try:
            await wait_within(self._slots.acquire(), timeout)
        except TimeoutError:
            raise OperationTimeoutError(f"no query session became free within {timeout}s") from None
        try:
            self._check_open()
            while self._idle:
                session = self._idle.popleft()
                if session.reusable:
                    return session
                await self._drop(session)
            transport = self._transport
            session = await retry_call(
                lambda: QuerySession.create(transport, self._create_timeout), transport.retry, idempotent=False
            )
            if self._closed:
                await session.close()
                self._check_open()
            self._all.add(session)
            return session
        except BaseException:
            self._slots.release()
            raise

    async def release(self, session: QuerySession) -> None:
        """Give a session back: a live one is kept for reuse, a dead one is deleted."""
        self._slots.release()
        if self._closed or not session.reusable:
            await self._drop(session)
        else:
            self._idle.append(session)

    async def _drop(self, session: QuerySession) -> None:
        self._all.discard(session)
        await session.close()

    async def close(self, timeout: float | None = None) -> None:
        """Delete every session, idle or borrowed, all at once, each within ``timeout`` (and 2 seconds)."""
        if self._closed:
            return
        self._closed = True
        sessions = list(self._all)
        self._all.clear()
        self._idle.clear()
        results = await asyncio.gather(*(session.close(timeout) for session in sessions), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the query session pool is closed")

    @property
    def idle(self) -> int:
        """Sessions waiting in the pool for reuse."""
        return len(self._idle)

    @property
    def open_sessions(self) -> int:
        """Sessions the pool holds, idle or borrowed."""
        return len(self._all)
