"""QueryService calls. Its responses carry the status themselves instead of an ``Operation``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import grpc.aio

from .._errors import error_from_grpc, raise_for_status
from .._proto import ydb_query_pb2 as qpb

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from .._driver import Driver

SERVICE = "/Ydb.Query.V1.QueryService/"

R = TypeVar("R", bound="Message")


async def call(
    driver: Driver, method: str, request: Message, response_cls: type[R], *, timeout: float | None
) -> R:
    """One unary QueryService call; a non-success status raises the matching ``ServerError``."""
    channel = driver._channel()
    multicallable = channel.unary_unary(
        SERVICE + method,
        request_serializer=type(request).SerializeToString,
        response_deserializer=response_cls.FromString,
    )
    metadata = await driver._metadata()
    try:
        response: Any = await multicallable(request, metadata=metadata, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        raise error_from_grpc(exc) from None
    raise_for_status(response.status, response.issues)
    result: R = response
    return result


async def open_attach_stream(driver: Driver, session_id: str) -> grpc.aio.UnaryStreamCall[Any, Any]:
    """Start ``AttachSession``: the server streams ``SessionState`` for as long as the session lives."""
    channel = driver._channel()
    multicallable = channel.unary_stream(
        SERVICE + "AttachSession",
        request_serializer=qpb.AttachSessionRequest.SerializeToString,
        response_deserializer=qpb.SessionState.FromString,
    )
    stream: grpc.aio.UnaryStreamCall[Any, Any] = multicallable(
        qpb.AttachSessionRequest(session_id=session_id), metadata=await driver._metadata()
    )
    return stream
