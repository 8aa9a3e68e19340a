"""Credentials: where the ``x-ydb-auth-ticket`` header comes from.

A credentials object only has to answer ``await credentials.auth_token()`` with the current token
(or ``None`` for anonymous access). Long-lived streams ask again from time to time and send the
new token in-band when it changes.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import anyio

from ._errors import InvalidArgumentError
from .observability.logging import register_secret

if TYPE_CHECKING:
    from ._driver import Driver


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
        self._provider = provider
        self._cache_seconds = cache_seconds
        self._token: str | None = None
        self._fetched_at = 0.0
        self._lock = anyio.Lock()

    async def auth_token(self) -> str | None:
        """The provider's token, fetched again once the cached one is older than the cache time."""
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
    The driver binds these credentials to itself when it opens.
    """

    def __init__(
        self,
        user: str,
        password: str,
        *,
        refresh_interval: float = 3600.0,
        refresh_fraction: float = 0.9,
    ) -> None:
        if not user:
            raise InvalidArgumentError("user must be a non-empty string")
        if not 0 < refresh_fraction <= 1:
            raise InvalidArgumentError("refresh_fraction must be in (0, 1]")
        self.user = user
        self._password = password
        register_secret(password)
        self._refresh_interval = refresh_interval
        self._refresh_fraction = refresh_fraction
        self._driver: Driver | None = None
        self._token: str | None = None
        self._refresh_at = 0.0
        self._lock = anyio.Lock()

    def _bind(self, driver: Driver) -> None:
        self._driver = driver

    async def auth_token(self) -> str | None:
        """A token from ``AuthService.Login``, logged in again before the current one expires."""
        async with self._lock:
            if self._token is None or time.time() >= self._refresh_at:
                await self._login()
            return self._token

    async def _login(self) -> None:
        if self._driver is None:
            raise InvalidArgumentError("StaticCredentials must be passed to a Driver before use")
        now = time.time()
        token = await self._driver._login(self.user, self._password)
        expiry = token_expiry(token)
        if expiry is not None and expiry > now:
            self._refresh_at = now + (expiry - now) * self._refresh_fraction
        else:
            self._refresh_at = now + self._refresh_interval
        self._token = token

    def __repr__(self) -> str:
        return f"StaticCredentials(user={self.user!r}, password=***)"
