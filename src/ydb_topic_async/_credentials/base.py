"""Credentials: where the ``x-ydb-auth-ticket`` header comes from.

A credentials object only has to answer ``await credentials.auth_token()`` with the current token
(or ``None`` for anonymous access). Long-lived streams ask again from time to time and send the
new token in-band when it changes. Every token is checked before it is used (``fetch_token``):
a provider that raises, or gives something that is not a header-safe string, fails with a
``CredentialsError`` naming the problem instead of an error from deep inside gRPC.

Credentials never depend on a driver: ``StaticCredentials`` logs in through whichever
connection asks it for a token, so one object can serve several drivers at once.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

import anyio

from ._errors import InvalidArgumentError, InvalidTokenError, TokenProviderError, YdbTopicError
from .observability.logging import register_secret

Login = Callable[[str, str], Awaitable[str]]
"""``await login(user, password)``: a token from ``AuthService.Login`` on one connection."""


@runtime_checkable
class Credentials(Protocol):
    """Anything that can produce the current auth token."""

    async def auth_token(self) -> str | None:
        """The token to send, or ``None`` to send none."""
        ...


class AnonymousCredentials:
    """No token at all (a local server, or a cluster without authentication)."""

    async def auth_token(self) -> str | None:
        """Always ``None``: no token is sent."""
        return None

    def __repr__(self) -> str:
        return "AnonymousCredentials()"


class AccessTokenCredentials:
    """A fixed token, e.g. an IAM token obtained elsewhere."""

    def __init__(self, token: str) -> None:
        if not isinstance(token, str) or not token:
            raise InvalidArgumentError("token must be a non-empty string")
        check_token(token, "AccessTokenCredentials")
        self._token = token
        register_secret(token)

    async def auth_token(self) -> str | None:
        """The token given at construction."""
        return self._token

    def __repr__(self) -> str:  # never print the secret
        return "AccessTokenCredentials(token=***)"


class TokenProviderCredentials:
    """Tokens from an async callable, cached for ``cache_seconds`` (0 disables caching)."""

    def __init__(self, provider: Callable[[], Awaitable[str]], *, cache_seconds: float = 0.0) -> None:
        if not callable(provider):
            raise InvalidArgumentError("provider must be an async callable returning a token")
        if isinstance(cache_seconds, bool) or not isinstance(cache_seconds, (int, float)) or not cache_seconds >= 0:
            raise InvalidArgumentError(f"cache_seconds must be a number >= 0, got {cache_seconds!r}")
        self._provider = provider
        self._cache_seconds = cache_seconds
        self._token: str | None = None
        self._fetched_at = 0.0
        self._lock = anyio.Lock()

    async def auth_token(self) -> str | None:
        """The provider's token, fetched again once the cached one is older than the cache time.

        A driver turns a provider that raises into ``TokenProviderError`` (its exception
        chained), and a token that is not a header-safe string into ``InvalidTokenError``.
        """
        async with self._lock:
            if self._token is None or time.monotonic() - self._fetched_at >= self._cache_seconds:
                self._token = await self._provider()
                self._fetched_at = time.monotonic()
            return self._token

    def __repr__(self) -> str:
        return f"TokenProviderCredentials(provider={self._provider!r})"


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT, as a Unix time, or None when the token is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        exp = payload.get("exp")
    except (ValueError, TypeError, AttributeError):
        return None
    return float(exp) if isinstance(exp, (int, float)) else None


class StaticCredentials:
    """User and password, exchanged for a token through ``AuthService.Login``.

    The token is cached and renewed before it expires: at ``refresh_fraction`` of its lifetime
    when the token carries an expiry (a JWT ``exp`` claim), else every ``refresh_interval`` seconds.
    Each driver using these credentials logs in through its own connection and keeps its own
    token, so one object may serve several drivers (even of different clusters), and closing one
    of them leaves the others working. ``auth_token()`` called directly answers through the
    most recently opened driver still open.
    """

    def __init__(
        self,
        user: str,
        password: str,
        *,
        refresh_interval: float = 3600.0,
        refresh_fraction: float = 0.9,
    ) -> None:
        if not isinstance(user, str) or not user:
            raise InvalidArgumentError("user must be a non-empty string")
        if not isinstance(password, str):
            raise InvalidArgumentError("password must be a string")
        if not 0 < refresh_fraction <= 1:
            raise InvalidArgumentError("refresh_fraction must be in (0, 1]")
        self.user = user
        self._password = password
        register_secret(password)
        self._refresh_interval = refresh_interval
        self._refresh_fraction = refresh_fraction
        self._sessions: dict[object, _LoginSession] = {}

    def _attach(self, owner: object, login: Login) -> None:
        """Let ``owner`` (a connection) get tokens through ``login``; called when it opens."""
        self._sessions[owner] = _LoginSession(login)

    def _detach(self, owner: object) -> None:
        """``owner`` closed: forget its login and token."""
        self._sessions.pop(owner, None)

    async def auth_token(self) -> str | None:
        """A token from ``AuthService.Login``, logged in again before the current one expires."""
        if not self._sessions:
            raise InvalidArgumentError("StaticCredentials must be passed to an open Driver before use")
        return await self._token_for(next(reversed(self._sessions)))

    async def _token_for(self, owner: object) -> str | None:
        """The token for ``owner``'s connection, logging in through it when needed."""
        session = self._sessions.get(owner)
        if session is None:
            raise InvalidArgumentError("these StaticCredentials are not attached to this connection (is it closed?)")
        async with session.lock:
            if session.token is None or time.time() >= session.refresh_at:
                now = time.time()
                token = check_token(await session.login(self.user, self._password), "AuthService.Login")
                expiry = token_expiry(token) if token is not None else None
                if expiry is not None and expiry > now:
                    session.refresh_at = now + (expiry - now) * self._refresh_fraction
                else:
                    session.refresh_at = now + self._refresh_interval
                session.token = token
            return session.token

    def __repr__(self) -> str:
        return f"StaticCredentials(user={self.user!r}, password=***)"


