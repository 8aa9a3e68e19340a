"""The cloud credentials' contracts with the official SDKs and the services: the service account's
JWT, the IAM messages on the wire, the authorized key file, YDB's OAuth 2.0 token exchange
configuration file and the answers of token endpoints and metadata services (real HTTP on
loopback), the missing ``cloud`` extra."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding

import ydb_topic_async as yta
from ydb_topic_async._credentials.oauth2 import JWT_TOKEN_TYPE, parse_duration
from ydb_topic_async._credentials.service_account import parse_iam_endpoint
from ydb_topic_async._proto import iam_token_service_pb2 as iam_pb
from ydb_topic_async.testing._http import HttpRequest, HttpResponse, HttpServer

from ._pki import ec_key, private_pem, public_pem, rsa_key

ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


def _segments(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    header, payload, signature = token.split(".")

    def decode(part: str) -> bytes:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))

    return json.loads(decode(header)), json.loads(decode(payload)), f"{header}.{payload}".encode(), decode(signature)


# --- the service account's JWT and the IAM messages -----------------------------------------------


def test_the_jwt_is_what_the_iam_token_service_expects() -> None:
    """PS256 with the salt as long as the hash (Go forces PSSSaltLengthEqualsHash; the Python SDK's
    PyJWT does the same), ``kid`` the key id, ``iss`` the account, ``aud`` the IAM tokens URL as a
    string (the Python SDK), ``exp`` an hour after ``iat`` (Python ``_jwt_expiration_timeout``,
    Go ``DefaultTokenTTL``): ydb-python-sdk ydb/iam/auth.py, ydb-go-yc internal/auth/iam.go."""
    key = rsa_key()
    credentials = yta.ServiceAccountCredentials("sa-1", "key-1", private_pem(key))
    header, claims, signed, signature = _segments(credentials.signed_jwt())
    assert header == {"alg": "PS256", "kid": "key-1", "typ": "JWT"}
    assert set(claims) == {"iss", "aud", "iat", "exp"}
    assert claims["iss"] == "sa-1"
    assert claims["aud"] == "https://iam.api.cloud.yandex.net/iam/v1/tokens"
    assert claims["exp"] - claims["iat"] == 3600
    strict = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32)
    key.public_key().verify(signature, signed, strict, hashes.SHA256())


def test_the_iam_messages_on_the_wire() -> None:
    """Field numbers and types of yandex-cloud/cloudapi yandex/cloud/iam/v1/iam_token_service.proto:
    CreateIamTokenRequest { oneof identity { string yandex_passport_oauth_token = 1; string jwt = 2; } },
    CreateIamTokenResponse { string iam_token = 1; google.protobuf.Timestamp expires_at = 2; }."""
    assert iam_pb.CreateIamTokenRequest(jwt="abc").SerializeToString() == b"\x12\x03abc"
    assert iam_pb.CreateIamTokenRequest(yandex_passport_oauth_token="x").SerializeToString() == b"\x0a\x01x"
    response = iam_pb.CreateIamTokenResponse(iam_token="t")
    response.expires_at.seconds = 5
    assert response.SerializeToString() == b"\x0a\x01t\x12\x02\x08\x05"
    assert iam_pb.CreateIamTokenRequest.DESCRIPTOR.full_name.startswith("YdbTopicAsync.")  # never the cloud SDK's


@pytest.mark.parametrize(
    ("endpoint", "parsed"),
    [
        ("iam.api.cloud.yandex.net:443", ("iam.api.cloud.yandex.net:443", True)),
        ("iam.example", ("iam.example:443", True)),
        ("grpcs://iam.example:8443", ("iam.example:8443", True)),
        ("grpc://127.0.0.1:5000", ("127.0.0.1:5000", False)),
        ("grpc://[::1]:5000/", ("[::1]:5000", False)),
    ],
)
def test_iam_endpoints(endpoint: str, parsed: tuple[str, bool]) -> None:
    assert parse_iam_endpoint(endpoint) == parsed


@pytest.mark.parametrize("endpoint", ["https://iam.example", "iam.example:443/path", "iam.example:http", ""])
def test_bad_iam_endpoints(endpoint: str) -> None:
    with pytest.raises(yta.InvalidArgumentError, match="iam_endpoint"):
        parse_iam_endpoint(endpoint)


def test_the_authorized_key_file() -> None:
    """Fields of `yc iam key create`'s file; ``user_account_id`` stands in for the account as in the
    Python SDK (ydb/iam/auth.py ``from_content``); the text line before the PEM block is skipped."""
    pem = private_pem(rsa_key()).decode()
    prefixed = f"PLEASE DO NOT REMOVE THIS LINE! Yandex.Cloud SA Key ID <k>\n{pem}"
    key = {"id": "k", "user_account_id": "user-1", "private_key": prefixed,
           "created_at": "2024-01-01T00:00:00Z", "key_algorithm": "RSA_2048", "public_key": "ignored"}
    credentials = yta.ServiceAccountCredentials.from_content(json.dumps(key))
    assert (credentials.service_account_id, credentials.access_key_id) == ("user-1", "k")
    assert pem not in repr(credentials)
    with pytest.raises(yta.InvalidArgumentError, match="has no id, service_account_id"):
        yta.ServiceAccountCredentials.from_content({"private_key": pem})
    with pytest.raises(yta.InvalidArgumentError, match="must be an RSA key"):
        yta.ServiceAccountCredentials("sa", "k", private_pem(ec_key()))
    garbled = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"
    with pytest.raises(yta.InvalidArgumentError, match="not a usable PEM private key") as failure:
        yta.ServiceAccountCredentials("sa", "k", garbled)
    assert "bm90IGEga2V5" not in str(failure.value)


# --- YDB's OAuth 2.0 token exchange configuration --------------------------------------------------


def test_every_field_of_the_configuration_file() -> None:
    """ydb/docs/en/core/reference/ydb-sdk/_includes/auth.md, "File format for OAuth 2.0 token
    exchange authentication mode parameters": strings or lists, types and algorithms in any case,
    an HS secret in base64 without padding (the Python SDK pads it), unknown keys ignored."""
    secret = b"a shared secret of thirty-two by"
    config = {
        "grant-type": "urn:example:grant",
        "res": ["https://r1", "https://r2"],
        "aud": "audience-1",
        "scope": ["read", "", "write"],
        "requested-token-type": "urn:example:token-type",
        "token-endpoint": "http://127.0.0.1:1/token",
        "subject-credentials": {
            "type": "jwt", "alg": "hs256", "private-key": base64.b64encode(secret).decode().rstrip("="),
            "kid": "kid-1", "iss": "issuer", "sub": "subject", "aud": ["x", "y"], "jti": "id-1", "ttl": "90m",
        },
        "actor-credentials": {"type": "Fixed", "token": "actor-token", "token-type": ACCESS_TOKEN_TYPE},
        "something-new": True,
    }
    credentials = yta.Oauth2TokenExchangeCredentials.from_content(json.dumps(config))
    form = credentials.request_form()
    subject = dict(form)["subject_token"]
    assert form == [
        ("grant_type", "urn:example:grant"),
        ("requested_token_type", "urn:example:token-type"),
        ("resource", "https://r1"),
        ("resource", "https://r2"),
        ("audience", "audience-1"),
        ("scope", "read write"),
        ("subject_token", subject),
        ("subject_token_type", JWT_TOKEN_TYPE),
        ("actor_token", "actor-token"),
        ("actor_token_type", ACCESS_TOKEN_TYPE),
    ]
    assert jwt.get_unverified_header(subject) == {"alg": "HS256", "kid": "kid-1", "typ": "JWT"}
    claims = jwt.decode(subject, secret, algorithms=["HS256"], audience="x")
    assert {k: claims[k] for k in ("iss", "sub", "aud", "jti")} == {
        "iss": "issuer", "sub": "subject", "aud": ["x", "y"], "jti": "id-1"
    }
    assert claims["exp"] - claims["iat"] == 5400
    assert credentials.token_endpoint == "http://127.0.0.1:1/token"
    overridden = yta.Oauth2TokenExchangeCredentials.from_content(config, token_endpoint="http://127.0.0.1:2/other")
    assert overridden.token_endpoint == "http://127.0.0.1:2/other"


def test_defaults_and_asymmetric_keys() -> None:
    rsa, ec = rsa_key(), ec_key()
    for algorithm, key in (("RS256", rsa), ("PS384", rsa), ("ES256", ec)):
        credentials = yta.Oauth2TokenExchangeCredentials.from_content({
            "token-endpoint": "http://127.0.0.1:1/token",
            "subject-credentials": {"type": "JWT", "alg": algorithm, "private-key": private_pem(key).decode()},
        })
        form = dict(credentials.request_form())
        assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange"
        assert form["requested_token_type"] == ACCESS_TOKEN_TYPE
        assert "scope" not in form and "audience" not in form
        header = jwt.get_unverified_header(form["subject_token"])
        assert header == {"alg": algorithm, "typ": "JWT"}  # no kid when none is configured
        claims = jwt.decode(form["subject_token"], public_pem(key), algorithms=[algorithm])
        assert claims["exp"] - claims["iat"] == 3600


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "no token-endpoint"),
        ({"token-endpoint": "ftp://x"}, "token endpoint URL"),
        ({"subject-credentials": {"type": "OAUTH"}}, "type 'OAUTH' is not supported"),
        ({"subject-credentials": {"type": "FIXED", "token": "t"}}, "needs token and token-type"),
        ({"subject-credentials": {"type": "JWT", "alg": "RS256"}}, "needs alg and private-key"),
        ({"subject-credentials": {"type": "JWT", "alg": "XS256", "private-key": "k"}}, "unsupported JWT signing"),
        ({"subject-credentials": {"type": "JWT", "alg": "HS256", "private-key": "!!"}}, "must be base64"),
        ({"actor-credentials": {"type": "JWT", "alg": "ES256", "private-key": "RSA"}}, "actor-credentials"),
        ({"aud": 5}, "aud must be a string or a list of strings"),
        ({"subject-credentials": {"type": "JWT", "alg": "HS256", "private-key": "c2VjcmV0", "ttl": "-3h"}},
         "must be positive"),
    ],
)
def test_configuration_mistakes(config: dict[str, Any], message: str) -> None:
    if config and "token-endpoint" not in config:
        config = {"token-endpoint": "http://127.0.0.1:1/token", **config}
    with pytest.raises(yta.InvalidArgumentError, match=message):
        yta.Oauth2TokenExchangeCredentials.from_content(config)


def test_an_asymmetric_algorithm_needs_its_key_type() -> None:
    with pytest.raises(yta.InvalidArgumentError, match="ES256 needs an EC private key"):
        yta.JwtTokenSource("ES256", private_pem(rsa_key()))
    with pytest.raises(yta.InvalidArgumentError, match="RS256 needs an RSA private key"):
        yta.JwtTokenSource("RS256", private_pem(ec_key()))


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("24h", 86400), ("3m", 180), ("1h30m", 5400), ("500ms", 0.5), ("1.5h", 5400), ("1d", 86400), ("3600", 3600),
     (123, 123), ("2h0m10s", 7210)],
)
def test_ttl_durations(value: object, seconds: float) -> None:
    """Go's syntax (time.ParseDuration, what the Go SDK reads), the day unit and bare seconds
    (the Python SDK's ``_duration_seconds_from_config``)."""
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["-3h", "0", "0s", "abc", "1x", "", "h", True])
def test_bad_ttl_durations(value: object) -> None:
    with pytest.raises(yta.InvalidArgumentError):
        parse_duration(value)


