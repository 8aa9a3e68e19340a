"""Credentials and connection settings from environment variables, as YDB's SDKs and tools name them.

Credentials (``credentials_from_env``), the first variable that is set wins (an empty value
counts as unset; the two flags count only when exactly ``1``):

1. ``YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS``: a service account's authorized key file.
2. ``YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS``: the key file's content (JSON), as the Go SDK reads it.
3. ``YDB_ANONYMOUS_CREDENTIALS=1``: no credentials.
4. ``YDB_METADATA_CREDENTIALS=1``: the metadata service.
5. ``YDB_ACCESS_TOKEN_CREDENTIALS``: a token, sent as it is.
6. ``YDB_OAUTH2_KEY_FILE``: an OAuth 2.0 token exchange configuration file.
7. ``YDB_USER`` with ``YDB_PASSWORD`` (the Python SDK's and YDB CLI's names), else
   ``YDB_STATIC_CREDENTIALS_USER`` with ``YDB_STATIC_CREDENTIALS_PASSWORD`` (the Go SDK's):
   user and password (an absent password is empty).
8. Nothing set: the metadata service (YDB's documentation, the Python and Java SDKs), unless
   the caller gives another fallback.

Connection (``connection_from_env``): ``YDB_CONNECTION_STRING``
(``grpcs://host:port/?database=/path``), else ``YDB_ENDPOINT`` with ``YDB_DATABASE``; TLS roots
from ``YDB_SSL_ROOT_CERTIFICATES_FILE`` (Go and C++ SDKs), else ``YDB_CA_FILE`` (YDB CLI); a
client certificate from ``YDB_CLIENT_CERT_FILE`` (PEM, or PKCS#12) with its key in
``YDB_CLIENT_CERT_KEY_FILE`` (or in the certificate file), the key's password in
``YDB_CLIENT_CERT_KEY_PASSWORD`` or the file ``YDB_CLIENT_CERT_KEY_PASSWORD_FILE`` (YDB CLI).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .._errors import InvalidArgumentError, MissingDependencyError
from ._cloud import jwt_module, read_file
from .base import AccessTokenCredentials, AnonymousCredentials, Credentials
from .metadata import MetadataUrlCredentials
from .oauth2 import Oauth2TokenExchangeCredentials
from .service_account import ServiceAccountCredentials
from .static import StaticCredentials

SA_KEY_FILE = "YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS"
SA_KEY = "YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS"
ANONYMOUS = "YDB_ANONYMOUS_CREDENTIALS"
METADATA = "YDB_METADATA_CREDENTIALS"
ACCESS_TOKEN = "YDB_ACCESS_TOKEN_CREDENTIALS"
OAUTH2_KEY_FILE = "YDB_OAUTH2_KEY_FILE"
STATIC_USERS = (("YDB_USER", "YDB_PASSWORD"), ("YDB_STATIC_CREDENTIALS_USER", "YDB_STATIC_CREDENTIALS_PASSWORD"))

CONNECTION_STRING = "YDB_CONNECTION_STRING"
ENDPOINT = "YDB_ENDPOINT"
DATABASE = "YDB_DATABASE"
ROOT_CERTIFICATES_FILES = ("YDB_SSL_ROOT_CERTIFICATES_FILE", "YDB_CA_FILE")
CLIENT_CERT_FILE = "YDB_CLIENT_CERT_FILE"
CLIENT_CERT_KEY_FILE = "YDB_CLIENT_CERT_KEY_FILE"
CLIENT_CERT_KEY_PASSWORD = "YDB_CLIENT_CERT_KEY_PASSWORD"
CLIENT_CERT_KEY_PASSWORD_FILE = "YDB_CLIENT_CERT_KEY_PASSWORD_FILE"


def _value(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value else None


def credentials_from_env(
    environ: Mapping[str, str] | None = None, *, fallback: Credentials | None = None
) -> Credentials:
    """The credentials the environment describes (``os.environ``, or ``environ``).

    The variables and their order are those of YDB's SDKs (see the table in the
    authentication guide): the service account key file, the key's content,
    ``YDB_ANONYMOUS_CREDENTIALS=1``, ``YDB_METADATA_CREDENTIALS=1``,
    ``YDB_ACCESS_TOKEN_CREDENTIALS``, ``YDB_OAUTH2_KEY_FILE``, then user and password. With none
    set: ``fallback`` when given, else the metadata service (as YDB's SDKs do; on a machine
    without one, calls fail with ``TokenRefreshError``: set ``YDB_ANONYMOUS_CREDENTIALS=1`` to
    connect without credentials).

    A variable naming a file that cannot be read, or holding something unusable, raises
    ``InvalidArgumentError`` naming the variable.
    """
    env = os.environ if environ is None else environ
    if key_file := _value(env, SA_KEY_FILE):
        return _named(SA_KEY_FILE, lambda: ServiceAccountCredentials.from_file(key_file))
    if content := _value(env, SA_KEY):
        return _named(SA_KEY, lambda: ServiceAccountCredentials.from_content(content))
    if env.get(ANONYMOUS) == "1":
        return AnonymousCredentials()
    if env.get(METADATA) == "1":
        return _named(METADATA, MetadataUrlCredentials)
    if token := _value(env, ACCESS_TOKEN):
        return _named(ACCESS_TOKEN, lambda: AccessTokenCredentials(token))
    if config_file := _value(env, OAUTH2_KEY_FILE):
        return _named(OAUTH2_KEY_FILE, lambda: Oauth2TokenExchangeCredentials.from_file(config_file))
    for user_variable, password_variable in STATIC_USERS:
        if user := _value(env, user_variable):
            return StaticCredentials(user, env.get(password_variable, ""))
    for user_variable, password_variable in STATIC_USERS:
        if _value(env, password_variable):
            raise InvalidArgumentError(f"{password_variable} is set without {user_variable}: set the user name too")
    if fallback is not None:
        return fallback
    try:
        return MetadataUrlCredentials()
    except MissingDependencyError as exc:
        raise MissingDependencyError(
            "no credentials variable is set, so the metadata service is used (as YDB's SDKs do), and it"
            f" {str(exc).partition(' ')[2]}; or set {ANONYMOUS}=1 to connect without credentials"
        ) from exc


def _named(variable: str, make: Callable[[], Credentials]) -> Credentials:
    """``make()``, its ``InvalidArgumentError`` prefixed with the variable it came from."""
    try:
        made = make()
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{variable}: {exc}") from None
    return made


@dataclass(frozen=True)
class ConnectionSettings:
    """What the environment says about the connection (None where it says nothing)."""

    endpoint: str | None = None
    database: str | None = None
    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = field(default=None, repr=False)  # a secret: never in a repr or log line


def connection_from_env(environ: Mapping[str, str] | None = None) -> ConnectionSettings:
    """The endpoint, database, TLS roots and client certificate the environment names
    (``os.environ``, or ``environ``); see the module's docstring for the variables.

    A file that cannot be read raises ``InvalidArgumentError`` naming its variable.
    """
    env = os.environ if environ is None else environ
    endpoint = _value(env, CONNECTION_STRING) or _value(env, ENDPOINT)
    roots = None
    for variable in ROOT_CERTIFICATES_FILES:
        if path := _value(env, variable):
            roots = _read(variable, path)
            break
    chain = key = None
    if cert_path := _value(env, CLIENT_CERT_FILE):
        password = _value(env, CLIENT_CERT_KEY_PASSWORD)
        if password is None and (password_path := _value(env, CLIENT_CERT_KEY_PASSWORD_FILE)):
            password = _read(CLIENT_CERT_KEY_PASSWORD_FILE, password_path).decode().strip()
        key_path = _value(env, CLIENT_CERT_KEY_FILE)
        chain, key = client_certificate(
            _read(CLIENT_CERT_FILE, cert_path),
            _read(CLIENT_CERT_KEY_FILE, key_path) if key_path else None,
            password,
        )
    elif _value(env, CLIENT_CERT_KEY_FILE):
        raise InvalidArgumentError(f"{CLIENT_CERT_KEY_FILE} is set without {CLIENT_CERT_FILE}")
    return ConnectionSettings(endpoint, _value(env, DATABASE), roots, chain, key)


def _read(variable: str, path: str) -> bytes:
    try:
        return read_file(path, "the file")
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{variable}: {exc}") from None


def client_certificate(cert: bytes, key: bytes | None, password: str | None) -> tuple[bytes, bytes]:
    """``(PEM certificate chain, PEM private key)`` for gRPC from what YDB's CLI accepts: a PEM
    certificate chain with its key (in ``key``, or in the same PEM), the key possibly encrypted
    with ``password``; or a PKCS#12 bundle. Encrypted keys and PKCS#12 need the ``cloud`` extra
    (cryptography) to be decoded."""
    if b"-----BEGIN" not in cert:
        return _from_pkcs12(cert, password)
    if b"CERTIFICATE-----" not in cert:
        raise InvalidArgumentError(f"{CLIENT_CERT_FILE}: no certificate in the PEM file")
    if key is None:
        if b"PRIVATE KEY-----" not in cert:
            raise InvalidArgumentError(f"{CLIENT_CERT_FILE}: no private key in it: set {CLIENT_CERT_KEY_FILE}")
        key = cert
    if b"PRIVATE KEY-----" not in key:
        raise InvalidArgumentError(f"{CLIENT_CERT_KEY_FILE}: no PEM private key in it")
    if b"ENCRYPTED" in key or password is not None:
        key = _decrypted(key, password)
    return _pem_blocks(cert, b"CERTIFICATE"), _pem_blocks(key, b"PRIVATE KEY")


_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)


def _pem_blocks(data: bytes, kind: bytes) -> bytes:
    """The PEM blocks of ``data`` whose label ends with ``kind`` (keys and certificates may
    share a file; gRPC wants each on its own)."""
    return b"".join(m[0] + b"\n" for m in _PEM_BLOCK.finditer(data) if m[1].endswith(kind))


def _decrypted(key: bytes, password: str | None) -> bytes:
    feature = "an encrypted client certificate key"
    jwt_module(feature)  # cryptography is part of the cloud extra
    from cryptography.hazmat.primitives import serialization

    if password is None:
        raise InvalidArgumentError(
            f"{CLIENT_CERT_KEY_FILE}: the key is encrypted:"
            f" set {CLIENT_CERT_KEY_PASSWORD} or {CLIENT_CERT_KEY_PASSWORD_FILE}"
        )
    try:
        loaded = serialization.load_pem_private_key(_pem_blocks(key, b"PRIVATE KEY"), password=password.encode())
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"{CLIENT_CERT_KEY_FILE}: cannot decrypt the key: {exc}") from None
    return loaded.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _from_pkcs12(bundle: bytes, password: str | None) -> tuple[bytes, bytes]:
    jwt_module("a PKCS#12 client certificate")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        key, cert, extra = pkcs12.load_key_and_certificates(bundle, password.encode() if password else None)
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"{CLIENT_CERT_FILE}: neither PEM nor a readable PKCS#12 bundle: {exc}") from None
    if key is None or cert is None:
        raise InvalidArgumentError(f"{CLIENT_CERT_FILE}: the PKCS#12 bundle needs a certificate and its private key")
    chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *extra])
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return chain, pem_key
