"""``credentials_from_env`` and ``Driver.from_env``: a test per row of the precedence table in
docs/authentication.md.

The order is YDB's documented one ("same for all SDKs": ydb/docs/en/core/reference/ydb-sdk/
_includes/auth.md), which the Python SDK's ``credentials_from_env_variables`` and the C++ SDK's
``CreateFromEnvironment`` follow; the Go SDK's ``YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS`` (key
content) sits after the key file; user and password come last, under the Python SDK's and YDB
CLI's names (``YDB_USER``, ``YDB_PASSWORD``) and then the Go SDK's
(``YDB_STATIC_CREDENTIALS_USER``, ``YDB_STATIC_CREDENTIALS_PASSWORD``). Every row is tested with
all the lower rows' variables set too, so the row wins over them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ydb_topic_async as yta
from ydb_topic_async._credentials.environ import connection_from_env
from ydb_topic_async.testing import IamTokenService, LocalTopicServer

from ._pki import CertificateAuthority, private_pem, rsa_key

ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """A service account key file and an OAuth 2.0 token exchange configuration file."""
    key = {"id": "key-1", "service_account_id": "sa-file", "private_key": private_pem(rsa_key()).decode()}
    key_file = tmp_path / "sa.json"
    key_file.write_text(json.dumps(key))
    content = dict(key, service_account_id="sa-content", id="key-2")
    config = tmp_path / "oauth2.json"
    config.write_text(json.dumps({
        "token-endpoint": "http://127.0.0.1:1/token",
        "subject-credentials": {"type": "FIXED", "token": "subject", "token-type": ACCESS_TOKEN_TYPE},
    }))
    return {"key_file": str(key_file), "key_content": json.dumps(content), "oauth2": str(config)}


def _rows(files: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
    """The table's rows, highest precedence first: (the row's id, its variables)."""
    return [
        ("key_file", {"YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS": files["key_file"]}),
        ("key_content", {"YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS": files["key_content"]}),
        ("anonymous", {"YDB_ANONYMOUS_CREDENTIALS": "1"}),
        ("metadata", {"YDB_METADATA_CREDENTIALS": "1"}),
        ("access_token", {"YDB_ACCESS_TOKEN_CREDENTIALS": "token-from-env"}),
        ("oauth2", {"YDB_OAUTH2_KEY_FILE": files["oauth2"]}),
        ("user", {"YDB_USER": "alice", "YDB_PASSWORD": "alice-password"}),
        ("static_user", {"YDB_STATIC_CREDENTIALS_USER": "bob", "YDB_STATIC_CREDENTIALS_PASSWORD": "bob-password"}),
    ]


def _env_from(files: dict[str, str], row: str) -> dict[str, str]:
    """``row``'s variables and those of every row below it."""
    rows = _rows(files)
    index = [name for name, _ in rows].index(row)
    env: dict[str, str] = {}
    for _, variables in rows[index:]:
        env.update(variables)
    return env


def _check(row: str, credentials: yta.Credentials) -> None:
    if row in ("key_file", "key_content"):
        assert isinstance(credentials, yta.ServiceAccountCredentials)
        assert credentials.service_account_id == {"key_file": "sa-file", "key_content": "sa-content"}[row]
        assert credentials.iam_endpoint == "iam.api.cloud.yandex.net:443"
    elif row == "anonymous":
        assert isinstance(credentials, yta.AnonymousCredentials)
    elif row == "metadata":
        assert isinstance(credentials, yta.MetadataUrlCredentials)
        assert credentials.metadata_url == (
            "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token"
        )
    elif row == "access_token":
        assert isinstance(credentials, yta.AccessTokenCredentials)
    elif row == "oauth2":
        assert isinstance(credentials, yta.Oauth2TokenExchangeCredentials)
        assert credentials.token_endpoint == "http://127.0.0.1:1/token"
    elif row in ("user", "static_user"):
        assert isinstance(credentials, yta.StaticCredentials)
        assert credentials.user == {"user": "alice", "static_user": "bob"}[row]
        assert credentials._password == f"{credentials.user}-password"
    else:
        raise AssertionError(row)


ROWS = ["key_file", "key_content", "anonymous", "metadata", "access_token", "oauth2", "user", "static_user"]