# --- answers of token endpoints and metadata services (HTTP on loopback) ---------------------------


class Endpoint:
    """An HTTP endpoint answering what the test says; it keeps the requests it got."""

    def __init__(self, answer: Callable[[HttpRequest], HttpResponse]) -> None:
        self.answer = answer
        self.requests: list[HttpRequest] = []
        self.http = HttpServer("127.0.0.1", 0, self._handle)

    async def _handle(self, request: HttpRequest) -> HttpResponse:
        self.requests.append(request)
        return self.answer(request)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.port}/token"


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    served = Endpoint(lambda _: HttpResponse(500))
    await served.http.start()
    try:
        yield served
    finally:
        await served.http.stop()


def _exchange(url: str, **options: Any) -> yta.Oauth2TokenExchangeCredentials:
    return yta.Oauth2TokenExchangeCredentials(url, yta.FixedTokenSource("subject-secret", ACCESS_TOKEN_TYPE), **options)


async def test_the_exchange_request_and_a_bearer_answer_in_any_case(endpoint: Endpoint) -> None:
    endpoint.answer = lambda _: HttpResponse.json(
        200, {"access_token": "issued", "token_type": "BeareR", "expires_in": 60, "scope": "a b"}
    )
    credentials = _exchange(endpoint.url, audience=["one", "two"], scope=["a", "b"])
    assert await credentials.auth_token() == "Bearer issued"
    (request,) = endpoint.requests
    assert request.method == "POST"
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert "authorization" not in request.headers  # no client authentication, as in every SDK
    assert request.body.decode() == (
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange"
        "&requested_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token"
        "&audience=one&audience=two&scope=a+b&subject_token=subject-secret"
        "&subject_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token"
    )


