"""What every credentials object is, the simple kinds, and how a connection asks for a token.

A credentials object only has to answer ``await credentials.auth_token()`` with the current token
(or ``None`` for anonymous access). Long-lived streams ask again from time to time and send the
new token in-band when it changes. Every token is checked before it is used (``fetch_token``):
a provider that raises, or gives something that is not a header-safe string, fails with a
``CredentialsError`` naming the problem instead of an error from deep inside gRPC.

Credentials never depend on a driver. Kinds that keep a token fresh in the background
(``OwnedCredentials``) are told by each connection that uses them when it opens and closes
(``bind_credentials``, ``unbind_credentials``): the background work runs while a connection
is open and ends with the last one, so one object can serve several drivers at once.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

import anyio

from .._errors import InvalidArgumentError, InvalidTokenError, TokenProviderError, YdbTopicError
from ..observability.logging import register_secret

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
        register_secret(token, pinned=True)

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


class OwnedCredentials:
    """Credentials that keep their token fresh in the background while a connection uses them.

    Each connection (a driver's transport) attaches when it is made and detaches when it
    closes; the background work for it ends then. ``login`` is that connection's
    ``AuthService.Login``, for the kinds that log in through the cluster itself.
    """

    def _attach(self, owner: object, login: Login) -> None:
        """``owner`` (a connection) will ask for tokens; ``login`` logs in through it."""
        raise NotImplementedError

    async def _detach(self, owner: object) -> None:
        """``owner`` closed: end its background work and forget it."""
        raise NotImplementedError

    async def _token_for(self, owner: object) -> str | None:
        """The token for a call on ``owner``'s connection."""
        raise NotImplementedError


def bind_credentials(credentials: Credentials, owner: object, login: Login) -> None:
    """Tell ``credentials`` that the connection ``owner`` will use them (a no-op for kinds that
    need no background work)."""
    if isinstance(credentials, OwnedCredentials):
        credentials._attach(owner, login)


async def unbind_credentials(credentials: Credentials, owner: object) -> None:
    """``owner`` closed: its background token refresh ends."""
    if isinstance(credentials, OwnedCredentials):
        await credentials._detach(owner)


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
        if isinstance(credentials, OwnedCredentials):
            token: object = await credentials._token_for(owner)
        else:
            token = await credentials.auth_token()
    except YdbTopicError:
        raise
    except Exception as exc:
        raise TokenProviderError(f"the credentials {credentials!r} failed to give a token: {exc!r}") from exc
    return check_token(token, f"the credentials {credentials!r}")
