"""Tokens that expire, kept fresh: one ``TokenCache`` per token, refreshed in the background.

The rules every credentials kind with expiring tokens follows (service-account keys, the
metadata service, OAuth 2.0 token exchange, user and password):

- A call gets the cached token at once while it is valid; it waits only when there is no valid
  token (the first call, or after the token expired while refreshing kept failing).
- A token is refreshed at a fraction of the time it is used (its lifetime less the margin
  below; half, by default, as the Go and Java SDKs do for exchanged tokens), in the background,
  by a task of each connection that uses the credentials (``Refreshers``): calls never wait
  for a refresh while the old token is valid.
- A failed refresh is retried with a growing pause (``TRANSIENT_BACKOFF``), always several
  times before the old token expires. A token counts as valid until a small margin before its
  expiry (``expiry_margin``), so that it does not expire on its way to the server.
- With no valid token left, a call raises ``TokenRefreshError`` (or ``CredentialsRejectedError``
  when the token service refused the credentials themselves), the last failure chained. It asks
  the token service again only once the pause after the last failure has passed
  (``REJECTED_BACKOFF`` after a refusal), so failing calls in a loop make no storm of requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .._errors import CredentialsRejectedError, TokenRefreshError, YdbTopicError
from .._retry import BackoffSchedule
from ..observability.logging import register_secret, sdk_logger
from .base import Login, OwnedCredentials, check_token

logger = sdk_logger("credentials")

TRANSIENT_BACKOFF = BackoffSchedule(base=0.2, cap=5.0, floor=0.5)
"""Pause before asking the token service again after it could not be reached or failed."""
REJECTED_BACKOFF = BackoffSchedule(base=1.0, cap=300.0, floor=0.5)
"""Pause before asking again after the token service refused the credentials."""
MIN_RETRY_DELAY = 0.05
"""The shortest pause between two attempts, however close the expiry."""
RETRIES_BEFORE_EXPIRY = 3
"""While the old token is valid, a retry comes after at most 1/3 of the time it has left."""
MAX_SLEEP = 3600.0
"""The background refresher wakes up at least this often (a token without expiry never refreshes)."""
MAX_EXPIRY_MARGIN = 30.0
"""A token counts as expired this long before it is (at most; a tenth of its lifetime when shorter)."""


def expiry_margin(lifetime: float) -> float:
    """How long before its expiry a token of ``lifetime`` seconds is no longer used."""
    return min(MAX_EXPIRY_MARGIN, lifetime / 10)


@dataclass(frozen=True)
class IssuedToken:
    """A token and how long it lives from when it was asked for (None: unknown)."""

    token: str
    expires_in: float | None


class FetchFailed(Exception):
    """Why a token could not be had, in one line without secrets. ``rejected``: the token
    service refused the credentials themselves, so asking again unchanged cannot help."""

    def __init__(self, message: str, *, rejected: bool = False) -> None:
        super().__init__(message)
        self.rejected = rejected


Fetch = Callable[[], Awaitable[IssuedToken]]


class TokenCache:
    """One token, fetched by ``fetch``, refreshed at ``refresh_fraction`` of its lifetime.

    ``describe()`` names the credentials in errors and log lines. A token whose lifetime is
    unknown (``expires_in=None``) is used for ``fallback_lifetime`` seconds (forever when None).
    """

    def __init__(
        self,
        fetch: Fetch,
        describe: Callable[[], str],
        *,
        refresh_fraction: float = 0.5,
        fallback_lifetime: float | None = None,
    ) -> None:
        self._fetch = fetch
        self._describe = describe
        self._refresh_fraction = refresh_fraction
        self._fallback_lifetime = fallback_lifetime
        self._token: str | None = None
        self._valid_until = 0.0
        """``time.monotonic()`` after which the token is no longer used."""
        self._refresh_at = 0.0
        """When the background refresh asks for the next token."""
        self._failure: BaseException | None = None
        """The last attempt's failure (None after a success)."""
        self._failures = 0
        """Failed attempts since the last success."""
        self._next_attempt_at = 0.0
        """No new attempt before this, after a failure."""
        self._warned = False
        """A background failure of this streak was logged as a warning (the rest go to DEBUG)."""
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()

    # --- what callers use ---------------------------------------------------------------

    def valid_token(self) -> str | None:
        """The cached token while it is valid, else None."""
        if self._token is not None and time.monotonic() < self._valid_until:
            return self._token
        return None

    async def token(self) -> str:
        """The valid token, fetched first when there is none (see the module's rules)."""
        token = self.valid_token()
        if token is not None:
            return token
        async with self._lock():
            token = self.valid_token()
            if token is not None:
                return token
            if self._failure is not None and time.monotonic() < self._next_attempt_at:
                raise self._error()
            return await self._attempt(background=False)

    def next_refresh_in(self) -> float:
        """Seconds until the background refresh should ask for a token (0: now)."""
        now = time.monotonic()
        if self._failure is not None:
            return max(0.0, self._next_attempt_at - now)
        if self._token is None:
            return 0.0
        return max(0.0, self._refresh_at - now)

    async def refresh(self) -> None:
        """Ask for a new token if one is due (a failure is recorded and logged, not raised)."""
        async with self._lock():
            if self.next_refresh_in() > 0:
                return  # another connection's refresher (or a call) got there first
            with contextlib.suppress(YdbTopicError):
                await self._attempt(background=True)

    # --- attempts -------------------------------------------------------------------------

    def _lock(self) -> asyncio.Lock:
        """This event loop's lock: attempts are one at a time per loop (a credentials object
        shared by drivers on several loops may ask twice, never concurrently on one loop)."""
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = asyncio.Lock()
        return lock

    async def _attempt(self, *, background: bool) -> str:
        started = time.monotonic()
        try:
            issued = await self._fetch()
            token = check_token(issued.token, self._describe())
            if token is None:
                raise FetchFailed("the token service answered with an empty token")
            if issued.expires_in is not None and not issued.expires_in > 0:
                raise FetchFailed(f"the token service issued a token that expires in {issued.expires_in}s")
        except (FetchFailed, YdbTopicError) as exc:
            self._failed(exc, background)
            raise self._error()  # noqa: B904 - the failure is the error's cause (or the error itself)
        except Exception as exc:  # a failure the fetch did not foresee: treated as transient
            self._failed(FetchFailed(f"{type(exc).__name__}: {exc}"), background)
            raise self._error() from exc
        register_secret(token)
        if issued.expires_in is not None:
            lifetime = issued.expires_in
            self._valid_until = started + lifetime - expiry_margin(lifetime)
        elif self._fallback_lifetime is not None:
            lifetime = self._fallback_lifetime
            self._valid_until = started + lifetime
        else:
            lifetime = math.inf
            self._valid_until = math.inf
        # A fraction of the time the token is used, not of its lifetime: with a short lifetime
        # (its margin a tenth of it) and a fraction near 1, the refresh would come only as the
        # token stops being used, and every call would wait for it.
        self._refresh_at = started + (self._valid_until - started) * self._refresh_fraction
        if self._warned:
            logger.info("%s got a new token after %d failed attempts", self._describe(), self._failures)
        self._warned = False
        self._token = token
        self._failure = None
        self._failures = 0
        self._next_attempt_at = 0.0
        return token

    def _failed(self, failure: BaseException, background: bool) -> None:
        now = time.monotonic()
        self._failure = failure
        self._failures += 1
        rejected = isinstance(failure, FetchFailed) and failure.rejected
        schedule = REJECTED_BACKOFF if rejected else TRANSIENT_BACKOFF
        delay = schedule.delay(self._failures - 1)
        if self._token is not None and now < self._valid_until:
            # Several tries before the old token expires.
            delay = min(delay, max(MIN_RETRY_DELAY, (self._valid_until - now) / RETRIES_BEFORE_EXPIRY))
        self._next_attempt_at = now + max(delay, MIN_RETRY_DELAY)
        if background:
            log = logger.debug if self._warned else logger.warning
            self._warned = True
            log(
                "%s could not refresh its token (attempt %d): %s; %s; next attempt in %.1fs",
                self._describe(), self._failures, failure, self._standing(now), delay,
            )

    def _standing(self, now: float) -> str:
        """What the credentials have meanwhile, for messages."""
        if self._token is None:
            return "no token was obtained yet"
        if now < self._valid_until:
            return f"the current token stays in use for {self._valid_until - now:.1f}s"
        return f"the last token expired {now - self._valid_until:.1f}s ago"

    def _error(self) -> YdbTopicError:
        """The exception for a call that finds no valid token, from the last failure."""
        failure = self._failure
        assert failure is not None
        if isinstance(failure, YdbTopicError):
            # A login through the cluster failed with the cluster's own error, or the
            # credentials' own (a missing package, an unusable token): it says it best.
            return failure.with_traceback(None)
        now = time.monotonic()
        wait = max(0.0, self._next_attempt_at - now)
        standing = self._standing(now)
        error: YdbTopicError
        if isinstance(failure, FetchFailed) and failure.rejected:
            error = CredentialsRejectedError(
                f"{self._describe()}: the token service refused the credentials: {failure}"
                f" ({standing}; asking again in {wait:.1f}s at the earliest)"
            )
        else:
            error = TokenRefreshError(
                f"{self._describe()} has no valid token: {failure} ({standing}; trying again in {wait:.1f}s)"
            )
        error.__cause__ = failure
        return error


