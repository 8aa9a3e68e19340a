"""Metadata-service credentials: the token of the service account attached to the compute
instance (or serverless function) the program runs on."""

from __future__ import annotations

from .._errors import InvalidArgumentError
from ._cloud import REJECTING_HTTP_STATUSES, http_request, httpx_module
from .refresh import FetchFailed, IssuedToken, RefreshingCredentials

DEFAULT_METADATA_URL = "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token"
METADATA_REQUEST_TIMEOUT = 5.0
"""Bounds one request to the metadata service (it is on the instance's own link)."""

_FEATURE = "MetadataUrlCredentials"


class MetadataUrlCredentials(RefreshingCredentials):
    """The token of the instance's service account, from the metadata service.

    Each request is a ``GET`` of ``metadata_url`` with the ``Metadata-Flavor: Google`` header;
    the answer's ``access_token`` is used as it is, for its ``expires_in`` seconds, and refreshed
    in the background at half its lifetime.

    Parameters:
        metadata_url: The token URL (default: the link-local metadata service,
            ``http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token``).

    Needs the ``cloud`` extra (httpx): ``MissingDependencyError`` otherwise.
    """

    def __init__(self, metadata_url: str | None = None) -> None:
        url = metadata_url or DEFAULT_METADATA_URL
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidArgumentError(f"metadata_url must be an http:// or https:// URL, got {metadata_url!r}")
        httpx_module(_FEATURE)
        self.metadata_url = url
        super().__init__()

    async def _fetch(self) -> IssuedToken:
        answer = await http_request(
            "GET",
            self.metadata_url,
            feature=_FEATURE,
            timeout=METADATA_REQUEST_TIMEOUT,
            headers={"Metadata-Flavor": "Google"},
            trust_env=False,  # the link-local service is never behind a proxy
        )
        if answer.status != 200:
            hint = " (is a service account attached to this instance?)" if answer.status == 404 else ""
            raise FetchFailed(
                f"the metadata service at {self.metadata_url} answered HTTP {answer.status}{hint}",
                rejected=answer.status in REJECTING_HTTP_STATUSES,
            )
        # Some metadata services answer text/plain: the body is parsed whatever its type.
        body = answer.json_object()
        token = body.get("access_token")
        expires_in = body.get("expires_in")
        if not isinstance(token, str) or not token:
            raise FetchFailed(f"the metadata service at {self.metadata_url} answered without an access_token")
        if isinstance(expires_in, bool) or not isinstance(expires_in, (int, float)):
            raise FetchFailed(f"the metadata service at {self.metadata_url} answered without a numeric expires_in")
        return IssuedToken(token, float(expires_in))

    def __repr__(self) -> str:
        return f"MetadataUrlCredentials(metadata_url={self.metadata_url!r})"
