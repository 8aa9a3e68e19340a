"""Every exception the SDK raises, by where it comes from: ``base`` (the root, the caller's
mistakes, credentials, client-side waits), ``server`` (YDB statuses), ``transport`` (gRPC codes).

The tree::

    YdbTopicError
    ├── UsageError                    the caller did something wrong; raised at the call
    │   ├── InvalidArgumentError      (also a ValueError)
    │   │   ├── InvalidEndpointError  a malformed endpoint or connection string
    │   │   ├── InvalidCodecError     a codec that is not a codec id at all (also UnsupportedCodecError)
    │   │   └── MessageTooLargeError  one message exceeds the request size limit
    │   ├── ClosedError               the writer/reader/driver is closed
    │   │   ├── WriterClosedError
    │   │   ├── ReaderClosedError
    │   │   └── TransactionEndedError the transaction was committed, rolled back or failed
    │   ├── UnsupportedCodecError     codec not registered or not allowed by the topic
    │   ├── CommitNotAllowedError     commit on a reader without a consumer
    │   ├── InvalidTokenError         a token not valid in a gRPC header (also a CredentialsError)
    │   └── MissingDependencyError    an optional feature's package is not installed (also an ImportError)
    ├── CredentialsError              the credentials gave no usable token; nothing was sent
    │   ├── InvalidTokenError         (also a UsageError)
    │   ├── TokenProviderError        the token provider raised (retriable; the cause is chained)
    │   ├── TokenRefreshError         no valid token: refreshing it keeps failing (retriable)
    │   └── CredentialsRejectedError  the token service refused the credentials (also an AccessDeniedError)
    ├── AccessDeniedError             the credentials were refused, wherever: catch this one for
    │   │                             "these credentials do not work here" (none is retried)
    │   ├── UnauthenticatedError      the server refused the token: gRPC UNAUTHENTICATED (a TransportError)
    │   ├── UnauthorizedError         a login refused, or no access: YDB UNAUTHORIZED (a ServerError)
    │   ├── PermissionDeniedError     the server denied the call: gRPC PERMISSION_DENIED (a TransportError)
    │   └── CredentialsRejectedError  the token service refused the credentials (a CredentialsError)
    ├── BufferFullTimeoutError        write() waited for buffer space longer than allowed (also TimeoutError)
    ├── OperationTimeoutError         a client-side deadline passed (also TimeoutError)
    ├── PartitionSessionClosedError   a commit for a partition session that has ended
    ├── CommitOutcomeUnknownError     a commit's answer was lost and nothing can tell whether it applied (not retried)
    ├── MessageEncodeError            the writer's encoder failed for one message (that message only)
    ├── MessageDecodeError            a received payload could not be decoded (that message only)
    ├── ProducerConflictError         another writer wrote with this writer's producer id (not retried)
    │   ├── ProducerTakenOverError    a newer write session took the producer id over (also BadRequestError)
    │   └── SeqNoConflictError        the server holds seq_nos this writer numbered itself and did not write
    ├── TransportError                gRPC failure: the server's status is unknown
    │   ├── ConnectionLostError       UNAVAILABLE, connection reset, stream broken
    │   │   └── ConnectFailedError    UNAVAILABLE before the request left: no connection could be made
    │   ├── DeadlineExceededError
    │   ├── ResourceExhaustedError
    │   │   └── RequestTooLargeError  a request over a gRPC message size limit (not retriable)
    │   ├── UnauthenticatedError      (also an AccessDeniedError)
    │   ├── PermissionDeniedError     (also an AccessDeniedError)
    │   └── ...                       one class per other gRPC code
    └── ServerError                   the server answered with a YDB status
        ├── BadRequestError           BAD_REQUEST
        │   └── ProducerTakenOverError  "ownership session is killed by another session"
        ├── UnauthorizedError         UNAUTHORIZED (also an AccessDeniedError)
        ├── InternalError             INTERNAL_ERROR
        ├── AbortedError              ABORTED
        ├── UnavailableError          UNAVAILABLE
        ├── OverloadedError           OVERLOADED
        ├── SchemeError               SCHEME_ERROR (e.g. the path is not a topic)
        │   └── TopicNotFoundError    the topic's path does not exist (or these credentials may not see it)
        ├── GenericError              GENERIC_ERROR
        ├── ServerTimeoutError        TIMEOUT
        ├── BadSessionError           BAD_SESSION
        ├── PreconditionFailedError   PRECONDITION_FAILED
        ├── AlreadyExistsError        ALREADY_EXISTS
        ├── NotFoundError             NOT_FOUND
        ├── SessionExpiredError       SESSION_EXPIRED
        │   └── StaleReadSessionError  commit_offset named a read session that does not hold the partition
        ├── ServerCancelledError      CANCELLED
        ├── UndeterminedError         UNDETERMINED
        ├── UnsupportedError          UNSUPPORTED
        ├── SessionBusyError          SESSION_BUSY
        └── ExternalError             EXTERNAL_ERROR

Each error knows whether a retry may help: ``retriable`` (safe for any operation) and
``retriable_if_idempotent`` (safe only when repeating the operation cannot apply it twice),
and which backoff schedule applies (``backoff``: ``"fast"`` or ``"slow"``).
"""

