"""OAuth 2.0 token exchange (RFC 8693): subject and actor tokens, fixed or signed JWTs, exchanged
for an access token at a token endpoint; with the configuration file format YDB documents for
``YDB_OAUTH2_KEY_FILE``."""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .._errors import InvalidArgumentError
from .._validate import check_seconds
from ..observability.logging import mask_secrets, register_secret
from ._cloud import REJECTING_HTTP_STATUSES, http_request, httpx_module, jwt_module, load_private_key, read_file
from .refresh import FetchFailed, IssuedToken, RefreshingCredentials

TOKEN_EXCHANGE_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
SUPPORTED_JWT_ALGORITHMS = (
    "ES256", "ES384", "ES512", "HS256", "HS384", "HS512",
    "PS256", "PS384", "PS512", "RS256", "RS384", "RS512",
)  # fmt: skip
"""The signing algorithms of JWT token sources (those of YDB's SDKs)."""
EXCHANGE_REQUEST_TIMEOUT = 10.0
"""Bounds one request to the token endpoint."""
DEFAULT_JWT_TTL = 3600.0

_FEATURE = "Oauth2TokenExchangeCredentials"
_DETAIL_LIMIT = 300
"""Characters of a token endpoint's error description kept in an error message."""


class TokenSource(Protocol):
    """A subject or actor token for the exchange: ``token()`` gives ``(token, token_type)``."""

    def token(self) -> tuple[str, str]: ...


class FixedTokenSource:
    """A token given in advance, with its RFC 8693 token type (e.g.
    ``urn:ietf:params:oauth:token-type:access_token``)."""

    def __init__(self, token: str, token_type: str) -> None:
        if not isinstance(token, str) or not token:
            raise InvalidArgumentError("a fixed token source needs a non-empty token")
        if not isinstance(token_type, str) or not token_type:
            raise InvalidArgumentError("a fixed token source needs a non-empty token type")
        register_secret(token, pinned=True)
        self._token = token
        self.token_type = token_type

    def token(self) -> tuple[str, str]:
        return self._token, self.token_type

    def __repr__(self) -> str:
        return f"FixedTokenSource(token=***, token_type={self.token_type!r})"


class JwtTokenSource:
    """A JWT signed anew for every exchange (token type ``urn:ietf:params:oauth:token-type:jwt``).

    Parameters:
        signing_method: One of ``SUPPORTED_JWT_ALGORITHMS`` (any case): RS*/PS* with an RSA
            private key, ES* with an EC key, HS* with a shared secret.
        private_key: The PEM private key, or for HS* the secret itself (bytes or text).
        key_id: The JWT header's ``kid``.
        issuer: The ``iss`` claim.
        subject: The ``sub`` claim.
        audience: The ``aud`` claim: one value or several.
        id: The ``jti`` claim.
        token_ttl_seconds: The JWT's lifetime (``exp`` - ``iat``), default an hour.

    Needs the ``cloud`` extra (PyJWT and cryptography).
    """

    def __init__(
        self,
        signing_method: str,
        private_key: str | bytes,
        *,
        key_id: str | None = None,
        issuer: str | None = None,
        subject: str | None = None,
        audience: str | Sequence[str] | None = None,
        id: str | None = None,
        token_ttl_seconds: float = DEFAULT_JWT_TTL,
    ) -> None:
        algorithm = signing_method.upper() if isinstance(signing_method, str) else ""
        if algorithm not in SUPPORTED_JWT_ALGORITHMS:
            raise InvalidArgumentError(
                f"unsupported JWT signing method {signing_method!r}: use one of {', '.join(SUPPORTED_JWT_ALGORITHMS)}"
            )
        if not isinstance(private_key, (str, bytes)) or not private_key:
            raise InvalidArgumentError("a JWT token source needs a private key")
        token_ttl_seconds = check_seconds(token_ttl_seconds, "token_ttl_seconds", positive=True)
        for name, value in (("key_id", key_id), ("issuer", issuer), ("subject", subject), ("id", id)):
            if value is not None and not isinstance(value, str):
                raise InvalidArgumentError(f"{name} must be a string")
        self.audience = _string_list(audience, "audience") if audience is not None else None
        register_secret(private_key if isinstance(private_key, str) else private_key.decode("latin-1"), pinned=True)
        jwt_module(_FEATURE)
        self.signing_method = algorithm
        if algorithm.startswith("HS"):
            self._key: Any = private_key.encode() if isinstance(private_key, str) else private_key
        else:
            self._key = load_private_key(private_key, _FEATURE, f"the {algorithm} private key")
            from cryptography.hazmat.primitives.asymmetric import ec, rsa

            wanted = ec.EllipticCurvePrivateKey if algorithm.startswith("ES") else rsa.RSAPrivateKey
            if not isinstance(self._key, wanted):
                kind = "an EC" if algorithm.startswith("ES") else "an RSA"
                raise InvalidArgumentError(f"{algorithm} needs {kind} private key")
        self.key_id = key_id
        self.issuer = issuer
        self.subject = subject
        self.id = id
        self.token_ttl_seconds = float(token_ttl_seconds)

    def token(self) -> tuple[str, str]:
        jwt = jwt_module(_FEATURE)
        now = int(time.time())
        claims: dict[str, Any] = {"iat": now, "exp": now + max(1, round(self.token_ttl_seconds))}
        for claim, value in (("iss", self.issuer), ("sub", self.subject), ("jti", self.id)):
            if value is not None:
                claims[claim] = value
        if self.audience is not None:
            claims["aud"] = self.audience[0] if len(self.audience) == 1 else self.audience
        headers = {"kid": self.key_id} if self.key_id is not None else None
        token: str = jwt.encode(claims, self._key, algorithm=self.signing_method, headers=headers)
        register_secret(token)
        return token, JWT_TOKEN_TYPE

    def __repr__(self) -> str:
        return f"JwtTokenSource(signing_method={self.signing_method!r}, key_id={self.key_id!r}, private_key=***)"


