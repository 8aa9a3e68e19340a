"""The root of the exception tree and the errors that are not a server's or gRPC's answer: the
caller's mistakes, credentials that give no token, refused credentials, client-side waits, one
message's failures and producer conflicts (the tree is in the package's docstring)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

Backoff = Literal["fast", "slow", "none"]


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
    ``ydb-topic-async`` that installs it (None when none does: FastStream's telemetry
    middlewares need extras of FastStream's own); the message says how.
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