@pytest.mark.parametrize("row", ROWS)
async def test_each_row_wins_over_the_rows_below_it(row: str, files: dict[str, str]) -> None:
    env = _env_from(files, row)
    credentials = yta.credentials_from_env(env)
    _check(row, credentials)
    async with yta.Driver.from_env("grpc://127.0.0.1:1", "/local", environ=env, discovery=False) as driver:
        _check(row, driver.credentials)


async def test_access_token_is_sent_as_it_is() -> None:
    env = {"YDB_ACCESS_TOKEN_CREDENTIALS": "token-from-env"}
    assert await yta.credentials_from_env(env).auth_token() == "token-from-env"


def test_nothing_set_means_the_metadata_service_or_the_given_fallback() -> None:
    credentials = yta.credentials_from_env({})
    assert isinstance(credentials, yta.MetadataUrlCredentials)
    fallback = yta.AnonymousCredentials()
    assert yta.credentials_from_env({}, fallback=fallback) is fallback


@pytest.mark.parametrize(
    "env",
    [
        {"YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS": "", "YDB_ANONYMOUS_CREDENTIALS": "1"},
        {"YDB_ACCESS_TOKEN_CREDENTIALS": "", "YDB_ANONYMOUS_CREDENTIALS": "1"},
        {"YDB_METADATA_CREDENTIALS": "true", "YDB_ANONYMOUS_CREDENTIALS": "1"},
        {"YDB_ANONYMOUS_CREDENTIALS": "0", "YDB_METADATA_CREDENTIALS": "yes", "YDB_USER": "", "YDB_PASSWORD": ""},
    ],
    ids=["empty key file", "empty token", "flag not 1", "all unset"],
)
def test_empty_values_and_flags_other_than_1_count_as_unset(env: dict[str, str]) -> None:
    credentials = yta.credentials_from_env(env, fallback=yta.AnonymousCredentials())
    assert isinstance(credentials, yta.AnonymousCredentials)


def test_user_names_take_their_own_passwords_and_an_absent_password_is_empty() -> None:
    credentials = yta.credentials_from_env({"YDB_USER": "alice", "YDB_STATIC_CREDENTIALS_PASSWORD": "not-alices"})
    assert isinstance(credentials, yta.StaticCredentials)
    assert credentials._password == ""


@pytest.mark.parametrize("password", ["YDB_PASSWORD", "YDB_STATIC_CREDENTIALS_PASSWORD"])
def test_a_password_without_a_user_is_refused(password: str) -> None:
    with pytest.raises(yta.InvalidArgumentError, match=f"{password} is set without"):
        yta.credentials_from_env({password: "secret"})


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS", "/nonexistent/sa.json", "cannot read"),
        ("YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS", "{not json", "not valid JSON"),
        ("YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS", '{"id": "k"}', "has no service_account_id, private_key"),
        ("YDB_OAUTH2_KEY_FILE", "/nonexistent/oauth2.json", "cannot read"),
        ("YDB_ACCESS_TOKEN_CREDENTIALS", "token\n", "a gRPC header cannot carry"),
    ],
)
def test_an_unusable_value_names_its_variable(variable: str, value: str, message: str) -> None:
    with pytest.raises(yta.CredentialsError if "gRPC" in message else yta.InvalidArgumentError) as failure:
        yta.credentials_from_env({variable: value})
    assert message in str(failure.value)
    if not isinstance(failure.value, yta.CredentialsError):
        assert str(failure.value).startswith(f"{variable}: ")


# --- Driver.from_env: endpoint, database, TLS ----------------------------------------------------


