"""QueryService calls, through the transport. Its responses carry the status themselves instead
of an ``Operation``.

Each call is tried once: what may be repeated after a failure is a whole transaction (see
``QueryClient.retry_tx``) or a whole session (see ``SessionPool``), never one step of it. The
calls of a session go to the node it lives on (``node_id``), as the official SDKs send them: a
call that cannot reach that node fails there, instead of being forwarded by another node whose
answer could hide what happened to it.
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
    transport: Transport,
    method: str,
    request: Message,
    response_cls: type[R],
    *,
    timeout: float | None,
    node_id: int | None = None,
) -> R:
    """One QueryService call; a non-success status raises the matching ``ServerError``.

    ``timeout`` bounds the whole call (``OperationTimeoutError``); ``node_id`` is the node of the
    session the call names (the balancer's choice when discovery does not know it)."""
    endpoint = None if node_id is None else transport.balancer.for_node(node_id)
    response: R = await transport.unary(
        SERVICE + method, request, response_cls, status_result, timeout=timeout, retry=_ONCE, endpoint=endpoint
    )
    return response


async def open_attach_stream(
    transport: Transport, session_id: str, node_id: int | None = None
) -> grpc.aio.UnaryStreamCall[Any, Any]:
    """Start ``AttachSession`` on the session's node: the server streams ``SessionState`` for as
    long as the session lives."""
    return await transport.open_server_stream(
        SERVICE + "AttachSession", qpb.AttachSessionRequest(session_id=session_id), qpb.SessionState, node_id=node_id
    )
