"""Every exception the SDK raises.

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

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import grpc

from ._proto import ydb_status_codes_pb2

Backoff = Literal["fast", "slow", "none"]

_Status = ydb_status_codes_pb2.StatusIds


@dataclass(frozen=True)
class Issue:
    """One server-side issue: a message, a numeric code, a severity and nested issues."""

    message: str
    code: int = 0
    severity: int = 0
    issues: tuple[Issue, ...] = ()

    @classmethod
    def from_proto(cls, msg: Any) -> Issue:
        return cls(
            message=msg.message,
            code=msg.issue_code,
            severity=msg.severity,
            issues=tuple(cls.from_proto(i) for i in msg.issues),
        )

    def __str__(self) -> str:
        text = f"{self.message} (code {self.code})" if self.code else self.message
        if self.issues:
            text += ": " + "; ".join(str(i) for i in self.issues)
        return text


class YdbTopicError(Exception):
    """Base class of every error raised by ``ydb_topic_async``."""

    retriable: ClassVar[bool] = False
    retriable_if_idempotent: ClassVar[bool] = False
    backoff: ClassVar[Backoff] = "none"

    def is_retriable(self, *, idempotent: bool) -> bool:
        """Whether repeating the failed operation may succeed."""
        return self.retriable or (idempotent and self.retriable_if_idempotent)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled as it is (its message and attributes), not by calling the constructor again:
        # the constructors build the message from their arguments and some take keywords only.
        builtin = {key: getattr(self, key) for key in ("name", "path") if isinstance(self, ImportError)}
        return _unpickle, (type(self), self.args, builtin), self.__dict__ or None


def _unpickle(cls: type[YdbTopicError], args: tuple[Any, ...], builtin: dict[str, Any]) -> YdbTopicError:
    """An error of ``cls`` with ``args`` as they were, and the attributes a built-in base keeps
    outside ``__dict__`` (an ImportError's ``name`` and ``path``); the others follow as its state."""
    error = cls.__new__(cls, *args)
    error.args = args
    for key, value in builtin.items():
        setattr(error, key, value)
    return error


# --- mistakes of the caller -------------------------------------------------------------


class UsageError(YdbTopicError):
    """The call itself is wrong; nothing was sent and nothing accepted."""


class InvalidArgumentError(UsageError, ValueError):
    """An argument has a wrong value or type."""


class ClosedError(UsageError):
    """The object was closed; no further calls are accepted."""


class WriterClosedError(ClosedError):
    """The writer is closed (or failed); it accepts no more messages."""


class ReaderClosedError(ClosedError):
    """The reader is closed (or failed); it delivers no more messages."""


class TransactionEndedError(ClosedError):
    """The transaction has ended (committed, rolled back or failed) or is ending: nothing more can join it."""


class UnsupportedCodecError(UsageError):
    """A codec that is not registered, or that the topic does not allow."""


class CommitNotAllowedError(UsageError):
    """Commits need a consumer; this reader reads without one."""


class MessageTooLargeError(InvalidArgumentError):
    """A single message cannot fit in any request under the configured size limit."""


class InvalidEndpointError(InvalidArgumentError):
    """An endpoint or connection string that cannot be connected to as written."""


class InvalidCodecError(UnsupportedCodecError, InvalidArgumentError):
    """A codec argument that is not a codec id (an int such as ``Codec.ZSTD``) at all."""


class CredentialsError(YdbTopicError):
    """The credentials could not give a usable token; nothing was sent. Not a ``UsageError``:
    a token service that is down or refuses a revoked key is not a wrong call."""


class InvalidTokenError(CredentialsError, UsageError):
    """A token that is not a string, or holds characters a gRPC header cannot carry (line breaks,
    non-ASCII): a programming error of the credentials, so it is not retried."""


class TokenProviderError(CredentialsError):
    """The credentials' token provider raised; its exception is the ``__cause__``.

    Retried like an overloaded server: a token service that is briefly down must not end a
    writer or reader that holds messages.
    """

    retriable = True
    backoff = "slow"


class TokenRefreshError(CredentialsError):
    """The credentials have no valid token: the token service could not be reached, or failed,
    and the last token has expired (or none was obtained yet). The last failure is the
    ``__cause__``.

    Retried like an overloaded server, for as long as the caller's retry policy allows: the
    credentials keep trying in the background and the next call picks up the new token.
    """

    retriable = True
    backoff = "slow"


class AccessDeniedError(YdbTopicError):
    """The credentials were refused, wherever that happened: catch this one class for "these
    credentials do not work here". The class raised says where:

    - ``UnauthenticatedError`` (gRPC UNAUTHENTICATED): the server refused the token of the call
      itself: unknown, expired, malformed, or none sent where one is required;
    - ``UnauthorizedError`` (YDB status UNAUTHORIZED): a login was refused (a wrong user or
      password), or the user may not access the object (YDB answers an access denied so);
    - ``PermissionDeniedError`` (gRPC PERMISSION_DENIED): the server denied the call;
    - ``CredentialsRejectedError``: the token service refused the credentials (a wrong or revoked
      key, an unknown account) before any call could be made.

    None is retried: the same credentials get the same answer. ``TokenRefreshError`` (a token
    service that cannot be reached) is not one of them: it is retried.
    """


class CredentialsRejectedError(CredentialsError, AccessDeniedError):
    """The token service refused the credentials themselves (a wrong or revoked key, an unknown
    account, a malformed request from a bad configuration) and there is no valid token left.

    Not retried: asking again with the same credentials cannot succeed. The credentials ask the
    token service again only after a growing pause, so a loop of failing calls makes no storm of
    requests.
    """


class MissingDependencyError(UsageError, ImportError):
    """An optional feature was asked for, but the package it needs is not installed.

    ``name`` is the missing module (as an ``ImportError``'s), ``extra`` the extra of
    ``ydb-topic-async`` that installs it; the message says how.
    """

    def __init__(self, message: str, *, name: str | None = None, extra: str | None = None) -> None:
        super().__init__(message, name=name)
        self.extra = extra


# --- client-side waiting ----------------------------------------------------------------


class BufferFullTimeoutError(YdbTopicError, TimeoutError):
    """The writer's buffer stayed full for longer than allowed; nothing from the call was accepted."""


class OperationTimeoutError(YdbTopicError, TimeoutError):
    """A client-side timeout passed before the operation finished."""


class PartitionSessionClosedError(YdbTopicError):
    """The partition session of a message has ended: its offsets can no longer be committed."""


class CommitOutcomeUnknownError(YdbTopicError):
    """A transaction's commit request was sent, its answer was lost (the connection broke, the
    node went away, the server said UNDETERMINED or TIMEOUT, the call's deadline passed), and
    nothing the server can be asked tells whether it was applied: the transaction read no topic
    messages (whose consumer offsets would tell), or its offsets have moved in a way no single
    commit explains. The lost error is the ``__cause__``.

    Not retried: repeating a transaction that may have committed could apply it twice.
    ``held`` says what the transaction held (its writes, its offsets), ``tx_id`` and
    ``session_id`` name it. A service that gets this error must find out from its own data
    whether the transaction's effects are there (a row it wrote, a message with a key of its
    own) before repeating it, or accept that repeating may apply it twice; a transaction whose
    every write is deduplicated by the server (writes with producer ids and seq_nos of the
    service's own numbering) can simply be repeated.
    """

    def __init__(self, text: str, *, tx_id: str | None = None, session_id: str | None = None, held: str = "") -> None:
        super().__init__(text)
        self.tx_id = tx_id
        self.session_id = session_id
        self.held = held


class MessageEncodeError(YdbTopicError):
    """The writer's encoder raised, or returned something other than bytes, for one message.

    Only that message fails (its ``write_with_ack`` future gets this error); the writer goes on.
    """


class MessageDecodeError(YdbTopicError):
    """A received message's payload could not be decoded with its codec.

    Raised by the receive call that reaches the message, once; later calls go on with the next
    messages. ``message`` is the message with its payload as received (still encoded), so it can
    be inspected, stored elsewhere, or committed to skip it.
    """

    def __init__(self, text: str, *, topic_path: str, partition_id: int, offset: int, codec: int, message: Any) -> None:
        super().__init__(text)
        self.topic_path = topic_path
        self.partition_id = partition_id
        self.offset = offset
        self.codec = codec
        self.message = message


class ProducerConflictError(YdbTopicError):
    """Another writer wrote with this writer's producer id on the same partition, so this writer
    cannot go on without losing or misnumbering messages: it fails, with every message it had
    not had acknowledged. Not retried: two writers that kept taking the producer id back from each
    other would drop each other's messages as duplicates. Give each writer instance its own
    producer id, or close one writer before the next starts with the same one.
    """


class SeqNoConflictError(ProducerConflictError):
    """The server already holds seq_nos this writer numbered itself (``auto_seqno``) and did not
    write: a message it sent for the first time came back ``Skipped``, or, after a reconnect,
    the server reported a last seq_no beyond any this writer had sent. Another writer wrote with
    the same producer id in between; the messages of this writer from that seq_no on were not
    stored.
    """


# --- server statuses --------------------------------------------------------------------


class ServerError(YdbTopicError):
    """The server answered with a non-success YDB status."""

    status_code: ClassVar[int] = 0

    def __init__(self, message: str = "", issues: Sequence[Issue] = ()) -> None:
        self.issues: tuple[Issue, ...] = tuple(issues)
        self.message = message
        parts = [p for p in (message, "; ".join(str(i) for i in self.issues)) if p]
        name = _Status.StatusCode.Name(self.status_code) if self.status_code else "UNKNOWN"
        super().__init__(f"{name}: {' - '.join(parts) or 'no details'}")

    @property
    def status_name(self) -> str:
        return str(_Status.StatusCode.Name(self.status_code))


class BadRequestError(ServerError):
    status_code = _Status.BAD_REQUEST


class ProducerTakenOverError(BadRequestError, ProducerConflictError):
    """A newer write session took over this writer's producer id on its partition, and the
    server ended this one: YDB gives a (partition, producer id) to the newest session and kills
    the older at once ("ownership session is killed by another session", BAD_REQUEST; the newest
    YDB versions answer SESSION_EXPIRED with the same reason, and it is this error too). The
    writer fails with every message it had not had acknowledged; the newer writer goes on.
    """

    def __init__(self, message: str = "", issues: Sequence[Issue] = ()) -> None:
        explained = "another writer took over this producer id on its partition (the newest write session owns it)"
        super().__init__(f"{message}: {explained}" if message else explained, issues)


class UnauthorizedError(ServerError, AccessDeniedError):
    status_code = _Status.UNAUTHORIZED


class InternalError(ServerError):
    status_code = _Status.INTERNAL_ERROR


class AbortedError(ServerError):
    status_code = _Status.ABORTED
    retriable = True
    backoff = "fast"


class UnavailableError(ServerError):
    status_code = _Status.UNAVAILABLE
    retriable = True
    backoff = "fast"


class OverloadedError(ServerError):
    status_code = _Status.OVERLOADED
    retriable = True
    backoff = "slow"


class SchemeError(ServerError):
    status_code = _Status.SCHEME_ERROR


class TopicNotFoundError(SchemeError):
    """SCHEME_ERROR saying that the topic's path does not exist. YDB answers a path these
    credentials may not see the same way, so it may also mean missing rights. A writer given
    ``wait_for_topic`` (and ``describe_topic(wait_for_topic=...)``) waits for this one to pass;
    every other SCHEME_ERROR (a path that is not a topic, a partition the topic does not have)
    fails at once."""

    @classmethod
    def after_waiting(
        cls, last: BaseException | None, path: str, waited: float, *, closed: bool = False
    ) -> TopicNotFoundError:
        """The error of a wait for the topic ``path`` that ended after ``waited`` seconds, its
        bound passed or (``closed``) its writer closed meanwhile; ``last`` is the latest answer,
        when known."""
        if closed:
            text = f"topic {path} does not exist: the writer was closed after waiting {waited:.3g}s for it"
        else:
            text = f"topic {path} does not exist: it did not appear in the {waited:.3g}s waited for it (wait_for_topic)"
        return cls(text, last.issues if isinstance(last, ServerError) else ())


class GenericError(ServerError):
    status_code = _Status.GENERIC_ERROR


class ServerTimeoutError(ServerError):
    status_code = _Status.TIMEOUT


class BadSessionError(ServerError):
    status_code = _Status.BAD_SESSION
    retriable = True
    backoff = "fast"


class PreconditionFailedError(ServerError):
    status_code = _Status.PRECONDITION_FAILED


class AlreadyExistsError(ServerError):
    status_code = _Status.ALREADY_EXISTS


class NotFoundError(ServerError):
    status_code = _Status.NOT_FOUND


class SessionExpiredError(ServerError):
    status_code = _Status.SESSION_EXPIRED
    retriable = True
    backoff = "fast"


class StaleReadSessionError(SessionExpiredError):
    """``commit_offset`` named a ``read_session_id`` that is not the read session holding the
    partition for the consumer now (it ended, or another reader took the partition): nothing was
    committed. Not retried, unlike other SESSION_EXPIRED answers: that session will not come back.
    Commit without the id (which also ends the live reader's session) or through the reader."""

    retriable = False
    backoff = "none"  # type: ignore[assignment]


class ServerCancelledError(ServerError):
    status_code = _Status.CANCELLED


class UndeterminedError(ServerError):
    status_code = _Status.UNDETERMINED
    retriable_if_idempotent = True
    backoff = "fast"


class UnsupportedError(ServerError):
    status_code = _Status.UNSUPPORTED


class SessionBusyError(ServerError):
    status_code = _Status.SESSION_BUSY
    retriable = True
    backoff = "fast"


class ExternalError(ServerError):
    status_code = _Status.EXTERNAL_ERROR


_BY_STATUS: dict[int, type[ServerError]] = {
    cls.status_code: cls
    for cls in (
        BadRequestError, UnauthorizedError, InternalError, AbortedError, UnavailableError,
        OverloadedError, SchemeError, GenericError, ServerTimeoutError, BadSessionError,
        PreconditionFailedError, AlreadyExistsError, NotFoundError, SessionExpiredError,
        ServerCancelledError, UndeterminedError, UnsupportedError, SessionBusyError, ExternalError,
    )
}


_OWNERSHIP_KILLED = "ownership session is killed by another session"
"""The reason YDB gives a write session whose producer id a newer session took over."""
_DEAD_READ_SESSION = "set offset in already dead session"
"""The reason YDB gives a CommitOffset naming a read session that does not hold the partition."""
_PATH_MISSING = re.compile(r"does not exist|Marker# PQ(?:15|193)\b")
"""How YDB says a topic's path does not exist (SCHEME_ERROR, whatever the issue code):

- the write session, before the describer actor: "no path '<path>', Marker# PQ15", and "topic
  '<name>' has no balancer, Marker# PQ193" for a topic whose creation has not finished
  (``persqueue_v1/actors/persqueue_utils.cpp``, ``ProcessMetaCacheTopicResponse``, issue code
  UNKNOWN_TOPIC);
- the write session and DescribeTopic since: "You do not have access permissions or the
  '<path>' does not exist" (``persqueue/public/describer``, ``Description``; the write session
  maps NOT_FOUND to UNKNOWN_TOPIC, DescribeTopic to ACCESS_DENIED);
- DescribeTopic before: "path '<path>' does not exist or you do not have access rights".

A path that is not a topic ("item '<path>' is not a topic, Marker# PQ13"; "The '<path>' path is
not a topic") and a partition a topic does not have ("no partition N in topic '<path>', Marker#
PQ4") say something else."""


def _mentions(issues: Iterable[Issue], text: str) -> bool:
    return any(text in issue.message or _mentions(issue.issues, text) for issue in issues)


def _say_path_missing(issues: Iterable[Issue]) -> bool:
    return any(_PATH_MISSING.search(issue.message) or _say_path_missing(issue.issues) for issue in issues)


def error_from_status(status: int, issues: Iterable[Any] = (), message: str = "") -> ServerError:
    """Build the error for a YDB status code and its protobuf ``IssueMessage`` list."""
    parsed = [i if isinstance(i, Issue) else Issue.from_proto(i) for i in issues]
    if status in (_Status.BAD_REQUEST, _Status.SESSION_EXPIRED) and _mentions(parsed, _OWNERSHIP_KILLED):
        return ProducerTakenOverError(message, parsed)
    if status == _Status.SESSION_EXPIRED and _mentions(parsed, _DEAD_READ_SESSION):
        return StaleReadSessionError(message, parsed)
    if status == _Status.SCHEME_ERROR and _say_path_missing(parsed):
        return TopicNotFoundError(message, parsed)
    cls = _BY_STATUS.get(status)
    if cls is None:
        err = ServerError(message or f"unknown status code {status}", parsed)
        return err
    return cls(message, parsed)


def raise_for_status(status: int, issues: Iterable[Any] = (), message: str = "") -> None:
    """Raise the matching ``ServerError`` unless ``status`` is SUCCESS."""
    if status != _Status.SUCCESS:
        raise error_from_status(status, issues, message)


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
