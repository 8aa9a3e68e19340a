"""Authentication and the per-call admission check of the local server.

- ``Auth`` knows who may call: users with passwords (tokens from ``AuthService.Login``, which
  expire after ``token_ttl`` when given), pre-shared tokens (``tokens={token: user}``), and the
  tokens that trusted token services issued (``token_services``: the testing IAM, token
  exchange and metadata services). Authentication is off (everything allowed) when none of them
  is configured.
- A ticket (the ``x-ydb-auth-ticket`` header, or a token sent in-band) is read as YDB's ticket
  parser reads it (``ydb/core/security/ticket_parser_impl.h``): split at the first space into
  ``<type> <token>``; ``Bearer`` or ``IAM`` go to the access service (here: the pre-shared tokens
  and the token services; "Token is not supported" without them), ``Login`` to the login tokens
  ("Token is not supported" without users), any other type is an "Unknown token". A ticket
  without a type is tried as a pre-shared token, a login token, then an access-service token;
  none knowing it: "Could not find correct token validator".
- ``AuthInterceptor`` refuses a call with a missing or invalid ticket before it is served, with
  the gRPC status ``UNAUTHENTICATED`` and the details ``unauthenticated: <reason>``, as YDB's
  gRPC layer does for a ticket the parser refused ("Access denied without user token" when
  none was sent). Only ``AuthService.Login`` is let through without one.
- A token sent in-band (``UpdateTokenRequest``) that is not valid ends the stream with
  ``UNAUTHENTICATED`` as well (``refused_in_band``).
- ``Gate.admit`` runs before every call (except Login): the ticket again (for a server built
  without the interceptor: then refused with the YDB status ``UNAUTHORIZED``), and an
  ``x-ydb-database`` header, when sent, must name the server's database.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import grpc.aio

AUTH_HEADER = "x-ydb-auth-ticket"
DATABASE_HEADER = "x-ydb-database"
LOGIN_METHOD = "/Ydb.Auth.V1.AuthService/Login"

NO_TOKEN = "Access denied without user token"
UNKNOWN_TOKEN = "Could not find correct token validator"
UNKNOWN_TYPE = "Unknown token"
NOT_SUPPORTED = "Token is not supported"
EXPIRED = "Token has expired"
ACCESS_SERVICE_TYPES = ("Bearer", "IAM")
LOGIN_TYPE = "Login"

Verdict = tuple[str | None, str | None]
"""``(user, None)`` for a valid token, ``(None, reason)`` for a refused one, ``(None, None)``
when the validator does not know the token at all."""


class TokenValidator(Protocol):
    """Something that issued tokens and can tell who one belongs to (a testing token service)."""

    def validate(self, token: str) -> Verdict:
        """Whose ``token`` is: see ``Verdict``."""
        ...


@dataclass(frozen=True, slots=True)
class Token:
    user: str
    expires_at: float | None


class IssuedTokens:
    """Tokens issued to users, each valid until its expiry: what a token service remembers."""

    def __init__(self, prefix: str, clock: Callable[[], float] = time.time) -> None:
        self._prefix = prefix
        self._clock = clock
        self._tokens: dict[str, Token] = {}

    def issue(self, user: str, ttl: float | None) -> tuple[str, float | None]:
        """A new token for ``user`` and its expiry (a Unix time; None: never)."""
        token = f"{self._prefix}{secrets.token_urlsafe(24)}"
        expires = self._clock() + ttl if ttl else None
        self._tokens[token] = Token(user, expires)
        return token, expires

    def validate(self, token: str) -> Verdict:
        entry = self._tokens.get(token)
        if entry is None:
            return None, None
        if entry.expires_at is not None and self._clock() >= entry.expires_at:
            return None, EXPIRED
        return entry.user, None

    def revoke_all(self) -> None:
        self._tokens.clear()

    def __iter__(self) -> Iterator[str]:
        """The tokens issued so far (valid or not)."""
        return iter(list(self._tokens))

    def __len__(self) -> int:
        return len(self._tokens)


class Auth:
    """Users, pre-shared tokens and trusted token services; disabled (everything allowed) without any."""

    def __init__(
        self,
        users: Mapping[str, str] | None,
        token_ttl: float | None,
        clock: Callable[[], float] = time.time,
        *,
        tokens: Mapping[str, str] | None = None,
        token_services: Sequence[TokenValidator] = (),
    ) -> None:
        if token_ttl is not None and token_ttl <= 0:
            raise ValueError("token_ttl must be positive")
        for token, user in (tokens or {}).items():
            if not isinstance(token, str) or not token or not isinstance(user, str) or not user:
                raise ValueError("tokens must map non-empty token strings to user names")
        self.users = dict(users or {})
        self.token_ttl = token_ttl
        self.tokens = dict(tokens or {})
        """Pre-shared tokens and their users."""
        self.token_services = list(token_services)
        """Services whose issued tokens are accepted (as YDB's access service would)."""
        self._login_tokens = IssuedTokens("local-", clock)

    @property
    def enabled(self) -> bool:
        return bool(self.users or self.tokens or self.token_services)

    @property
    def access_service(self) -> bool:
        """Whether ``Bearer``/``IAM`` tickets can be checked at all."""
        return bool(self.tokens or self.token_services)

    def login(self, user: str, password: str) -> str | None:
        """A fresh token, or None when the user or password is wrong.

        Without users and tokens every login succeeds (the token is never checked), as a YDB
        without authentication lets any client log in.
        """
        if self.enabled and self.users.get(user) != password:
            return None
        token, _ = self._login_tokens.issue(user, self.token_ttl)
        return token

    def revoke_all(self) -> None:
        """Invalidate every login token (clients must log in again)."""
        self._login_tokens.revoke_all()

    def authenticate(self, ticket: str | None) -> Verdict:
        """The user of ``ticket`` (a header value) or why it is refused, as YDB's ticket parser
        decides (see the module's docstring)."""
        if not ticket:
            return None, NO_TOKEN
        kind, space, token = ticket.partition(" ")
        if not space:
            for validate in (self._preshared, self._login_tokens.validate, self._access):
                user, reason = validate(ticket)
                if user is not None or reason is not None:
                    return user, reason
            return None, UNKNOWN_TOKEN
        if kind in ACCESS_SERVICE_TYPES:
            if not self.access_service:
                return None, NOT_SUPPORTED
            user, reason = self._preshared(token)
            if user is None and reason is None:
                user, reason = self._access(token)
            return (user, reason) if user is not None or reason is not None else (None, UNKNOWN_TOKEN)
        if kind == LOGIN_TYPE:
            if not self.users:
                return None, NOT_SUPPORTED
            user, reason = self._login_tokens.validate(token)
            return (user, reason) if user is not None or reason is not None else (None, UNKNOWN_TOKEN)
        return None, UNKNOWN_TYPE

    def _preshared(self, token: str) -> Verdict:
        user = self.tokens.get(token)
        return (user, None) if user is not None else (None, None)

    def _access(self, token: str) -> Verdict:
        for service in self.token_services:
            user, reason = service.validate(token)
            if user is not None or reason is not None:
                return user, reason
        return None, None

    def user_of(self, token: str) -> str | None:
        """The user a still valid ``token`` (a header value) belongs to."""
        return self.authenticate(token)[0]

    def check(self, headers: Mapping[str, str]) -> str | None:
        """None when the call may proceed, else why it is refused."""
        if not self.enabled:
            return None
        return self.authenticate(headers.get(AUTH_HEADER))[1]

    def check_token(self, token: str) -> str | None:
        """``check`` for a token sent in-band (UpdateTokenRequest)."""
        return self.check({AUTH_HEADER: token})


def unauthenticated_details(reason: str) -> str:
    """The details of YDB's ``UNAUTHENTICATED`` answer for a refused ticket."""
    return f"unauthenticated: {reason}"


def refused_in_band(auth: Auth, token: str) -> str | None:
    """The ``UNAUTHENTICATED`` details that end a stream whose in-band token is not valid, or None."""
    reason = auth.check_token(token)
    return None if reason is None else f"unauthenticated, refreshed token is invalid: {reason}"


class TokenRefused(Exception):
    """A token sent in-band was refused: the stream ends with ``UNAUTHENTICATED`` and ``details``."""

    def __init__(self, details: str) -> None:
        super().__init__(details)
        self.details = details


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc has no type hints
    """Refuses calls without a valid ticket with ``UNAUTHENTICATED`` before they are served."""

    def __init__(self, auth: Auth, open_methods: frozenset[str] = frozenset({LOGIN_METHOD})) -> None:
        self.auth = auth
        self.open_methods = open_methods
        self.refused = 0
        """Calls refused so far."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or not self.auth.enabled or handler_call_details.method in self.open_methods:
            return handler
        headers = {str(k): str(v) for k, v in (handler_call_details.invocation_metadata or ())}
        _, reason = self.auth.authenticate(headers.get(AUTH_HEADER))
        if reason is None:
            return handler
        self.refused += 1
        return _refusing(handler, unauthenticated_details(reason))


def _refusing(handler: grpc.RpcMethodHandler, details: str) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind that only answers ``UNAUTHENTICATED``."""

    async def refuse(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, details)

    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(bool(handler.request_streaming), bool(handler.response_streaming))]
    refusing: grpc.RpcMethodHandler = make(
        refuse, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
    )
    return refusing


class Gate:
    """The admission check every call passes first: auth, then the database header."""

    def __init__(self, auth: Auth, database: str) -> None:
        self.auth = auth
        self.database = database

    def admit(self, headers: dict[str, str]) -> tuple[str, str] | None:
        """None when the call may proceed, else ``(status name, issue message)`` to answer with."""
        refusal = self.auth.check(headers)
        if refusal:
            return "UNAUTHORIZED", refusal
        database = headers.get(DATABASE_HEADER)
        # Clients that send no database header are let through: the server has only one.
        if database and database.rstrip("/") != self.database:
            return "BAD_REQUEST", f"database {database!r} is not served here; this server serves {self.database!r}"
        return None
