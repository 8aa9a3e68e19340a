"""Every credentials kind with expiring tokens, set up against its loopback token service and a
local topic server that accepts what that service issues."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import ydb_topic_async as yta
from ydb_topic_async.testing import (
    IamTokenService,
    LocalTopicServer,
    MetadataService,
    TokenExchangeService,
    TokenService,
)

from ._pki import ec_key, private_pem, public_pem

ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
SUBJECT_TOKEN = "subject-token-of-the-build-agent"
USER = "alice"
PASSWORD = "wonderland-rabbit-hole"

CLOUD_KINDS = ("service_account", "metadata", "oauth2_fixed", "oauth2_jwt")
"""The kinds that get tokens from a token service of their own."""
KINDS = (*CLOUD_KINDS, "static")


@dataclass
class Setup:
    """A server, credentials for it, and the token service they use (None for static login)."""

    kind: str
    server: LocalTopicServer
    credentials: yta.Credentials
    service: TokenService | None
    secrets: list[str] = field(default_factory=list)
    """Secrets that must never reach a log line (issued tokens are added by ``all_secrets``)."""

    def tokens_issued(self) -> int:
        if self.service is not None:
            return self.service.tokens_issued
        return 0

    def all_secrets(self) -> list[str]:
        found = list(self.secrets)
        if self.service is not None:
            found += list(self.service.issued)
        found += list(self.server.auth._login_tokens)
        if isinstance(self.service, IamTokenService) and self.service.last_jwt:
            found.append(self.service.last_jwt)
        if isinstance(self.service, TokenExchangeService):
            form = self.service.last_form
            found += [token for name in ("subject_token", "actor_token") for token in form.get(name, [])]
        return found


@contextlib.asynccontextmanager
async def setup(kind: str, token_ttl: float, **server_options: object) -> AsyncIterator[Setup]:
    """``kind``'s credentials, token service and a server trusting it; tokens live ``token_ttl`` s."""
    async with contextlib.AsyncExitStack() as stack:
        service: TokenService | None
        secrets: list[str] = []
        if kind == "service_account":
            service = iam = await stack.enter_async_context(IamTokenService(token_ttl=token_ttl))
            key = iam.create_key("sa-writer")
            credentials: yta.Credentials = yta.ServiceAccountCredentials.from_content(
                json.dumps(key), iam_endpoint=iam.endpoint
            )
            secrets += [key["private_key"], *key["private_key"].splitlines()[2:-1]]
        elif kind == "metadata":
            service = metadata = await stack.enter_async_context(MetadataService("sa-vm", token_ttl=token_ttl))
            credentials = yta.MetadataUrlCredentials(metadata.url)
        elif kind == "oauth2_fixed":
            service = exchange = await stack.enter_async_context(
                TokenExchangeService(subject_tokens={SUBJECT_TOKEN: USER}, token_ttl=token_ttl)
            )
            credentials = yta.Oauth2TokenExchangeCredentials(
                exchange.url, yta.FixedTokenSource(SUBJECT_TOKEN, ACCESS_TOKEN_TYPE), scope=["topics"]
            )
            secrets.append(SUBJECT_TOKEN)
        elif kind == "oauth2_jwt":
            signing = ec_key()
            service = exchange = await stack.enter_async_context(
                TokenExchangeService(jwt_keys={"ci-key": public_pem(signing)}, token_ttl=token_ttl)
            )
            private = private_pem(signing).decode()
            credentials = yta.Oauth2TokenExchangeCredentials.from_content(
                {
                    "token-endpoint": exchange.url,
                    "subject-credentials": {
                        "type": "JWT", "alg": "ES256", "private-key": private, "kid": "ci-key",
                        "iss": "ci", "sub": USER, "ttl": "1h",
                    },
                }
            )
            secrets += [private, *private.splitlines()[1:-1]]
        elif kind == "static":
            service = None
            server_options = {"users": {USER: PASSWORD}, "token_ttl": token_ttl, **server_options}
            credentials = yta.StaticCredentials(USER, PASSWORD, refresh_interval=token_ttl * 0.8)
            secrets.append(PASSWORD)
        else:
            raise AssertionError(kind)
        if service is not None:
            server_options.setdefault("token_services", [service])
        server = await stack.enter_async_context(LocalTopicServer(**server_options))  # type: ignore[arg-type]
        yield Setup(kind, server, credentials, service, secrets)
