"""Authentication and the per-call admission check of the local server.

- ``Auth`` holds the configured users and the tokens ``AuthService.Login`` issued them; with
  ``token_ttl`` a token expires, so clients' refresh logic can be exercised.
- ``Gate.admit`` runs before every call (unary or stream, except Login): with users configured a
  valid ``x-ydb-auth-ticket`` is required, and an ``x-ydb-database`` header, when sent, must name
  the server's database.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

AUTH_HEADER = "x-ydb-auth-ticket"
DATABASE_HEADER = "x-ydb-database"


@dataclass(frozen=True, slots=True)
class Token:
    user: str
    expires_at: float | None


class Auth:
    """Users and the tokens issued to them; disabled (everything allowed) without users."""

    def __init__(
        self, users: dict[str, str] | None, token_ttl: float | None, clock: Callable[[], float] = time.time
    ) -> None:
        if token_ttl is not None and token_ttl <= 0:
            raise ValueError("token_ttl must be positive")
        self.users = dict(users or {})
        self.token_ttl = token_ttl
        self._tokens: dict[str, Token] = {}
        self._clock = clock

    @property
    def enabled(self) -> bool:
        return bool(self.users)

    def login(self, user: str, password: str) -> str | None:
        """A fresh token, or None when the user or password is wrong.

        Without users every login succeeds (the token is never checked), as a YDB without
        authentication lets any client log in.
        """
        if self.enabled and self.users.get(user) != password:
            return None
        token = f"local-{user}-{secrets.token_hex(12)}"
        expires = self._clock() + self.token_ttl if self.token_ttl else None
        self._tokens[token] = Token(user, expires)
        return token

    def revoke_all(self) -> None:
        """Invalidate every issued token (clients must log in again)."""
        self._tokens.clear()

    def user_of(self, token: str) -> str | None:
        """The user a still valid ``token`` belongs to."""
        entry = self._tokens.get(token)
        if entry is None or (entry.expires_at is not None and self._clock() >= entry.expires_at):
            return None
        return entry.user

    def check(self, headers: dict[str, str]) -> str | None:
        """None when the call may proceed, else why it is refused."""
        if not self.enabled:
            return None
        token = headers.get(AUTH_HEADER)
        if not token:
            return f"authentication required: no {AUTH_HEADER} header"
        entry = self._tokens.get(token)
        if entry is None:
            return "unknown auth ticket"
        if entry.expires_at is not None and self._clock() >= entry.expires_at:
            return "auth ticket expired"
        return None

    def check_token(self, token: str) -> str | None:
        """``check`` for a token sent in-band (UpdateTokenRequest)."""
        return self.check({AUTH_HEADER: token})


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