class Oauth2TokenExchangeCredentials(RefreshingCredentials):
    """Access tokens from an OAuth 2.0 token exchange endpoint (RFC 8693).

    Each exchange POSTs the form ``grant_type``, ``requested_token_type``, ``resource`` and
    ``audience`` (one field per value), ``scope`` (space-separated), and the subject's and the
    actor's token with their types; the answer's ``access_token`` (``token_type`` bearer) is
    sent to YDB as ``Bearer <token>`` and refreshed in the background at half its
    ``expires_in``. A 4xx answer (except 408 and 429) refuses the request; the error's text
    carries the endpoint's ``error`` and ``error_description``, never a token.

    Parameters:
        token_endpoint: The exchange endpoint's URL.
        subject_token_source: Where the subject token comes from (``FixedTokenSource``,
            ``JwtTokenSource``), or None to send none.
        actor_token_source: Where the actor token comes from, or None.
        audience: The ``audience`` field(s).
        scope: The scope(s), joined by spaces.
        resource: The ``resource`` field(s).
        grant_type: Default ``urn:ietf:params:oauth:grant-type:token-exchange``.
        requested_token_type: Default ``urn:ietf:params:oauth:token-type:access_token``.

    ``from_file``/``from_content`` read YDB's configuration file format (``YDB_OAUTH2_KEY_FILE``).
    Needs the ``cloud`` extra (httpx; PyJWT and cryptography for JWT sources).
    """

    def __init__(
        self,
        token_endpoint: str,
        subject_token_source: TokenSource | None = None,
        actor_token_source: TokenSource | None = None,
        *,
        audience: str | Sequence[str] | None = None,
        scope: str | Sequence[str] | None = None,
        resource: str | Sequence[str] | None = None,
        grant_type: str = TOKEN_EXCHANGE_GRANT_TYPE,
        requested_token_type: str = ACCESS_TOKEN_TYPE,
    ) -> None:
        if not isinstance(token_endpoint, str) or not token_endpoint.startswith(("http://", "https://")):
            raise InvalidArgumentError(
                f"the OAuth 2.0 token exchange needs a token endpoint URL (http:// or https://), got {token_endpoint!r}"
            )
        sources = (("subject_token_source", subject_token_source), ("actor_token_source", actor_token_source))
        for name, source in sources:
            if source is not None and not callable(getattr(source, "token", None)):
                raise InvalidArgumentError(f"{name} must have a token() method giving (token, token_type)")
        for name, value in (("grant_type", grant_type), ("requested_token_type", requested_token_type)):
            if not isinstance(value, str) or not value:
                raise InvalidArgumentError(f"{name} must be a non-empty string")
        httpx_module(_FEATURE)
        self.token_endpoint = token_endpoint
        self.subject_token_source = subject_token_source
        self.actor_token_source = actor_token_source
        self.audience = _string_list(audience, "audience") if audience is not None else []
        self.resource = _string_list(resource, "resource") if resource is not None else []
        self.scope = " ".join(s for s in (_string_list(scope, "scope") if scope is not None else []) if s)
        self.grant_type = grant_type
        self.requested_token_type = requested_token_type
        super().__init__()

    # --- the configuration file ---------------------------------------------------------------

    @classmethod
    def from_content(
        cls, config: str | bytes | Mapping[str, Any], *, token_endpoint: str | None = None
    ) -> Oauth2TokenExchangeCredentials:
        """From YDB's token exchange configuration (JSON text, or the parsed object).

        Keys: ``token-endpoint``, ``grant-type``, ``requested-token-type``, ``aud``, ``res``,
        ``scope`` (a string or a list of strings), ``subject-credentials`` and
        ``actor-credentials``: ``{"type": "FIXED", "token": ..., "token-type": ...}`` or
        ``{"type": "JWT", "alg": ..., "private-key": ..., "kid", "iss", "sub", "aud", "jti",
        "ttl"}`` (``private-key`` PEM, or base64 for HS*; ``ttl`` a duration such as ``"1h"``,
        ``"90m"``, ``"1h30m"``, ``"3600"`` or ``"1d"``, default an hour). Unknown keys are
        ignored. ``token_endpoint``, when given, replaces the file's.
        """
        if isinstance(config, (str, bytes)):
            try:
                parsed = json.loads(config)
            except ValueError as exc:
                raise InvalidArgumentError(
                    f"the OAuth 2.0 token exchange configuration is not valid JSON: {exc}"
                ) from None
        else:
            parsed = config
        if not isinstance(parsed, Mapping):
            raise InvalidArgumentError("the OAuth 2.0 token exchange configuration must be a JSON object")
        endpoint = token_endpoint or _optional_string(parsed, "token-endpoint")
        if not endpoint:
            raise InvalidArgumentError("the OAuth 2.0 token exchange configuration has no token-endpoint")
        return cls(
            endpoint,
            _token_source(parsed.get("subject-credentials"), "subject-credentials"),
            _token_source(parsed.get("actor-credentials"), "actor-credentials"),
            audience=_optional_list(parsed, "aud"),
            scope=_optional_list(parsed, "scope"),
            resource=_optional_list(parsed, "res"),
            grant_type=_optional_string(parsed, "grant-type") or TOKEN_EXCHANGE_GRANT_TYPE,
            requested_token_type=_optional_string(parsed, "requested-token-type") or ACCESS_TOKEN_TYPE,
        )

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, token_endpoint: str | None = None
    ) -> Oauth2TokenExchangeCredentials:
        """From a configuration file (``~`` is expanded); see ``from_content``."""
        content = read_file(path, "the OAuth 2.0 token exchange configuration file")
        try:
            return cls.from_content(content, token_endpoint=token_endpoint)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{str(path)!r}: {exc}") from None

    # --- the exchange -------------------------------------------------------------------------

    def request_form(self) -> list[tuple[str, str]]:
        """The form fields of one exchange (with freshly signed JWTs, when sources sign them)."""
        form = [("grant_type", self.grant_type), ("requested_token_type", self.requested_token_type)]
        form += [("resource", value) for value in self.resource]
        form += [("audience", value) for value in self.audience]
        if self.scope:
            form.append(("scope", self.scope))
        for prefix, source in (("subject", self.subject_token_source), ("actor", self.actor_token_source)):
            if source is not None:
                token, token_type = source.token()
                form += [(f"{prefix}_token", token), (f"{prefix}_token_type", token_type)]
        return form

    async def _fetch(self) -> IssuedToken:
        answer = await http_request(
            "POST", self.token_endpoint, feature=_FEATURE, timeout=EXCHANGE_REQUEST_TIMEOUT, form=self.request_form()
        )
        if answer.status != 200:
            raise FetchFailed(
                f"the token endpoint {self.token_endpoint} answered HTTP {answer.status}{_error_details(answer.body)}",
                rejected=answer.status in REJECTING_HTTP_STATUSES,
            )
        body = answer.json_object()
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise FetchFailed(
                f"the token endpoint {self.token_endpoint} answered without an access_token", rejected=True
            )
        register_secret(token)
        token_type = body.get("token_type")
        if not isinstance(token_type, str) or token_type.lower() != "bearer":
            raise FetchFailed(
                f"the token endpoint {self.token_endpoint} issued a token of type {token_type!r}; only bearer"
                " tokens can be used",
                rejected=True,
            )
        expires_in = body.get("expires_in")
        if isinstance(expires_in, bool) or not isinstance(expires_in, (int, float)) or not expires_in > 0:
            raise FetchFailed(
                f"the token endpoint {self.token_endpoint} answered with expires_in {expires_in!r}:"
                " a positive number of seconds is needed",
                rejected=True,
            )
        scope = body.get("scope")
        if scope is not None and scope != self.scope:
            raise FetchFailed(
                f"the token endpoint {self.token_endpoint} granted the scope {scope!r},"
                f" not the requested {self.scope!r}",
                rejected=True,
            )
        return IssuedToken(f"Bearer {token}", float(expires_in))

    def __repr__(self) -> str:
        return f"Oauth2TokenExchangeCredentials(token_endpoint={self.token_endpoint!r})"


