"""QueryService calls, through the transport. Its responses carry the status themselves instead
of an ``Operation``.

Each call is tried once: what may be repeated after a failure is a whole transaction (see
``QueryClient.retry_tx``) or a whole session (see ``SessionPool``), never one step of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import grpc.aio

from .._proto import ydb_query_pb2 as qpb
from .._retry import RetryPolicy
from .._transport import status_result

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from .._transport import Transport

SERVICE = "/Ydb.Query.V1.QueryService/"

R = TypeVar("R", bound="Message")

_ONCE = RetryPolicy.no_retries()


async def call(
    transport: Transport, method: str, request: Message, response_cls: type[R], *, timeout: float | None
) -> R:
    """One QueryService call; a non-success status raises the matching ``ServerError``.

    ``timeout`` bounds the whole call (``OperationTimeoutError``)."""
    response: R = await transport.unary(
        SERVICE + method, request, response_cls, status_result, timeout=timeout, retry=_ONCE
    )
    return response


async def open_attach_stream(transport: Transport, session_id: str) -> grpc.aio.UnaryStreamCall[Any, Any]:
    """Start ``AttachSession``: the server streams ``SessionState`` for as long as the session lives."""
    return await transport.open_server_stream(
        SERVICE + "AttachSession", qpb.AttachSessionRequest(session_id=session_id), qpb.SessionState
    )
