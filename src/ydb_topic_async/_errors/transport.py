"""The errors of a failed gRPC call, whose outcome on the server is unknown: one class per gRPC
status code, and the error a code with its details maps to."""

from __future__ import annotations

from typing import ClassVar

import grpc

from .base import AccessDeniedError, YdbTopicError

# --- transport --------------------------------------------------------------------------


class TransportError(YdbTopicError):
    """The gRPC call failed; whether the server applied the operation is unknown."""

    grpc_code: ClassVar[grpc.StatusCode | None] = None

    def __init__(self, details: str = "", code: grpc.StatusCode | None = None) -> None:
        self.details = details
        self.code = code or self.grpc_code
        name = self.code.name if self.code is not None else "UNKNOWN"
        super().__init__(f"gRPC {name}: {details or 'no details'}")


class ConnectionLostError(TransportError):
    """UNAVAILABLE: the server could not be reached or the connection broke."""

    grpc_code = grpc.StatusCode.UNAVAILABLE
    retriable = True
    backoff = "fast"


class ConnectFailedError(ConnectionLostError):
    """UNAVAILABLE because gRPC could not connect to the endpoint: the call failed before any
    byte of it left the client, so the server never saw the request.

    gRPC fails a call at once, without transmitting it, when its channel is in
    TRANSIENT_FAILURE (every connection attempt failed; gRPC's "wait for ready" semantics); the
    status then comes from the load-balancing pick, not from a connection, and says "failed to
    connect to all addresses". Retried like any lost connection; what matters is that a commit
    that failed this way was certainly not applied.
    """


class DeadlineExceededError(TransportError):
    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED
    retriable_if_idempotent = True
    backoff = "fast"


class ResourceExhaustedError(TransportError):
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED
    retriable = True
    backoff = "slow"


class RequestTooLargeError(ResourceExhaustedError):
    """RESOURCE_EXHAUSTED from gRPC's own size check: a message larger than the sender's or the
    receiver's limit. Sending it again cannot succeed, so it is not retried."""

    retriable = False
    backoff = "none"  # type: ignore[assignment]


class UnauthenticatedError(TransportError, AccessDeniedError):
    grpc_code = grpc.StatusCode.UNAUTHENTICATED


class TransportCancelledError(TransportError):
    grpc_code = grpc.StatusCode.CANCELLED
    retriable_if_idempotent = True
    backoff = "fast"


class TransportInternalError(TransportError):
    grpc_code = grpc.StatusCode.INTERNAL
    retriable_if_idempotent = True
    backoff = "fast"


class TransportUnknownError(TransportError):
    grpc_code = grpc.StatusCode.UNKNOWN
    retriable_if_idempotent = True
    backoff = "fast"


class TransportAbortedError(TransportError):
    grpc_code = grpc.StatusCode.ABORTED
    retriable_if_idempotent = True
    backoff = "fast"


class UnimplementedError(TransportError):
    grpc_code = grpc.StatusCode.UNIMPLEMENTED


class PermissionDeniedError(TransportError, AccessDeniedError):
    grpc_code = grpc.StatusCode.PERMISSION_DENIED


class InvalidRequestError(TransportError):
    """INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE and the like from gRPC itself."""


_BY_GRPC: dict[grpc.StatusCode, type[TransportError]] = {
    cls.grpc_code: cls
    for cls in (
        ConnectionLostError, DeadlineExceededError, ResourceExhaustedError, UnauthenticatedError,
        TransportCancelledError, TransportInternalError, TransportUnknownError, TransportAbortedError,
        UnimplementedError, PermissionDeniedError,
    )
    if cls.grpc_code is not None
}


def error_from_grpc(exc: grpc.RpcError) -> TransportError:
    """Translate a ``grpc.aio.AioRpcError`` (or any ``RpcError``) into a ``TransportError``."""
    code_fn = getattr(exc, "code", None)
    details_fn = getattr(exc, "details", None)
    code = code_fn() if callable(code_fn) else None
    details = details_fn() if callable(details_fn) else str(exc)
    return error_from_code(code, details)


def error_from_code(code: grpc.StatusCode | None, details: str | None) -> TransportError:
    """The ``TransportError`` for a gRPC status code and its details."""
    cls = _BY_GRPC.get(code, InvalidRequestError) if code is not None else TransportUnknownError
    if cls is ResourceExhaustedError and details and _SIZE_LIMIT_DETAILS in details:
        cls = RequestTooLargeError
    if cls is ConnectionLostError and details and details.startswith(_PICK_FAILED_DETAILS):
        cls = ConnectFailedError
    return cls(details or "", code)


_SIZE_LIMIT_DETAILS = "larger than max"
"""What gRPC says when a message exceeds a size limit ("Received message larger than max (N vs. M)")."""
_PICK_FAILED_DETAILS = "failed to connect to all addresses"
"""How gRPC's pick_first policy fails a call on a channel in TRANSIENT_FAILURE ("failed to
connect to all addresses; last error: ..."): the call is failed by the pick, before it was given
a connection, so nothing of it was sent."""
