"""Helpers shared by the local server's services: statuses, issues, operations, time, headers."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import any_pb2, duration_pb2, timestamp_pb2
from google.protobuf.message import Message

from .._proto import ydb_issue_message_pb2, ydb_operation_pb2, ydb_status_codes_pb2

Status = ydb_status_codes_pb2.StatusIds
SUCCESS = Status.SUCCESS

_OUR_PACKAGE = "YdbTopicAsync."
_UPSTREAM_PACKAGE = "Ydb."


def status_code(name: str) -> int:
    """The numeric YDB status for a name such as ``"SCHEME_ERROR"``."""
    return int(Status.StatusCode.Value(name))


def issues(message: str, issue_code: int = 0) -> list[ydb_issue_message_pb2.IssueMessage]:
    """One error-severity issue (severity 1 is ERROR in YDB), with ``issue_code`` when not 0."""
    if not message:
        return []
    return [ydb_issue_message_pb2.IssueMessage(message=message, severity=1, issue_code=issue_code)]


def failure(reply_cls: Any, status: str, message: str, issue_code: int = 0) -> Any:
    """A stream reply of ``reply_cls`` (a FromServer type) carrying an error status and issue."""
    return reply_cls(status=status_code(status), issues=issues(message, issue_code))


def pack(result: Message) -> any_pb2.Any:
    """``result`` in an Any whose type URL names the upstream type, as a real YDB server does."""
    name = result.DESCRIPTOR.full_name
    if name.startswith(_OUR_PACKAGE):
        name = _UPSTREAM_PACKAGE + name[len(_OUR_PACKAGE) :]
    return any_pb2.Any(type_url=f"type.googleapis.com/{name}", value=result.SerializeToString())


def operation(result: Message | None = None, status: int = SUCCESS, message: str = "") -> Any:
    op = ydb_operation_pb2.Operation(ready=True, status=status, issues=issues(message))  # type: ignore[arg-type]
    if result is not None and status == SUCCESS:
        op.result.CopyFrom(pack(result))
    return op


def timestamp(ns: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    if ns > 0:
        ts.FromNanoseconds(ns)
    return ts


def duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromTimedelta(dt.timedelta(seconds=seconds))
    return d


def metadata(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (context.invocation_metadata() or ())}


def rpc_handler(
    kind: Callable[..., grpc.RpcMethodHandler], behaviour: Any, request_cls: Any, response_cls: Any
) -> grpc.RpcMethodHandler:
    """A method handler of ``kind`` (``grpc.unary_unary_rpc_method_handler``, ...) for our message classes.

    A handler may also answer with bytes it serialized itself (a ``response_cls`` message); they go out as they are.
    """
    return kind(behaviour, request_deserializer=request_cls.FromString, response_serializer=_serialize)


def _serialize(message: Message | bytes) -> bytes:
    return message if type(message) is bytes else message.SerializeToString()  # type: ignore[union-attr]
