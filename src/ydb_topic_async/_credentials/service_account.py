"""Service-account key credentials: a PS256-signed JWT exchanged for an IAM token at the IAM token
service (gRPC ``yandex.cloud.iam.v1.IamTokenService/Create``), as managed YDB expects."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from typing import Any

import grpc
import grpc.aio

from .._errors import InvalidArgumentError
from .._proto import iam_token_service_pb2 as iam_pb
from ..observability.logging import mask_secrets, register_secret
from ._cloud import jwt_module, load_private_key, read_file
from .refresh import FetchFailed, IssuedToken, RefreshingCredentials

DEFAULT_IAM_ENDPOINT = "iam.api.cloud.yandex.net:443"
"""Yandex Cloud's IAM token service (always TLS)."""
IAM_AUDIENCE = "https://iam.api.cloud.yandex.net/iam/v1/tokens"
"""The ``aud`` claim the IAM token service expects in a service account's JWT."""
CREATE_IAM_TOKEN = "/yandex.cloud.iam.v1.IamTokenService/Create"
JWT_LIFETIME = 3600
"""Seconds a signed JWT is valid (the IAM token service accepts at most an hour)."""
IAM_REQUEST_TIMEOUT = 10.0
"""Bounds one call to the IAM token service."""
ASSUMED_IAM_TOKEN_LIFETIME = 3600.0
"""Used when the token service's answer carries no expiry (it always does: IAM tokens live 12 hours)."""

_REJECTING_CODES = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
"""Answers that refuse the key or the request: asking again with the same key cannot help."""

_FEATURE = "ServiceAccountCredentials"


def parse_iam_endpoint(endpoint: str) -> tuple[str, bool]:
    """``(host:port, secure)`` of ``host[:port]`` (TLS, port 443), ``grpcs://host[:port]`` or
    ``grpc://host:port`` (plaintext: a local token service in tests)."""
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise InvalidArgumentError(f"iam_endpoint must be a non-empty string like {DEFAULT_IAM_ENDPOINT!r}")
    text = endpoint.strip()
    secure = True
    if "://" in text:
        scheme, _, text = text.partition("://")
        if scheme not in ("grpc", "grpcs"):
            raise InvalidArgumentError(f"iam_endpoint {endpoint!r}: use host:port, grpcs://host:port or grpc://host:port")
        secure = scheme == "grpcs"
    text = text.rstrip("/")
    if not text or "/" in text:
        raise InvalidArgumentError(f"iam_endpoint {endpoint!r} must be host:port, without a path")
    _, sep, port = text.rpartition(":")
    if not sep or "]" in port:
        return f"{text}:443", secure
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InvalidArgumentError(f"iam_endpoint {endpoint!r} has no valid port")
    return text, secure


