"""User and password: tokens from the cluster's own ``AuthService.Login``."""

from __future__ import annotations

import time

from .._errors import InvalidArgumentError
from .._validate import check_seconds
from ..observability.logging import register_secret
from .base import Login, OwnedCredentials, token_expiry
from .refresh import IssuedToken, Refreshers, TokenCache


class StaticCredentials(OwnedCredentials):
    """User and password, exchanged for a token through ``AuthService.Login``.

    The token is cached and renewed in the background before it expires: at
    ``refresh_fraction`` of its lifetime when the token carries an expiry (a JWT ``exp`` claim),
    else every ``refresh_interval`` seconds. A failed login is retried while the old token is
    valid; calls go on with it meanwhile. Each driver using these credentials logs in through
    its own connection and keeps its own token, so one object may serve several drivers (even
    of different clusters), and closing one of them leaves the others working.
    ``auth_token()`` called directly answers through the most recently opened driver still open.
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
        refresh_interval = check_seconds(refresh_interval, "refresh_interval", positive=True)
        self.user = user
        self._password = password
        register_secret(password, pinned=True)
        self._refresh_interval = float(refresh_interval)
        self._refresh_fraction = refresh_fraction
        self._sessions: dict[object, TokenCache] = {}
        self._refreshers = Refreshers("StaticCredentials")

    def _attach(self, owner: object, login: Login) -> None:
        """Let ``owner`` (a connection) get tokens through ``login``; called when it opens."""

        async def fetch() -> IssuedToken:
            asked_at = time.time()
            token = await login(self.user, self._password)
            expiry = token_expiry(token) if token else None
            # A token without an expiry is used for refresh_interval (the cache's fallback).
            return IssuedToken(token, expiry - asked_at if expiry is not None else None)

        self._sessions[owner] = TokenCache(
            fetch, self.__repr__, refresh_fraction=self._refresh_fraction, fallback_lifetime=self._refresh_interval
        )
        self._refreshers.attach(owner)

    async def _detach(self, owner: object) -> None:
        """``owner`` closed: end its refresh and forget its token."""
        self._sessions.pop(owner, None)
        await self._refreshers.detach(owner)

    async def auth_token(self) -> str | None:
        """A token from ``AuthService.Login``, logged in again before the current one expires."""
        if not self._sessions:
            raise InvalidArgumentError("StaticCredentials must be passed to an open Driver before use")
        return await self._sessions[next(reversed(self._sessions))].token()

    async def _token_for(self, owner: object) -> str | None:
        """The token for ``owner``'s connection, logging in through it when needed."""
        session = self._sessions.get(owner)
        if session is None:
            raise InvalidArgumentError("these StaticCredentials are not attached to this connection (is it closed?)")
        self._refreshers.start(owner, session)
        return await session.token()

    def __repr__(self) -> str:
        return f"StaticCredentials(user={self.user!r}, password=***)"
