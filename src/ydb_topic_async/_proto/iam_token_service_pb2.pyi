import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateIamTokenRequest(_message.Message):
    __slots__ = ("yandex_passport_oauth_token", "jwt")
    YANDEX_PASSPORT_OAUTH_TOKEN_FIELD_NUMBER: _ClassVar[int]
    JWT_FIELD_NUMBER: _ClassVar[int]
    yandex_passport_oauth_token: str
    jwt: str
    def __init__(self, yandex_passport_oauth_token: _Optional[str] = ..., jwt: _Optional[str] = ...) -> None: ...

class CreateIamTokenResponse(_message.Message):
    __slots__ = ("iam_token", "expires_at")
    IAM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    iam_token: str
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, iam_token: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
