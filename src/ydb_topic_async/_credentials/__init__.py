"""Credentials: where the ``x-ydb-auth-ticket`` header comes from.

- ``base``: the ``Credentials`` protocol, anonymous, a fixed token, a token provider, and how a
  connection asks for a checked token;
- ``refresh``: expiring tokens kept fresh in the background (``TokenCache``), the base of the
  kinds below;
- ``static``: user and password through the cluster's ``AuthService.Login``;
- ``service_account``, ``metadata``, ``oauth2``: managed and enterprise YDB (a service account's
  key, the metadata service, OAuth 2.0 token exchange), on their own small gRPC and HTTP clients
  (never the driver's transport, which sits above);
- ``environ``: all of it, and the connection settings, from environment variables.
"""

from .base import (
    AccessTokenCredentials,
    AnonymousCredentials,
    Credentials,
    Login,
    OwnedCredentials,
    TokenProviderCredentials,
    bind_credentials,
    check_token,
    fetch_token,
    token_expiry,
    unbind_credentials,
)
from .environ import ConnectionSettings, connection_from_env, credentials_from_env
from .metadata import DEFAULT_METADATA_URL, MetadataUrlCredentials
from .oauth2 import FixedTokenSource, JwtTokenSource, Oauth2TokenExchangeCredentials, TokenSource
from .refresh import RefreshingCredentials
from .service_account import DEFAULT_IAM_ENDPOINT, ServiceAccountCredentials
from .static import StaticCredentials

__all__ = [
    "DEFAULT_IAM_ENDPOINT",
    "DEFAULT_METADATA_URL",
    "AccessTokenCredentials",
    "AnonymousCredentials",
    "ConnectionSettings",
    "Credentials",
    "FixedTokenSource",
    "JwtTokenSource",
    "Login",
    "MetadataUrlCredentials",
    "Oauth2TokenExchangeCredentials",
    "OwnedCredentials",
    "RefreshingCredentials",
    "ServiceAccountCredentials",
    "StaticCredentials",
    "TokenProviderCredentials",
    "TokenSource",
    "bind_credentials",
    "check_token",
    "connection_from_env",
    "credentials_from_env",
    "fetch_token",
    "token_expiry",
    "unbind_credentials",
]