class _LoginSession:
    """One connection's way to log in, and the token it got."""

    __slots__ = ("lock", "login", "refresh_at", "token")

    def __init__(self, login: Login) -> None:
        self.login = login
        self.token: str | None = None
        self.refresh_at = 0.0
        self.lock = anyio.Lock()


def check_token(token: object, source: str) -> str | None:
    """``token`` if it can go in the ``x-ydb-auth-ticket`` header (``None`` and ``""``: no header).

    gRPC header values are printable ASCII: a line break or any other character would make every
    call fail inside gRPC with an error that does not name the credentials.
    """
    if token is None or token == "":
        return None
    if not isinstance(token, str):
        raise InvalidTokenError(f"{source} gave a {type(token).__name__} where a token (str) was expected")
    if not token.isascii() or not token.isprintable():
        bad = next(c for c in token if not (c.isascii() and c.isprintable()))
        raise InvalidTokenError(
            f"{source} gave a token with the character {bad!r}, which a gRPC header cannot carry"
            " (tokens are printable ASCII: strip line breaks and whitespace around them)"
        )
    return token


async def fetch_token(credentials: Credentials, owner: object) -> str | None:
    """The token ``credentials`` give for a call on ``owner``'s connection, checked.

    Errors are ``CredentialsError``s (or the SDK errors of a login), never what a user's
    provider happened to raise.
    """
    try:
        if isinstance(credentials, StaticCredentials):
            token: object = await credentials._token_for(owner)
        else:
            token = await credentials.auth_token()
    except YdbTopicError:
        raise
    except Exception as exc:
        raise TokenProviderError(f"the credentials {credentials!r} failed to give a token: {exc!r}") from exc
    return check_token(token, f"the credentials {credentials!r}")
