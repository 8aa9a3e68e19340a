"""Token services on loopback, for testing the cloud credentials offline.

    async with IamTokenService(token_ttl=5) as iam, LocalTopicServer(token_services=[iam]) as server:
        key = iam.create_key("sa-writer")       # an authorized key, its public key registered
        credentials = ServiceAccountCredentials.from_content(key, iam_endpoint=iam.endpoint)
        async with Driver(server.endpoint, server.database, credentials) as driver:
            ...

- ``IamTokenService``: Yandex Cloud's IAM token service over gRPC
  (``/yandex.cloud.iam.v1.IamTokenService/Create``): it checks the JWT a service account's key
  signed (PS256, the key id in ``kid``, the IAM audience, the account as issuer, not expired,
  living at most an hour) against the registered public keys, and answers an IAM token with its
  expiry; a bad JWT gets ``UNAUTHENTICATED``, a malformed request ``INVALID_ARGUMENT``.
- ``TokenExchangeService``: an OAuth 2.0 token exchange endpoint (RFC 8693) over HTTP: it
  accepts the subject tokens it was given (fixed tokens, or JWTs signed by given keys) and
  answers an access token, or an RFC 6749 error (400 ``invalid_grant`` for an unknown subject).
- ``MetadataService``: a compute instance's metadata service over HTTP: a ``GET`` of the token
  URL with ``Metadata-Flavor: Google`` answers the instance's service account token.

Each issues tokens living ``token_ttl`` seconds, counts the requests it got (``requests``), can be
stopped and started again on the same port (``stop``/``start``, or ``async with service.down():``
for an outage), and tells the local topic server whose a token is (``validate``): pass the
services as ``LocalTopicServer(token_services=[...])``.

Checking and making keys needs PyJWT and cryptography (the ``cloud`` extra).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from types import ModuleType, TracebackType
from typing import Any, Self
from urllib.parse import parse_qs

import grpc
import grpc.aio

from .._proto import iam_token_service_pb2 as iam_pb
from ..extras import missing_dependency
from ._http import HttpRequest, HttpResponse, HttpServer
from .auth import IssuedTokens, Verdict

IAM_AUDIENCE = "https://iam.api.cloud.yandex.net/iam/v1/tokens"
IAM_SERVICE = "yandex.cloud.iam.v1.IamTokenService"
MAX_JWT_LIFETIME = 3600
"""The IAM token service refuses JWTs that live longer than an hour."""
METADATA_TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
TOKEN_EXCHANGE_PATH = "/oauth/token"
TOKEN_EXCHANGE_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
DEFAULT_TOKEN_TTL = 3600.0


def _jwt() -> ModuleType:
    """PyJWT (with ``cryptography``), or ``MissingDependencyError`` naming the ``cloud`` extra."""
    try:
        import cryptography  # noqa: F401
        import jwt
    except ImportError as exc:
        raise missing_dependency(exc, "the testing token services", "PyJWT and cryptography", "cloud") from exc
    return jwt


class TokenService:
    """What the three services share: issued tokens, their lifetime, counters, stop and start."""

    def __init__(self, *, token_ttl: float, host: str, port: int, prefix: str) -> None:
        if not token_ttl > 0:
            raise ValueError("token_ttl must be positive")
        self.token_ttl = float(token_ttl)
        """Seconds each issued token lives (may be changed between requests)."""
        self.host = host
        self.port = port
        self.issued = IssuedTokens(prefix)
        self.requests = 0
        """Requests received (answered or refused)."""
        self.tokens_issued = 0

    def validate(self, token: str) -> Verdict:
        """Whose ``token`` is (for ``LocalTopicServer(token_services=...)``)."""
        return self.issued.validate(token)

    def issue(self, user: str) -> tuple[str, float]:
        """A new token for ``user`` and its expiry (a Unix time)."""
        token, expires = self.issued.issue(user, self.token_ttl)
        assert expires is not None
        self.tokens_issued += 1
        return token, expires

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def down(self) -> AsyncIterator[None]:
        """The service is unreachable (connections refused) inside the block, and back after it."""
        await self.stop()
        try:
            yield
        finally:
            await self.start()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


class IamTokenService(TokenService):
    """Yandex Cloud's IAM token service on loopback (gRPC); see the module's docstring.

    Parameters:
        token_ttl: Seconds each IAM token lives (real ones live 12 hours).
        host: The address to listen on.
        port: The port (0: a free one, kept across ``stop``/``start``).
        audience: The ``aud`` a JWT must carry.
    """

    def __init__(
        self,
        *,
        token_ttl: float = DEFAULT_TOKEN_TTL,
        host: str = "127.0.0.1",
        port: int = 0,
        audience: str = IAM_AUDIENCE,
    ) -> None:
        super().__init__(token_ttl=token_ttl, host=host, port=port, prefix="t1.")
        self.audience = audience
        self.keys: dict[str, tuple[str, Any]] = {}
        """Key id -> (service account id, public key)."""
        self.refused = 0
        """Requests refused (a bad JWT, an unknown key, a malformed request)."""
        self.last_jwt: str | None = None
        """The JWT of the last request (a secret: for tests' eyes only)."""
        self._server: grpc.aio.Server | None = None

    @property
    def endpoint(self) -> str:
        """``grpc://host:port``: what ``ServiceAccountCredentials(iam_endpoint=...)`` takes."""
        return f"grpc://{self.host}:{self.port}"

    def add_key(self, key_id: str, service_account_id: str, public_key: str | bytes) -> None:
        """Accept JWTs with ``kid`` ``key_id`` signed by the private key of ``public_key`` (PEM)
        for ``service_account_id``."""
        _jwt()
        from cryptography.hazmat.primitives import serialization

        data = public_key.encode() if isinstance(public_key, str) else public_key
        self.keys[key_id] = (service_account_id, serialization.load_pem_public_key(data))

    def create_key(self, service_account_id: str = "sa-local", key_id: str | None = None) -> dict[str, str]:
        """A new authorized key for ``service_account_id``, as ``yc iam key create`` writes it
        (``id``, ``service_account_id``, ``created_at``, ``key_algorithm``, ``public_key``,
        ``private_key``), its public key registered here."""
        _jwt()
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_id = key_id or f"aje{uuid.uuid4().hex[:17]}"
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode()
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        self.add_key(key_id, service_account_id, public)
        return {
            "id": key_id,
            "service_account_id": service_account_id,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "key_algorithm": "RSA_2048",
            "public_key": public,
            "private_key": f"PLEASE DO NOT REMOVE THIS LINE! Yandex.Cloud SA Key ID <{key_id}>\n{private}",
        }

    async def start(self) -> None:
        """Start listening (again on the same port after a ``stop``)."""
        if self._server is not None:
            return
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        handler = grpc.unary_unary_rpc_method_handler(
            self._create,
            request_deserializer=iam_pb.CreateIamTokenRequest.FromString,
            response_serializer=iam_pb.CreateIamTokenResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(IAM_SERVICE, {"Create": handler})])
        self.port = server.add_insecure_port(f"{self.host}:{self.port}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(None)

    async def _create(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        self.requests += 1
        self.last_jwt = request.jwt or None
        if request.WhichOneof("identity") != "jwt" or not request.jwt:
            self.refused += 1
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "only a service account's jwt is supported here")
        account, reason = self._check(request.jwt)
        if account is None:
            self.refused += 1
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason or "invalid JWT")
        token, expires = self.issue(f"{account}@as")
        response = iam_pb.CreateIamTokenResponse(iam_token=token)
        response.expires_at.FromNanoseconds(int(expires * 1e9))
        return response

    def _check(self, assertion: str) -> tuple[str | None, str | None]:
        """The service account a JWT authenticates, or why it does not."""
        jwt = _jwt()
        try:
            header = jwt.get_unverified_header(assertion)
        except jwt.PyJWTError:
            return None, "the JWT is malformed"
        entry = self.keys.get(str(header.get("kid")))
        if entry is None:
            return None, f"unknown key id {header.get('kid')!r}"
        if header.get("alg") != "PS256":
            return None, f"the JWT must be signed with PS256, not {header.get('alg')!r}"
        account, public_key = entry
        try:
            claims = jwt.decode(
                assertion, public_key, algorithms=["PS256"], audience=self.audience,
                options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            return None, "the JWT has expired"
        except jwt.InvalidAudienceError:
            return None, f"the JWT's audience is not {self.audience!r}"
        except jwt.InvalidSignatureError:
            return None, "the JWT's signature does not match the key"
        except jwt.PyJWTError as exc:
            return None, f"invalid JWT: {exc}"
        if claims["iss"] != account:
            return None, "the JWT's issuer is not the key's service account"
        if claims["exp"] - claims["iat"] > MAX_JWT_LIFETIME:
            return None, "the JWT lives longer than an hour"
        return account, None


class _HttpTokenService(TokenService):
    def __init__(self, *, token_ttl: float, host: str, port: int, prefix: str) -> None:
        super().__init__(token_ttl=token_ttl, host=host, port=port, prefix=prefix)
        self._http = HttpServer(host, port, self._answer)

    async def start(self) -> None:
        """Start listening (again on the same port after a ``stop``)."""
        await self._http.start()
        self.port = self._http.port

    async def stop(self) -> None:
        await self._http.stop()

    async def _answer(self, request: HttpRequest) -> HttpResponse:
        self.requests += 1
        return await self.handle(request)

    async def handle(self, request: HttpRequest) -> HttpResponse:
        raise NotImplementedError

    def _expires_in(self) -> float | int:
        ttl = self.token_ttl
        return int(ttl) if ttl.is_integer() else ttl


class MetadataService(_HttpTokenService):
    """A compute instance's metadata service on loopback (HTTP); see the module's docstring.

    Parameters:
        service_account_id: The instance's service account (tokens belong to
            ``<service_account_id>@as``).
        token_ttl: Seconds each token lives.
        host: The address to listen on.
        port: The port (0: a free one, kept across ``stop``/``start``).
    """

    def __init__(
        self,
        service_account_id: str = "sa-instance",
        *,
        token_ttl: float = DEFAULT_TOKEN_TTL,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(token_ttl=token_ttl, host=host, port=port, prefix="t1.")
        self.service_account_id = service_account_id

    @property
    def url(self) -> str:
        """The token URL: what ``MetadataUrlCredentials(metadata_url=...)`` takes."""
        return f"http://{self.host}:{self.port}{METADATA_TOKEN_PATH}"

    async def handle(self, request: HttpRequest) -> HttpResponse:
        if request.path.split("?")[0] != METADATA_TOKEN_PATH:
            return HttpResponse(404, b"not found", "text/plain")
        if request.method != "GET":
            return HttpResponse(405, b"method not allowed", "text/plain")
        if request.headers.get("metadata-flavor") != "Google":
            return HttpResponse(403, b"Missing required header: Metadata-Flavor: Google", "text/plain")
        token, _ = self.issue(f"{self.service_account_id}@as")
        return HttpResponse.json(200, {"access_token": token, "expires_in": self._expires_in(), "token_type": "Bearer"})


class TokenExchangeService(_HttpTokenService):
    """An OAuth 2.0 token exchange endpoint (RFC 8693) on loopback (HTTP); see the module's docstring.

    Parameters:
        subject_tokens: Fixed subject tokens it accepts, and the user each one stands for.
        jwt_keys: Keys of the JWT subject tokens it accepts, by ``kid`` (``""`` for JWTs
            without one): a PEM public key (RS*, PS*, ES*) or the shared secret (HS*). The user
            is the JWT's ``sub`` (else its ``iss``).
        audience: When given, the ``audience`` the request must name.
        token_ttl: Seconds each access token lives.
        host: The address to listen on.
        port: The port (0: a free one, kept across ``stop``/``start``).
    """

    def __init__(
        self,
        *,
        subject_tokens: Mapping[str, str] | None = None,
        jwt_keys: Mapping[str, str | bytes] | None = None,
        audience: str | None = None,
        token_ttl: float = DEFAULT_TOKEN_TTL,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(token_ttl=token_ttl, host=host, port=port, prefix="")
        self.subject_tokens = dict(subject_tokens or {})
        self.jwt_keys = dict(jwt_keys or {})
        self.audience = audience
        self.last_form: dict[str, list[str]] = {}
        """The form fields of the last request (tokens included: for tests' eyes only)."""

    @property
    def url(self) -> str:
        """The token endpoint: what ``Oauth2TokenExchangeCredentials(token_endpoint=...)`` takes."""
        return f"http://{self.host}:{self.port}{TOKEN_EXCHANGE_PATH}"

    async def handle(self, request: HttpRequest) -> HttpResponse:
        if request.path.split("?")[0] != TOKEN_EXCHANGE_PATH:
            return HttpResponse(404, b"not found", "text/plain")
        if request.method != "POST":
            return HttpResponse(405, b"method not allowed", "text/plain")
        if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return _oauth_error(400, "invalid_request", "the request must be application/x-www-form-urlencoded")
        form = parse_qs(request.body.decode("utf-8", "replace"), keep_blank_values=True)
        self.last_form = form

        def one(name: str) -> str:
            return form.get(name, [""])[0]

        if one("grant_type") != TOKEN_EXCHANGE_GRANT_TYPE:
            return _oauth_error(400, "unsupported_grant_type", f"grant_type {one('grant_type')!r} is not supported")
        if one("requested_token_type") not in ("", ACCESS_TOKEN_TYPE):
            return _oauth_error(400, "invalid_request", "only access tokens can be requested")
        if not one("subject_token") or not one("subject_token_type"):
            return _oauth_error(400, "invalid_request", "subject_token and subject_token_type are required")
        if self.audience is not None and self.audience not in form.get("audience", []):
            return _oauth_error(400, "invalid_target", f"the audience must be {self.audience!r}")
        user = self._subject(one("subject_token"), one("subject_token_type"))
        if user is None:
            # Echoing the token, as careless token services do: a client must not pass it on.
            return _oauth_error(400, "invalid_grant", f"the subject token {one('subject_token')} is not valid")
        token, _ = self.issue(user)
        answer: dict[str, Any] = {
            "access_token": token,
            "issued_token_type": ACCESS_TOKEN_TYPE,
            "token_type": "Bearer",
            "expires_in": self._expires_in(),
        }
        if "scope" in form:
            answer["scope"] = one("scope")
        return HttpResponse.json(200, answer)

    def _subject(self, token: str, token_type: str) -> str | None:
        if token_type != JWT_TOKEN_TYPE:
            return self.subject_tokens.get(token)
        jwt = _jwt()
        try:
            header = jwt.get_unverified_header(token)
            given = self.jwt_keys.get(str(header.get("kid") or ""))
            algorithm = str(header.get("alg", ""))
            if given is None:
                return None
            key: Any = given.encode() if isinstance(given, str) else given
            if not algorithm.startswith("HS"):
                from cryptography.hazmat.primitives import serialization

                key = serialization.load_pem_public_key(key)
            claims = jwt.decode(
                token, key, algorithms=[algorithm], options={"verify_aud": False, "require": ["exp", "iat"]}
            )
        except (jwt.PyJWTError, ValueError):
            return None
        user = claims.get("sub") or claims.get("iss")
        return str(user) if user else None


def _oauth_error(status: int, error: str, description: str) -> HttpResponse:
    return HttpResponse.json(status, {"error": error, "error_description": description})


__all__ = [
    "IAM_AUDIENCE",
    "IamTokenService",
    "MetadataService",
    "TokenExchangeService",
    "TokenService",
]