@pytest.mark.parametrize(
    ("status", "body", "error", "message"),
    [
        (200, {"access_token": "t", "token_type": "basic", "expires_in": 60}, yta.CredentialsRejectedError,
         "issued a token of type 'basic'"),
        (200, {"access_token": "t", "token_type": "bearer", "expires_in": 60, "scope": "other"},
         yta.CredentialsRejectedError, "granted the scope 'other'"),
        (200, {"access_token": "t", "token_type": "bearer", "expires_in": -1}, yta.CredentialsRejectedError,
         "expires_in -1"),
        (200, {"token_type": "bearer", "expires_in": 60}, yta.CredentialsRejectedError, "without an access_token"),
        (200, "not json", yta.CredentialsRejectedError, "not JSON"),
        (403, {"error": "access_denied", "error_description": "no"}, yta.CredentialsRejectedError,
         "HTTP 403: error 'access_denied', error_description 'no'"),
        (401, {}, yta.CredentialsRejectedError, "HTTP 401"),
        (429, {"error": "slow_down"}, yta.TokenRefreshError, "HTTP 429: error 'slow_down'"),
        (503, "busy", yta.TokenRefreshError, "HTTP 503"),
    ],
)
async def test_exchange_answers(
    endpoint: Endpoint, status: int, body: object, error: type[Exception], message: str
) -> None:
    """Python SDK ``_process_response_json`` and Go ``validateTokenResponse``: a bearer token, a
    positive lifetime, the requested scope; Go's split of retryable (408, 429, 5xx) failures."""
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    endpoint.answer = lambda _: HttpResponse(status, content)
    with pytest.raises(error, match=message) as failure:
        await _exchange(endpoint.url).auth_token()
    assert "subject-secret" not in str(failure.value)
    assert isinstance(failure.value.__cause__, Exception)


