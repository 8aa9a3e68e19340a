"""The errors of a server's answer: one class per YDB status, and the error a status with its
issues maps to."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from .._proto import ydb_status_codes_pb2
from .base import AccessDeniedError, Issue, ProducerConflictError, YdbTopicError

_Status = ydb_status_codes_pb2.StatusIds


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
