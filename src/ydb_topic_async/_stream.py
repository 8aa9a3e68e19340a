"""One bidirectional stream, and the loop that keeps one open for as long as its owner is.

``BidiStream`` wraps a ``grpc.aio`` stream-stream call for the writer and the reader alike:
typed reads and writes, one mapping of gRPC and YDB failures onto the SDK's exceptions (a
stream that ends cleanly becomes a retriable ``ConnectionLostError``), and a handshake (the
InitRequest written, the InitResponse read) bounded by a single asyncio-native deadline.

``StreamKeeper`` runs one stream session after another: it decides, through one
``RetryState``, whether and when to reconnect, keeps the public connection state and reconnect
count, reports reconnects to metrics, and logs a lost connection once (WARNING) when a streak
of failures starts, once (INFO) when it recovers, and once (ERROR) when it gives up. Before its
first connection it may also wait out a thing the stream needs that does not exist yet
(``WaitOut``: a writer's topic being created), each try logged at DEBUG.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio._backends._asyncio  # noqa: F401  # see below
import grpc
import grpc.aio

from ._credentials import AccessTokenCredentials, AnonymousCredentials
from ._errors import (
    ConnectionLostError,
    DeadlineExceededError,
    InternalError,
    error_from_code,
    error_from_grpc,
    error_from_status,
)
from ._futures import release_frames, run_within, wait_within
from ._proto import ydb_status_codes_pb2
from ._retry import RetryPolicy, RetryState, as_ydb_error

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from ._transport import Route, Transport

RequestT = TypeVar("RequestT", bound="Message")
ResponseT = TypeVar("ResponseT", bound="Message")

_OK = frozenset((ydb_status_codes_pb2.StatusIds.SUCCESS, ydb_status_codes_pb2.StatusIds.STATUS_CODE_UNSPECIFIED))
"""Statuses of a stream response that carries no failure (most responses leave it unset)."""

# anyio imports its asyncio backend on the first call that needs it: the first stream's task group,
# which put 15 ms of imports inside the first write's (or read's) latency. It is loaded with the
# SDK instead (the import above).

HEALTHY_AFTER = 5.0
"""A stream that lived this long counts as progress: its failure starts a new streak."""


class ConnectionState(enum.Enum):
    """Where a writer's or reader's connection stands (its ``connection_state``)."""

    CONNECTING = "connecting"
    """Opening the first stream."""
    CONNECTED = "connected"
    """A stream is open and its handshake was answered."""
    RECONNECTING = "reconnecting"
    """The stream was lost: waiting before the next attempt, or opening the next stream."""
    CLOSED = "closed"
    """Closed by its owner."""
    FAILED = "failed"
    """Gave up: a failure that retrying cannot fix, or the retry budget was spent."""


@dataclass(frozen=True)
class StreamMethod(Generic[RequestT, ResponseT]):
    """A bidirectional streaming method: its path, message classes and a name for messages."""

    path: str
    request_cls: type[RequestT]
    response_cls: type[ResponseT]
    name: str


class BidiStream(Generic[RequestT, ResponseT]):
    """One open gRPC bidirectional stream with the SDK's failure mapping.

    Reads and writes raise ``YdbTopicError``s only: a gRPC failure becomes its
    ``TransportError``, a response with a non-success YDB status its ``ServerError``, the end of
    the stream (or a write after it) the status the server ended it with. One task may read
    while another writes; ``close`` cancels the call. ``on_failure`` is told about every gRPC
    failure of the call (the transport pessimizes a node that fails).
    """

    __slots__ = ("_call", "_on_failure", "method")

    def __init__(
        self,
        call: grpc.aio.StreamStreamCall[RequestT, ResponseT],
        method: StreamMethod[RequestT, ResponseT],
        on_failure: Callable[[Exception], None] | None = None,
    ) -> None:
        self._call: grpc.aio.StreamStreamCall[RequestT, ResponseT] | None = call
        self._on_failure = on_failure
        self.method = method

    @classmethod
    async def open(
        cls,
        transport: Transport,
        method: StreamMethod[RequestT, ResponseT],
        init_request: RequestT,
        *,
        expect: str,
        timeout: float,
        node_id: int | None = None,
        deserializer: Callable[[bytes], ResponseT] | None = None,
    ) -> tuple[BidiStream[RequestT, ResponseT], ResponseT]:
        """Open a stream and do its handshake: send ``init_request``, read the first response,
        whose ``server_message`` must be ``expect``. Return the stream and that response.

        ``timeout`` bounds the whole handshake (headers and token, the write and the read): a
        server that accepts the connection and never answers fails it with a retriable
        ``DeadlineExceededError``. ``deserializer`` parses the responses instead of the method's
        response class.
        """
        opened: list[BidiStream[RequestT, ResponseT]] = []
        routes: list[Route] = []

        async def handshake() -> ResponseT:
            call, route = await transport.open_stream(
                method.path, method.request_cls, method.response_cls, node_id=node_id, deserializer=deserializer
            )
            routes.append(route)
            stream = BidiStream(call, method, functools.partial(transport.call_failed, route))
            opened.append(stream)
            await stream.write(init_request)
            return await stream.read()

        try:
            response = await wait_within(handshake(), timeout)
        except TimeoutError:
            for stream in opened:
                stream.close()
            error = DeadlineExceededError(f"the server did not answer the {method.name} handshake within {timeout}s")
            for route in routes:
                transport.call_failed(route, error)  # a node still not connected is pessimized
            raise error from None
        except BaseException:
            for stream in opened:
                stream.close()
            raise
        stream = opened[0]
        transport.call_succeeded(routes[0])
        kind = response.WhichOneof("server_message")
        if kind != expect:
            stream.close()
            raise InternalError(
                f"protocol violation: the {method.name} answered its handshake with {kind}, not {expect}"
            )
        return stream, response

    # The errors are raised outside the ``except`` blocks on purpose: an SDK error raised inside
    # one would keep the gRPC error as its ``__context__``, and with it (through tracebacks) the
    # call, which must be freed while its event loop still runs.

    async def write(self, request: RequestT) -> None:
        """Send one request."""
        call = self._call
        if call is None:
            raise self._closed_error()
        try:
            await call.write(request)
            return
        except grpc.RpcError as exc:
            error: Exception = self._failed(error_from_grpc(exc))
        except asyncio.InvalidStateError:  # the call has already ended
            error = await self._end_error(call)
        except asyncio.CancelledError as exc:
            release_frames(exc)
            del call
            raise
        del call  # the traceback keeps this frame: it must not keep the call too
        raise error

    async def read(self) -> ResponseT:
        """The next response; raises when the stream ended or the response carries a failure status."""
        call = self._call
        if call is None:
            raise self._closed_error()
        try:
            response: ResponseT = await call.read()
        except grpc.RpcError as exc:
            error: Exception = self._failed(error_from_grpc(exc))
        except asyncio.CancelledError as exc:
            release_frames(exc)
            del call
            raise
        else:
            if response is not grpc.aio.EOF:
                message: Any = response  # every FromServer message carries a status and issues
                status = message.status
                if status in _OK:
                    return response
                error = error_from_status(status, message.issues, self.method.name)
            else:
                error = await self._end_error(call)
        del call  # the traceback keeps this frame: it must not keep the call too
        raise error

    async def _end_error(self, call: grpc.aio.StreamStreamCall[RequestT, ResponseT]) -> Exception:
        code = await call.code()
        if code is None or code == grpc.StatusCode.OK:
            return ConnectionLostError(f"the server ended the {self.method.name}")
        return self._failed(error_from_code(code, await call.details()))

    def _failed(self, error: Exception) -> Exception:
        if self._on_failure is not None:
            self._on_failure(error)
        return error

    def _closed_error(self) -> Exception:
        return ConnectionLostError(f"the {self.method.name} was closed")

    def close(self) -> None:
        """Cancel the call (nothing more is sent or received) and let go of it."""
        call, self._call = self._call, None
        if call is not None:
            call.cancel()


class ConnectionStatus:
    """What writers and readers show of their connection (mixed into both facades).

    The owner sets ``_keeper`` and keeps ``_task`` (its background task, None until started) and
    ``_closed``.
    """

    _keeper: StreamKeeper
    _task: asyncio.Task[None] | None
    _closed: bool

    @property
    def connection_state(self) -> ConnectionState:
        """Where the connection stands: connecting, connected, reconnecting, closed or failed."""
        if self._task is None:
            return ConnectionState.CLOSED if self._closed else ConnectionState.CONNECTING
        return self._keeper.state

    @property
    def reconnects(self) -> int:
        """How many times a new stream was opened to replace a lost one (attempts that failed at
        once included): a counter to watch, or to alert on when it climbs."""
        return self._keeper.reconnects

    @property
    def last_error(self) -> BaseException | None:
        """The failure that ended the latest stream or connection attempt (None before any)."""
        return self._keeper.last_error


class WaitOut:
    """Failures a ``StreamKeeper`` waits out before its first connection, apart from its retry
    policy: something the stream needs that does not exist yet (a writer's topic being created).

    ``state`` picks them (its ``classify``), spaces the tries and bounds the wait (its policy's
    ``max_elapsed``, the last try as it ends); ``gave_up(error, waited, stopped)`` is the error that
    ends the keeper when the bound passes, or at once once ``stop()`` was called (its owner is
    closing: a wait under way ends then, and none starts after). ``what`` names the thing in log
    lines ("the topic"). After the first connection these failures are the keeper's like any other.
    """

    def __init__(
        self, state: RetryState, gave_up: Callable[[BaseException, float, bool], BaseException], what: str
    ) -> None:
        self.state = state
        self.gave_up = gave_up
        self.what = what
        self.stopped = False
        self._stop = asyncio.Event()

    def stop(self) -> None:
        """End the wait: now if one is under way, at its first failure otherwise."""
        self.stopped = True
        self._stop.set()

    async def sleep(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or until ``stop()``."""
        await run_within(self._stop.wait(), delay)


class RestartStream(Exception):
    """Raised by a stream session to replace its stream at once: not a failure, no backoff."""


class StreamKeeper:
    """Runs stream sessions one after another for as long as the owner is open.

    ``describe()`` names the owner in log messages ("topic writer /local/t (session s1)");
    ``log_fields()`` gives the ``extra`` of its log records. ``on_reconnect(error)`` is told
    about each reconnect (for metrics). ``recover(error)`` may turn a final failure into a reconnect (e.g. a partition
    that moved); ``loss()`` describes what the owner loses when it gives up, for the one ERROR
    logged then. ``closing()`` tells that the owner is closing: a session that ends then ends
    the loop quietly. ``hand_off(error)`` picks the failures that the owner's own user handles
    (a keyed writer finds out why a partition's writer was refused): they end the loop at once,
    like a final failure, but are logged at DEBUG rather than as an ERROR. ``wait_out`` names the
    failures waited out before the first connection (see ``WaitOut``).
    """

    def __init__(
        self,
        describe: Callable[[], str],
        policy: RetryPolicy,
        *,
        logger: logging.Logger,
        log_fields: Callable[[], Mapping[str, Any]],
        on_reconnect: Callable[[BaseException], None],
        recover: Callable[[BaseException], Awaitable[bool]] | None = None,
        loss: Callable[[], str] | None = None,
        closing: Callable[[], bool] | None = None,
        hand_off: Callable[[BaseException], bool] | None = None,
        wait_out: WaitOut | None = None,
    ) -> None:
        self._describe = describe
        self._retry = RetryState(policy, idempotent=True)
        self._logger = logger
        self._log_fields = log_fields
        self._on_reconnect = on_reconnect
        self._recover = recover
        self._loss = loss
        self._closing = closing
        self._hand_off = hand_off
        self._wait_out = wait_out
        self.state = ConnectionState.CONNECTING
        self.reconnects = 0
        """Streams opened to replace a lost one (attempts that failed at once included)."""
        self.last_error: BaseException | None = None
        """The failure that ended the latest stream (or attempt), None before any."""
        self._connected_at: float | None = None
        self._ever_connected = False
        self._streak_logged = False

    def connected(self, session_id: str) -> None:
        """A stream's handshake was answered."""
        wait = self._wait_out
        if wait is not None and not self._ever_connected and wait.state.failing:
            self._logger.info(
                "%s: connected after waiting %.1fs for %s (%d tries)",
                self._describe(), wait.state.elapsed(), wait.what, wait.state.attempt + 1, extra=self._log_fields(),
            )
        if self._streak_logged:
            self._streak_logged = False
            self._logger.info(
                "%s: connected after %d failed attempts in %.1fs",
                self._describe(), self._retry.attempt, self._retry.elapsed(), extra=self._log_fields(),
            )
        self.state = ConnectionState.CONNECTED
        self._ever_connected = True
        self._connected_at = time.monotonic()

    def stop_waiting(self) -> None:
        """The owner is closing: a wait for what the stream needs ends now (see ``WaitOut``)."""
        if self._wait_out is not None:
            self._wait_out.stop()

    def progressed(self) -> None:
        """The stream did useful work (acknowledgements, data): a failure starts a new streak."""
        if self._retry.attempt:
            self._retry.reset()

    async def run(self, session: Callable[[], Awaitable[None]]) -> None:
        """Run ``session()`` again and again until it fails for good (that error is raised), the
        owner closes, or the task is cancelled."""
        try:
            await self._run(session)
        finally:
            if self.state is not ConnectionState.FAILED:
                self.state = ConnectionState.CLOSED

    async def _run(self, session: Callable[[], Awaitable[None]]) -> None:
        while True:
            cause: BaseException | None = None
            try:
                await session()
                error: BaseException = ConnectionLostError("the stream ended")
            except RestartStream as restart:
                self._connected_at = None
                self._retry.reset()
                self.state = ConnectionState.RECONNECTING
                self._logger.info("%s: %s; opening a new stream", self._describe(), restart, extra=self._log_fields())
                continue
            except Exception as exc:
                converted = as_ydb_error(exc)
                error = converted or exc
                cause = exc if converted is not None and converted is not exc else None
            if self._closing is not None and self._closing():
                return
            if self._connected_at is not None and time.monotonic() - self._connected_at >= HEALTHY_AFTER:
                self._retry.reset()
            self._connected_at = None
            self.last_error = error
            wait = self._wait_out
            if wait is not None and not self._ever_connected and wait.state.retries(error):
                await self._wait(wait, error)
                continue
            handed_off = self._hand_off is not None and self._hand_off(error)
            delay = None if handed_off else self._retry.next_delay(error)
            if delay is None and not handed_off and self._recover is not None and await self._recover(error):
                delay = self._retry.policy.fast.delay(self._retry.attempt - 1)
            if delay is None:
                self.state = ConnectionState.FAILED
                if handed_off:
                    self._logger.debug("%s ended: %r", self._describe(), error, extra=self._log_fields())
                else:
                    loss = self._loss() if self._loss is not None else ""
                    self._logger.error(
                        "%s failed%s: %r", self._describe(), f" {loss}" if loss else "", error, extra=self._log_fields()
                    )
                if cause is None:
                    raise error  # as it is: its own cause, if any, stays
                raise error from cause
            self.reconnects += 1
            self.state = ConnectionState.RECONNECTING
            self._on_reconnect(error)
            if not self._streak_logged:
                self._streak_logged = True
                self._logger.warning(
                    "%s: %s (%r); %s",
                    self._describe(),
                    "connection lost" if self._ever_connected else "could not connect",
                    error,
                    "reconnecting" if self._ever_connected else "retrying",
                    extra=self._log_fields(),
                )
            else:
                self._logger.debug(
                    "%s: attempt %d failed (%r); next in %.3fs",
                    self._describe(), self._retry.attempt, error, delay, extra=self._log_fields(),
                )
            await asyncio.sleep(delay)

    async def _wait(self, wait: WaitOut, error: BaseException) -> None:
        """Wait out ``error`` (something the stream needs does not exist yet): return when the
        next try is due, or raise ``wait.gave_up``'s error when the wait is over."""
        delay = None if wait.stopped else wait.state.next_delay(error)
        if delay is not None:
            self.reconnects += 1
            self.state = ConnectionState.RECONNECTING
            self._on_reconnect(error)
            self._logger.debug(
                "%s: %s does not exist yet (try %d, %.1fs of %gs waited); next try in %.3fs",
                self._describe(), wait.what, wait.state.attempt, wait.state.elapsed(),
                wait.state.policy.max_elapsed, delay, extra=self._log_fields(),
            )
            await wait.sleep(delay)
            if not wait.stopped:
                return
        final = wait.gave_up(error, wait.state.elapsed(), wait.stopped)
        self.last_error = final
        self.state = ConnectionState.FAILED
        loss = self._loss() if self._loss is not None else ""
        self._logger.error(
            "%s failed%s: %r", self._describe(), f" {loss}" if loss else "", final, extra=self._log_fields()
        )
        raise final from error


def tokens_may_change(transport: Transport) -> bool:
    """Whether the transport's credentials may produce a new token later. Anonymous credentials
    and a fixed token never do: a stream needs no refresh task for them (a task per stream costs
    a writer or reader about a sixth of its memory)."""
    return type(transport.credentials) not in (AnonymousCredentials, AccessTokenCredentials)


async def refresh_tokens(
    transport: Transport,
    interval: float,
    on_new_token: Callable[[str], None],
    *,
    describe: Callable[[], str],
    logger: logging.Logger,
    log_fields: Callable[[], Mapping[str, Any]],
) -> None:
    """Every ``interval`` seconds, ask the credentials for a token; pass a new one to
    ``on_new_token`` (the stream sends it in-band). A failed refresh is logged (a WARNING for the
    first of a streak, DEBUG for the rest) and tried again at the next tick: the current token is
    still valid for a while."""
    last = transport.current_token
    failing = False
    while True:
        await asyncio.sleep(interval)
        try:
            token = await transport.auth_token()
        except Exception:
            (logger.debug if failing else logger.warning)(
                "%s could not refresh its token; trying again in %gs", describe(), interval,
                exc_info=True, extra=log_fields(),
            )
            failing = True
            continue
        failing = False
        if token and token != last:
            last = token
            on_new_token(token)