from .base import (
    AccessDeniedError,
    BufferFullTimeoutError,
    ClosedError,
    CommitNotAllowedError,
    CommitOutcomeUnknownError,
    CredentialsError,
    CredentialsRejectedError,
    InvalidArgumentError,
    InvalidCodecError,
    InvalidEndpointError,
    InvalidTokenError,
    Issue,
    MessageDecodeError,
    MessageEncodeError,
    MessageTooLargeError,
    MissingDependencyError,
    OperationTimeoutError,
    PartitionSessionClosedError,
    ProducerConflictError,
    ReaderClosedError,
    SeqNoConflictError,
    TokenProviderError,
    TokenRefreshError,
    TransactionEndedError,
    UnsupportedCodecError,
    UsageError,
    WriterClosedError,
    YdbTopicError,
)
from .base import Backoff as Backoff
from .server import (
    AbortedError,
    AlreadyExistsError,
    BadRequestError,
    BadSessionError,
    ExternalError,
    GenericError,
    InternalError,
    NotFoundError,
    OverloadedError,
    PreconditionFailedError,
    ProducerTakenOverError,
    SchemeError,
    ServerCancelledError,
    ServerError,
    ServerTimeoutError,
    SessionBusyError,
    SessionExpiredError,
    StaleReadSessionError,
    TopicNotFoundError,
    UnauthorizedError,
    UnavailableError,
    UndeterminedError,
    UnsupportedError,
    error_from_status,
    raise_for_status,
)
from .transport import (
    ConnectFailedError,
    ConnectionLostError,
    DeadlineExceededError,
    InvalidRequestError,
    PermissionDeniedError,
    RequestTooLargeError,
    ResourceExhaustedError,
    TransportAbortedError,
    TransportCancelledError,
    TransportError,
    TransportInternalError,
    TransportUnknownError,
    UnauthenticatedError,
    UnimplementedError,
    error_from_grpc,
)
from .transport import error_from_code as error_from_code

__all__ = [
    "AbortedError",
    "AccessDeniedError",
    "AlreadyExistsError",
    "BadRequestError",
    "BadSessionError",
    "BufferFullTimeoutError",
    "ClosedError",
    "CommitNotAllowedError",
    "CommitOutcomeUnknownError",
    "ConnectFailedError",
    "ConnectionLostError",
    "CredentialsError",
    "CredentialsRejectedError",
    "DeadlineExceededError",
    "ExternalError",
    "GenericError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidCodecError",
    "InvalidEndpointError",
    "InvalidRequestError",
    "InvalidTokenError",
    "Issue",
    "MessageDecodeError",
    "MessageEncodeError",
    "MessageTooLargeError",
    "MissingDependencyError",
    "NotFoundError",
    "OperationTimeoutError",
    "OverloadedError",
    "PartitionSessionClosedError",
    "PermissionDeniedError",
    "PreconditionFailedError",
    "ProducerConflictError",
    "ProducerTakenOverError",
    "ReaderClosedError",
    "RequestTooLargeError",
    "ResourceExhaustedError",
    "SchemeError",
    "SeqNoConflictError",
    "ServerCancelledError",
    "ServerError",
    "ServerTimeoutError",
    "SessionBusyError",
    "SessionExpiredError",
    "StaleReadSessionError",
    "TokenProviderError",
    "TokenRefreshError",
    "TopicNotFoundError",
    "TransactionEndedError",
    "TransportAbortedError",
    "TransportCancelledError",
    "TransportError",
    "TransportInternalError",
    "TransportUnknownError",
    "UnauthenticatedError",
    "UnauthorizedError",
    "UnavailableError",
    "UndeterminedError",
    "UnimplementedError",
    "UnsupportedCodecError",
    "UnsupportedError",
    "UsageError",
    "WriterClosedError",
    "YdbTopicError",
    "error_from_grpc",
    "error_from_status",
    "raise_for_status",
]