@pytest.mark.parametrize(
    ("env", "endpoint", "database"),
    [
        ({"YDB_CONNECTION_STRING": "grpc://db.example:2136/?database=/ru/cloud/db"}, "grpc://db.example:2136",
         "/ru/cloud/db"),
        ({"YDB_CONNECTION_STRING": "grpc://db.example:2136/local", "YDB_DATABASE": "/other"}, "grpc://db.example:2136",
         "/local"),
        ({"YDB_CONNECTION_STRING": "grpc://db.example:2136", "YDB_DATABASE": "/from-env"}, "grpc://db.example:2136",
         "/from-env"),
        ({"YDB_ENDPOINT": "grpc://db.example:2136", "YDB_DATABASE": "/local"}, "grpc://db.example:2136", "/local"),
        ({"YDB_CONNECTION_STRING": "grpc://first:1/?database=/a", "YDB_ENDPOINT": "grpc://second:2",
          "YDB_DATABASE": "/b"}, "grpc://first:1", "/a"),
    ],
    ids=["connection string", "its database wins", "database added", "endpoint and database", "string first"],
)
async def test_endpoint_and_database_from_the_environment(env: dict[str, str], endpoint: str, database: str) -> None:
    env = {**env, "YDB_ANONYMOUS_CREDENTIALS": "1"}
    async with yta.Driver.from_env(environ=env, discovery=False) as driver:
        assert (driver.endpoint, driver.database) == (endpoint, database)
    # What is passed wins over the environment.
    driver = yta.Driver.from_env("grpc://given:3", "/given", yta.AccessTokenCredentials("given"), environ=env)
    assert (driver.endpoint, driver.database) == ("grpc://given:3", "/given")
    assert isinstance(driver.credentials, yta.AccessTokenCredentials)


def test_without_an_endpoint_the_error_names_the_variables() -> None:
    with pytest.raises(yta.InvalidArgumentError, match="YDB_CONNECTION_STRING"):
        yta.Driver.from_env(environ={"YDB_DATABASE": "/local"})


async def test_a_service_account_configured_entirely_by_the_environment() -> None:
    """The key's ``endpoint`` field (a Go SDK convention) points it at the local IAM service."""
    async with IamTokenService() as iam, LocalTopicServer(token_services=[iam]) as server:
        key = dict(iam.create_key("sa-env"), endpoint=iam.endpoint)
        env = {
            "YDB_CONNECTION_STRING": server.connection_string,
            "YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS": json.dumps(key),
        }
        async with yta.Driver.from_env(environ=env) as driver:
            await driver.topic.create_topic("from-env")
            async with driver.topic.writer("from-env", producer_id="p") as writer:
                await writer.write_with_ack(b"configured by the environment")
        assert iam.tokens_issued == 1
        assert [m.data for m in server.storage.read("from-env", 0)] == [b"configured by the environment"]


@pytest.fixture(scope="module")
def pki() -> tuple[CertificateAuthority, bytes, bytes]:
    """A CA, and a server certificate and key for 127.0.0.1 it issued."""
    ca = CertificateAuthority()
    server = ca.issue("localhost", server=True)
    return ca, server.cert, server.key