async def test_an_unreachable_token_endpoint(endpoint: Endpoint) -> None:
    url = endpoint.url
    await endpoint.http.stop()
    with pytest.raises(yta.TokenRefreshError, match="could not reach") as failure:
        await _exchange(url).auth_token()
    assert failure.value.retriable


async def test_metadata_answers(endpoint: Endpoint) -> None:
    """The header ``Metadata-Flavor: Google``; the body parsed whatever its content type."""
    endpoint.answer = lambda _: HttpResponse(
        200, json.dumps({"access_token": "vm-token", "expires_in": 3600, "token_type": "Bearer"}).encode(),
        content_type="text/plain",
    )
    credentials = yta.MetadataUrlCredentials(endpoint.url)
    assert await credentials.auth_token() == "vm-token"  # as it is: no "Bearer " prefix
    assert endpoint.requests[0].method == "GET"
    assert endpoint.requests[0].headers["metadata-flavor"] == "Google"
    endpoint.answer = lambda _: HttpResponse(404, b"")
    with pytest.raises(yta.CredentialsRejectedError, match="is a service account attached"):
        await yta.MetadataUrlCredentials(endpoint.url).auth_token()


async def test_refused_credentials_are_not_asked_about_again_at_once(endpoint: Endpoint) -> None:
    endpoint.answer = lambda _: HttpResponse.json(400, {"error": "invalid_grant"})
    credentials = _exchange(endpoint.url)
    for _ in range(20):
        with pytest.raises(yta.CredentialsRejectedError, match="asking again in"):
            await credentials.auth_token()
    assert len(endpoint.requests) == 1


# --- the cloud extra ---------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["jwt", "cryptography", "httpx"])
def test_a_missing_package_names_the_extra(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pem = private_pem(rsa_key())
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    makers: list[Callable[[], object]] = [
        lambda: yta.MetadataUrlCredentials(),
        lambda: _exchange("http://127.0.0.1:1/token"),
    ] if module == "httpx" else [
        lambda: yta.ServiceAccountCredentials("sa", "k", pem),
        lambda: yta.JwtTokenSource("RS256", pem),
    ]
    for make in makers:
        with pytest.raises(yta.MissingDependencyError) as failure:
            make()
        assert f"({module} is missing)" in str(failure.value)
        assert "ydb-topic-async[cloud]" in str(failure.value)
        assert isinstance(failure.value, ImportError)
    if module == "httpx":
        with pytest.raises(yta.MissingDependencyError, match="YDB_ANONYMOUS_CREDENTIALS=1"):
            yta.credentials_from_env({})
