"""What the cloud credentials kinds share: their optional packages (the ``cloud`` extra: PyJWT
with ``cryptography`` for signing, httpx for HTTP), private keys, and one HTTP request to a
token service with its failures told apart."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from dataclasses import dataclass
from types import ModuleType
from typing import Any
from urllib.parse import urlencode

from .._errors import InvalidArgumentError
from ..extras import missing_dependency
from .refresh import FetchFailed

CLOUD_EXTRA = "cloud"

REJECTING_HTTP_STATUSES = frozenset({400, 401, 403, 404, 405})
"""Answers that say the request itself is wrong (bad credentials or configuration): asking again
unchanged cannot help. Others (408, 429, 5xx) are failures of the moment."""


def jwt_module(feature: str) -> ModuleType:
    """PyJWT (with ``cryptography``, which it needs for RSA and EC keys)."""
    try:
        import cryptography  # noqa: F401
        import jwt
    except ImportError as exc:
        raise missing_dependency(exc, feature, "PyJWT and cryptography", CLOUD_EXTRA) from exc
    return jwt


def httpx_module(feature: str) -> ModuleType:
    try:
        import httpx
    except ImportError as exc:
        raise missing_dependency(exc, feature, "httpx", CLOUD_EXTRA) from exc
    return httpx


def read_file(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of a file named in a configuration (``~`` expanded), or ``InvalidArgumentError``
    saying which file could not be read and why."""
    try:
        with open(os.path.expanduser(path), "rb") as file:
            return file.read()
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None


def load_private_key(pem: str | bytes, feature: str, what: str) -> Any:
    """A PEM private key (PKCS#8 or PKCS#1, RSA or EC; text before the PEM block is ignored, as
    in the keys ``yc iam key create`` writes), or ``InvalidArgumentError`` saying why not."""
    jwt_module(feature)
    from cryptography.hazmat.primitives import serialization

    data = pem.encode() if isinstance(pem, str) else pem
    start = data.find(b"-----BEGIN")
    if start < 0:
        raise InvalidArgumentError(f"{what} is not a PEM private key (no '-----BEGIN' line)")
    try:
        return serialization.load_pem_private_key(data[start:], password=None)
    except (ValueError, TypeError) as exc:
        # The message names the format problem, never the key's content.
        raise InvalidArgumentError(f"{what} is not a usable PEM private key: {exc}") from None


_default_ssl_context: ssl.SSLContext | None = None


async def default_ssl_context() -> ssl.SSLContext:
    """The system's trust store, loaded once (off the event loop: it takes tens of milliseconds)."""
    global _default_ssl_context
    if _default_ssl_context is None:
        _default_ssl_context = await asyncio.to_thread(ssl.create_default_context)
    return _default_ssl_context


@dataclass(frozen=True)
class HttpAnswer:
    """A token service's HTTP answer."""

    url: str
    status: int
    body: bytes

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object, or ``FetchFailed`` (a service that answers something else
        is misconfigured, or not a token service at all)."""
        try:
            value = json.loads(self.body)
        except ValueError:
            raise FetchFailed(
                f"{self.url} answered HTTP {self.status} with a body that is not JSON ({len(self.body)} bytes)",
                rejected=True,
            ) from None
        if not isinstance(value, dict):
            raise FetchFailed(f"{self.url} answered HTTP {self.status} with JSON that is not an object", rejected=True)
        return value


async def http_request(
    method: str,
    url: str,
    *,
    feature: str,
    timeout: float,
    headers: dict[str, str] | None = None,
    form: list[tuple[str, str]] | None = None,
    trust_env: bool = True,
) -> HttpAnswer:
    """One request; a connection failure or timeout is a (transient) ``FetchFailed``.

    ``trust_env``: honour the proxy settings of the environment (not for link-local services).
    """
    httpx = httpx_module(feature)
    verify = await default_ssl_context()  # made once: httpx would load the trust store per client
    headers = dict(headers or {})
    content = None
    if form is not None:
        # Repeated fields (audience=a&audience=b) as RFC 8693 wants them.
        content = urlencode(form).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        async with httpx.AsyncClient(
            timeout=timeout, verify=verify, trust_env=trust_env, follow_redirects=False
        ) as client:
            response = await client.request(method, url, headers=headers, content=content)
            return HttpAnswer(url, response.status_code, response.content)
    except httpx.TimeoutException:
        raise FetchFailed(f"{url} did not answer within {timeout}s") from None
    except httpx.HTTPError as exc:
        raise FetchFailed(f"could not reach {url}: {type(exc).__name__}: {exc}") from None