def _error_details(body: bytes) -> str:
    """``: error (description)`` from an RFC 6749 error answer, when it is one."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(parsed, dict):
        return ""
    # Masked before it is cut short: an endpoint may echo the request's tokens back.
    parts = [
        f"{key} {mask_secrets(value)[:_DETAIL_LIMIT]!r}"
        for key in ("error", "error_description", "error_uri")
        if isinstance(value := parsed.get(key), str) and value
    ]
    return ": " + ", ".join(parts) if parts else ""


# --- configuration values ---------------------------------------------------------------------


def _string_list(value: object, what: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)) and all(
        isinstance(item, str) for item in value
    ):
        return list(value)
    raise InvalidArgumentError(f"{what} must be a string or a list of strings")


def _optional_list(config: Mapping[str, Any], key: str) -> list[str] | None:
    value = config.get(key)
    return None if value is None else _string_list(value, key)


def _optional_string(config: Mapping[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidArgumentError(f"{key} must be a string")
    return value or None


_DURATION_UNITS = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0,
}  # fmt: skip
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h|d)")
_BARE_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")


def parse_duration(value: object, what: str = "ttl") -> float:
    """Seconds of a duration: Go's syntax (``"1h30m"``, ``"500ms"``, ``"2h"``), a day unit
    (``"1d"``), or a bare number of seconds (``"3600"``, or a JSON number). Must be positive."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if _BARE_NUMBER.fullmatch(text):
            seconds = float(text)
        else:
            sign = -1.0 if text.startswith("-") else 1.0
            text = text.lstrip("+-")
            seconds, position = 0.0, 0
            while position < len(text):
                match = _DURATION_PART.match(text, position)
                if match is None:
                    raise InvalidArgumentError(
                        f"{what} {value!r} is not a duration (examples: \"1h\", \"90m\", \"1h30m\", \"3600\")"
                    )
                seconds += float(match[1]) * _DURATION_UNITS[match[2]]
                position = match.end()
            if not text:
                raise InvalidArgumentError(f"{what} is empty")
            seconds *= sign
    else:
        raise InvalidArgumentError(f"{what} must be a duration string such as \"1h\"")
    if not seconds > 0:
        raise InvalidArgumentError(f"{what} must be positive, got {value!r}")
    return seconds