class Refreshers:
    """The background refresh task of each connection using one credentials object.

    A connection attaches when it is made; its task starts with its first token request (on its
    event loop) and ends when it detaches (closes). Several connections share the token: the
    first refresher due refreshes it, the others find it fresh.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: dict[object, asyncio.Task[None] | None] = {}

    def __contains__(self, owner: object) -> bool:
        return owner in self._tasks

    @property
    def owners(self) -> list[object]:
        return list(self._tasks)

    def attach(self, owner: object) -> None:
        self._tasks.setdefault(owner, None)

    def start(self, owner: object, cache: TokenCache) -> None:
        """Start ``owner``'s refresher if it is attached and has none yet."""
        if owner in self._tasks and self._tasks[owner] is None:
            self._tasks[owner] = asyncio.get_running_loop().create_task(
                keep_fresh(cache), name=f"ydb-topic-async {self._name} token refresh"
            )

    async def detach(self, owner: object) -> None:
        task = self._tasks.pop(owner, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def keep_fresh(cache: TokenCache) -> None:
    """Refresh ``cache``'s token whenever it is due, until cancelled."""
    while True:
        await asyncio.sleep(min(cache.next_refresh_in(), MAX_SLEEP))
        await cache.refresh()


class RefreshingCredentials(OwnedCredentials):
    """Credentials whose token comes from a token service and expires: the base of the
    service-account key, metadata service and OAuth 2.0 token exchange kinds.

    Subclasses implement ``_fetch`` (one request to the token service, raising ``FetchFailed``).
    Used by a driver, the token is refreshed in the background while the driver is open; used
    alone, ``async with credentials:`` keeps it fresh for the block, and without either a call
    past the refresh time waits for the new token.
    """

    def __init__(self) -> None:
        self._cache = TokenCache(self._fetch, self.__repr__)
        self._refreshers = Refreshers(type(self).__name__)

    async def _fetch(self) -> IssuedToken:
        raise NotImplementedError

    async def auth_token(self) -> str | None:
        """The current token (see the class's refresh rules); ``TokenRefreshError`` or
        ``CredentialsRejectedError`` when there is no valid token to give."""
        return await self._cache.token()

    def _attach(self, owner: object, login: Login) -> None:
        self._refreshers.attach(owner)

    async def _detach(self, owner: object) -> None:
        await self._refreshers.detach(owner)

    async def _token_for(self, owner: object) -> str | None:
        self._refreshers.start(owner, self._cache)
        return await self._cache.token()

    async def __aenter__(self) -> RefreshingCredentials:
        self._refreshers.attach(self)
        self._refreshers.start(self, self._cache)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._refreshers.detach(self)