@pytest.mark.parametrize("layout", ["separate", "one file", "encrypted key", "pkcs12"])
async def test_mutual_tls_configured_by_the_environment(
    layout: str, pki: tuple[CertificateAuthority, bytes, bytes], tmp_path: Path
) -> None:
    """YDB CLI's variables: YDB_CA_FILE (or YDB_SSL_ROOT_CERTIFICATES_FILE), YDB_CLIENT_CERT_FILE
    (PEM or PKCS#12), YDB_CLIENT_CERT_KEY_FILE, YDB_CLIENT_CERT_KEY_PASSWORD[_FILE]."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509 import load_pem_x509_certificate

    ca, server_cert, server_key = pki
    client = ca.issue("env-client", server=False)
    (tmp_path / "ca.pem").write_bytes(ca.cert)
    env = {"YDB_CA_FILE": str(tmp_path / "ca.pem"), "YDB_ANONYMOUS_CREDENTIALS": "1"}
    cert_file, key_file = tmp_path / "client.pem", tmp_path / "client.key"
    if layout == "separate":
        cert_file.write_bytes(client.cert)
        key_file.write_bytes(client.key)
        env |= {"YDB_CLIENT_CERT_FILE": str(cert_file), "YDB_CLIENT_CERT_KEY_FILE": str(key_file)}
    elif layout == "one file":
        cert_file.write_bytes(client.key + client.cert)
        env |= {"YDB_CLIENT_CERT_FILE": str(cert_file)}
    else:
        key = serialization.load_pem_private_key(client.key, None)
        if layout == "encrypted key":
            cert_file.write_bytes(client.cert)
            key_file.write_bytes(private_pem(key, b"key-password"))  # type: ignore[arg-type]
            (tmp_path / "password").write_text("key-password\n")
            env |= {"YDB_CLIENT_CERT_FILE": str(cert_file), "YDB_CLIENT_CERT_KEY_FILE": str(key_file),
                    "YDB_CLIENT_CERT_KEY_PASSWORD_FILE": str(tmp_path / "password")}
        else:
            bundle = pkcs12.serialize_key_and_certificates(
                b"client", key, load_pem_x509_certificate(client.cert), None,  # type: ignore[arg-type]
                serialization.BestAvailableEncryption(b"bundle-password"),
            )
            cert_file.write_bytes(bundle)
            env |= {"YDB_CLIENT_CERT_FILE": str(cert_file), "YDB_CLIENT_CERT_KEY_PASSWORD": "bundle-password"}
    async with LocalTopicServer(tls=(server_key, server_cert), client_ca=ca.cert, require_client_cert=True) as server:
        env["YDB_CONNECTION_STRING"] = server.connection_string
        async with yta.Driver.from_env(environ=env) as driver:
            await driver.wait_ready(timeout=10)
            await driver.topic.create_topic("mtls-env")


def test_tls_roots_variables_in_their_order(tmp_path: Path) -> None:
    (tmp_path / "a.pem").write_bytes(b"-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n")
    (tmp_path / "b.pem").write_bytes(b"-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\n")
    env = {"YDB_CONNECTION_STRING": "grpcs://db.example:2135/?database=/db", "YDB_ANONYMOUS_CREDENTIALS": "1",
           "YDB_SSL_ROOT_CERTIFICATES_FILE": str(tmp_path / "a.pem"), "YDB_CA_FILE": str(tmp_path / "b.pem")}
    roots = yta.Driver.from_env(environ=env).transport._root_certificates
    assert roots is not None and b"\nA\n" in roots
    del env["YDB_SSL_ROOT_CERTIFICATES_FILE"]
    assert b"\nB\n" in (yta.Driver.from_env(environ=env).transport._root_certificates or b"")
    env["YDB_CA_FILE"] = str(tmp_path / "missing.pem")
    with pytest.raises(yta.InvalidArgumentError, match="YDB_CA_FILE: cannot read"):
        yta.Driver.from_env(environ=env)


def test_a_client_certificate_needs_tls_and_its_key(
    tmp_path: Path, pki: tuple[CertificateAuthority, bytes, bytes]
) -> None:
    ca, _, _ = pki
    client = ca.issue("c", server=False)
    (tmp_path / "c.pem").write_bytes(client.cert)
    env = {"YDB_CONNECTION_STRING": "grpc://db.example:2136/?database=/db", "YDB_ANONYMOUS_CREDENTIALS": "1",
           "YDB_CLIENT_CERT_FILE": str(tmp_path / "c.pem")}
    with pytest.raises(yta.InvalidArgumentError, match="no private key in it: set YDB_CLIENT_CERT_KEY_FILE"):
        yta.Driver.from_env(environ=env)
    (tmp_path / "c.key").write_bytes(client.key)
    env["YDB_CLIENT_CERT_KEY_FILE"] = str(tmp_path / "c.key")
    with pytest.raises(yta.InvalidArgumentError, match="needs a TLS endpoint"):
        yta.Driver.from_env(environ=env)


def test_the_connection_read_from_the_environment_shows_no_private_key(tmp_path: Path) -> None:
    """``repr`` of what the environment says about the connection (for a log line or a debug
    print) names the certificate, never the client's private key."""
    key = private_pem(rsa_key())
    (tmp_path / "client.key").write_bytes(key)
    (tmp_path / "client.pem").write_bytes(b"-----BEGIN CERTIFICATE-----\nC\n-----END CERTIFICATE-----\n")
    settings = connection_from_env(
        {"YDB_CONNECTION_STRING": "grpcs://db.example:2135/?database=/db",
         "YDB_CLIENT_CERT_FILE": str(tmp_path / "client.pem"), "YDB_CLIENT_CERT_KEY_FILE": str(tmp_path / "client.key")}
    )
    assert settings.private_key == key
    shown = repr(settings)
    assert "certificate_chain=" in shown and "PRIVATE KEY" not in shown and "private_key" not in shown