def _token_source(config: object, what: str) -> TokenSource | None:
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise InvalidArgumentError(f"{what} must be an object")
    kind = config.get("type")
    kind = kind.upper() if isinstance(kind, str) else kind
    if kind == "FIXED":
        token, token_type = config.get("token"), config.get("token-type")
        if not isinstance(token, str) or not token or not isinstance(token_type, str) or not token_type:
            raise InvalidArgumentError(f"{what}: a FIXED token needs token and token-type")
        return FixedTokenSource(token, token_type)
    if kind == "JWT":
        algorithm, key = config.get("alg"), config.get("private-key")
        if not isinstance(algorithm, str) or not algorithm or not isinstance(key, str) or not key:
            raise InvalidArgumentError(f"{what}: a JWT needs alg and private-key")
        secret: str | bytes = key
        if algorithm.upper().startswith("HS"):
            register_secret(key, pinned=True)
            try:
                secret = base64.b64decode(key + "=" * (-len(key) % 4), validate=True)
            except (binascii.Error, ValueError):
                raise InvalidArgumentError(f"{what}: an {algorithm.upper()} private-key must be base64") from None
        ttl = parse_duration(config["ttl"], f"{what} ttl") if config.get("ttl") is not None else DEFAULT_JWT_TTL
        audience = config.get("aud")
        try:
            return JwtTokenSource(
                algorithm,
                secret,
                key_id=_optional_string(config, "kid"),
                issuer=_optional_string(config, "iss"),
                subject=_optional_string(config, "sub"),
                audience=_string_list(audience, f"{what} aud") if audience is not None else None,
                id=_optional_string(config, "jti"),
                token_ttl_seconds=ttl,
            )
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{what}: {exc}") from None
    raise InvalidArgumentError(f"{what}: type {kind!r} is not supported: use \"JWT\" or \"FIXED\"")


__all__ = [
    "ACCESS_TOKEN_TYPE",
    "JWT_TOKEN_TYPE",
    "SUPPORTED_JWT_ALGORITHMS",
    "TOKEN_EXCHANGE_GRANT_TYPE",
    "FixedTokenSource",
    "JwtTokenSource",
    "Oauth2TokenExchangeCredentials",
    "TokenSource",
    "parse_duration",
]