class ServiceAccountCredentials(RefreshingCredentials):
    """A service account's authorized key, exchanged for IAM tokens (managed YDB, Yandex Cloud).

    Each exchange signs a JWT (PS256; ``kid`` the key id, ``iss`` the account, ``aud`` the IAM
    token service, an hour of validity) and sends it to the IAM token service's ``Create``
    method over gRPC. The IAM token is refreshed in the background at half its lifetime (about
    six hours), and calls go on with the current one while a refresh is retried.

    Parameters:
        service_account_id: The service account (the key file's ``service_account_id``).
        access_key_id: The key's id (the key file's ``id``).
        private_key: The key's PEM private key (RSA).
        iam_endpoint: The IAM token service: ``host:port`` or ``grpcs://host:port`` (TLS, the
            default ``iam.api.cloud.yandex.net:443``), or ``grpc://host:port`` (plaintext, for a
            local token service in tests).
        iam_root_certificates: PEM roots that replace the system trust store for the IAM
            token service's TLS.

    Needs the ``cloud`` extra (PyJWT and cryptography): ``MissingDependencyError`` otherwise.
    """

    def __init__(
        self,
        service_account_id: str,
        access_key_id: str,
        private_key: str | bytes,
        *,
        iam_endpoint: str | None = None,
        iam_root_certificates: bytes | None = None,
    ) -> None:
        for name, value in (("service_account_id", service_account_id), ("access_key_id", access_key_id)):
            if not isinstance(value, str) or not value:
                raise InvalidArgumentError(f"{name} must be a non-empty string")
        if not isinstance(private_key, (str, bytes)) or not private_key:
            raise InvalidArgumentError("private_key must be a PEM private key (str or bytes)")
        if iam_root_certificates is not None and not isinstance(iam_root_certificates, bytes):
            raise InvalidArgumentError("iam_root_certificates must be PEM bytes")
        register_secret(
            private_key if isinstance(private_key, str) else private_key.decode("ascii", "replace"), pinned=True
        )
        key = load_private_key(private_key, _FEATURE, "the service account key's private_key")
        from cryptography.hazmat.primitives.asymmetric import rsa

        if not isinstance(key, rsa.RSAPrivateKey):
            raise InvalidArgumentError("the service account key's private_key must be an RSA key")
        self.service_account_id = service_account_id
        self.access_key_id = access_key_id
        self.iam_endpoint = iam_endpoint or DEFAULT_IAM_ENDPOINT
        self._target, self._secure = parse_iam_endpoint(self.iam_endpoint)
        self._root_certificates = iam_root_certificates
        self._key = key
        super().__init__()

    @classmethod
    def from_content(
        cls,
        key: str | bytes | Mapping[str, Any],
        *,
        iam_endpoint: str | None = None,
        iam_root_certificates: bytes | None = None,
    ) -> ServiceAccountCredentials:
        """From an authorized key's JSON (text, or the parsed object), as ``yc iam key create``
        writes it: ``id``, ``service_account_id`` (or ``user_account_id``) and ``private_key``.
        The key's optional ``endpoint`` field names the IAM endpoint when ``iam_endpoint`` is
        not given."""
        if isinstance(key, (str, bytes)):
            try:
                parsed = json.loads(key)
            except ValueError as exc:
                raise InvalidArgumentError(f"the service account key is not valid JSON: {exc}") from None
        else:
            parsed = key
        if not isinstance(parsed, Mapping):
            raise InvalidArgumentError("the service account key must be a JSON object")
        account = parsed.get("service_account_id") or parsed.get("user_account_id")
        missing = [name for name, value in (("id", parsed.get("id")), ("service_account_id", account),
                                            ("private_key", parsed.get("private_key"))) if not value]
        if missing:
            raise InvalidArgumentError(f"the service account key has no {', '.join(missing)}")
        endpoint = parsed.get("endpoint")
        return cls(
            str(account),
            str(parsed["id"]),
            str(parsed["private_key"]),
            iam_endpoint=iam_endpoint or (endpoint if isinstance(endpoint, str) and endpoint else None),
            iam_root_certificates=iam_root_certificates,
        )

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        iam_endpoint: str | None = None,
        iam_root_certificates: bytes | None = None,
    ) -> ServiceAccountCredentials:
        """From an authorized key file (``~`` is expanded); see ``from_content``."""
        content = read_file(path, "the service account key file")
        return cls.from_content(content, iam_endpoint=iam_endpoint, iam_root_certificates=iam_root_certificates)

    def signed_jwt(self) -> str:
        """A fresh JWT for the IAM token service (registered as a secret for the logs)."""
        jwt = jwt_module(_FEATURE)
        now = int(time.time())
        claims = {"iss": self.service_account_id, "aud": IAM_AUDIENCE, "iat": now, "exp": now + JWT_LIFETIME}
        token: str = jwt.encode(claims, self._key, algorithm="PS256", headers={"kid": self.access_key_id})
        register_secret(token)
        return token

    async def _fetch(self) -> IssuedToken:
        request = iam_pb.CreateIamTokenRequest(jwt=self.signed_jwt())
        options = [("grpc.use_local_subchannel_pool", 1)]
        if self._secure:
            credentials = grpc.ssl_channel_credentials(root_certificates=self._root_certificates)
            channel = grpc.aio.secure_channel(self._target, credentials, options=options)
        else:
            channel = grpc.aio.insecure_channel(self._target, options=options)
        asked_at = time.time()
        try:
            create = channel.unary_unary(
                CREATE_IAM_TOKEN,
                request_serializer=iam_pb.CreateIamTokenRequest.SerializeToString,
                response_deserializer=iam_pb.CreateIamTokenResponse.FromString,
            )
            response = await create(request, timeout=IAM_REQUEST_TIMEOUT)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            raise FetchFailed(
                f"the IAM token service at {self.iam_endpoint} answered {code.name}:"
                f" {mask_secrets(exc.details() or 'no details')}",
                rejected=code in _REJECTING_CODES,
            ) from None
        finally:
            await channel.close()
        if not response.iam_token:
            raise FetchFailed(f"the IAM token service at {self.iam_endpoint} answered without a token")
        if response.HasField("expires_at"):
            expires_in = response.expires_at.seconds + response.expires_at.nanos / 1e9 - asked_at
        else:
            expires_in = ASSUMED_IAM_TOKEN_LIFETIME
        return IssuedToken(response.iam_token, expires_in)

    def __repr__(self) -> str:
        return (
            f"ServiceAccountCredentials(service_account_id={self.service_account_id!r},"
            f" access_key_id={self.access_key_id!r})"
        )
