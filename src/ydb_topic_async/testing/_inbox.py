"""Client messages of a bidirectional stream, read by one task into a queue.

A stream handler must react to three things at once: a client message, new data in storage, and
the fault injector. Reading the client side in its own task and sharing one wake-up event lets
the handler wait on all three with a single ``await``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import grpc
from google.protobuf.message import DecodeError

from ._replies import failure, issues, metadata

if TYPE_CHECKING:
    from .state import ServerState

HANDSHAKE_TIMEOUT = 30.0


class Inbox:
    """Reads ``requests`` in the background; ``wakeup`` is set on every arrival and at the end."""

    def __init__(self, requests: AsyncIterator[Any], wakeup: asyncio.Event) -> None:
        self.messages: deque[Any] = deque()
        self.closed = False
        self.error: BaseException | None = None
        self.unparsable = ""
        """Why a client message could not be parsed; the handler then ends the stream with an error."""
        self._requests = requests
        self._wakeup = wakeup
        self._task = asyncio.get_running_loop().create_task(self._pump(), name="local-server stream inbox")

    async def _pump(self) -> None:
        try:
            async for message in self._requests:
                self.messages.append(message)
                self._wakeup.set()
        except asyncio.CancelledError:
            raise
        except DecodeError as exc:
            self.unparsable = f"cannot parse a client message: {exc}"
        except Exception as exc:  # the client went away: the handler ends the stream
            self.error = exc
        finally:
            self.closed = True
            self._wakeup.set()

    async def first(self, timeout: float) -> Any | None:
        """The first client message (the handshake), or None when the client sent none in time."""
        with anyio.move_on_after(timeout):
            while not self.messages and not self.closed:
                await self._wakeup.wait()
                self._wakeup.clear()
        return self.messages.popleft() if self.messages else None

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.wait([self._task])


async def receive_handshake(
    state: ServerState,
    inbox: Inbox,
    context: grpc.aio.ServicerContext[Any, Any],
    method: str,
    reply_cls: Any,
) -> tuple[Any | None, Any | None]:
    """The client's InitRequest, or the failure to answer with instead: ``(init, None)`` or ``(None, reply)``.

    Like YDB, the server answers only once the handshake arrived, so a client never races a
    stream that was already closed. Then the gate (auth, database) and injected faults are checked, in that order.
    """
    first = await inbox.first(HANDSHAKE_TIMEOUT)
    aborted, code = state.faults.take_abort(method)
    if aborted:
        if code is None:
            await asyncio.Event().wait()  # never answered: until the call is cancelled
        else:
            await context.abort(code, "injected failure")
    refusal = state.admit(method, metadata(context))
    if refusal is not None:
        status, message = refusal
        return None, reply_cls(status=status, issues=issues(message))
    if inbox.unparsable:
        await context.abort(grpc.StatusCode.INTERNAL, inbox.unparsable)
    if first is None or first.WhichOneof("client_message") != "init_request":
        return None, failure(reply_cls, "BAD_REQUEST", f"the first message of {method} must be an InitRequest")
    return first.init_request, None
