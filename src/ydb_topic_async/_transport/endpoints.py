"""Where the transport connects and how its channels are made: connection strings, the database,
TLS client certificates, and the gRPC channel arguments (message sizes, keepalive pings, the
reconnect backoff). Everything here is checked when a ``Transport`` is made."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .._balancer import Endpoint
from .._errors import InvalidArgumentError, InvalidEndpointError
from .._limits import MIN_MAX_MESSAGE_SIZE
from .._retry import RetryPolicy
from ..observability.logging import register_secret, sdk_logger

logger = sdk_logger("driver")

DEFAULT_KEEPALIVE_INTERVAL = 10.0
"""Seconds between HTTP/2 keepalive pings on a connection with open calls."""
DEFAULT_KEEPALIVE_TIMEOUT = 10.0
"""Seconds a keepalive ping may go unanswered before the connection counts as dead."""
MIN_SAFE_KEEPALIVE_INTERVAL = 10.0
"""Servers may refuse more frequent pings: gRPC's default server policy answers a client that
pings more often than it allows with GOAWAY "too_many_pings" (YDB's official SDK pings every 10 s)."""
MIN_GRPC_BACKOFF_MS = 100
"""gRPC's floor for its reconnect backoff options: smaller values are raised to it."""


def parse_connection_string(value: str) -> tuple[Endpoint, str | None]:
    """Split ``grpc[s]://host:port/?database=/local`` (or ``grpc://host:port/local``) into parts.

    A bare ``host:port`` means plain ``grpc://``; without a port, 2136 (2135 for ``grpcs``).
    The database is None when the string has none. A malformed string raises
    ``InvalidEndpointError``.
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidEndpointError("endpoint must be a non-empty string like 'grpc://localhost:2136'")
    text = value.strip()
    if "://" not in text:
        text = "grpc://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise InvalidEndpointError(f"malformed endpoint {value!r}: {exc}") from None
    if parts.scheme not in ("grpc", "grpcs"):
        raise InvalidEndpointError(f"unsupported endpoint scheme {parts.scheme!r} in {value!r}: use grpc:// or grpcs://")
    if not parts.hostname:
        raise InvalidEndpointError(f"endpoint {value!r} has no host")
    if port is not None and not 1 <= port <= 65535:
        raise InvalidEndpointError(f"endpoint {value!r} has port {port}: ports are 1-65535")
    secure = parts.scheme == "grpcs"
    database: str | None = None
    query = parse_qs(parts.query)
    if "database" in query:
        database = query["database"][0]
    elif parts.path and parts.path != "/":
        database = parts.path
    return Endpoint(parts.hostname, port or (2135 if secure else 2136), secure), database


def resolve_endpoint(endpoint: str | Endpoint, database: str | None) -> tuple[Endpoint, str]:
    """The endpoint to connect to and the database (given, or from the connection string), checked;
    the database without a trailing slash."""
    if isinstance(endpoint, Endpoint):
        parsed_endpoint, parsed_db = endpoint, None
    else:
        parsed_endpoint, parsed_db = parse_connection_string(endpoint)
    database = database or parsed_db
    if not database:
        raise InvalidArgumentError(
            "database is required: pass database='/local' or use 'grpc://host:port/?database=/local'"
        )
    if not isinstance(database, str) or not database.startswith("/"):
        raise InvalidArgumentError(f"database must be an absolute path starting with '/', got {database!r}")
    return parsed_endpoint, database.rstrip("/") or "/"


def check_tls(endpoint: Endpoint, roots: bytes | None, chain: bytes | None, key: bytes | None) -> None:
    """Root certificates are PEM bytes; a client certificate (mutual TLS) is a PEM chain and its
    PEM private key, over TLS. The key is masked in the SDK's logs from here on."""
    if roots is not None and not isinstance(roots, bytes):
        raise InvalidArgumentError("root_certificates must be PEM bytes")
    for name, value in (("certificate_chain", chain), ("private_key", key)):
        if value is not None and (not isinstance(value, bytes) or b"-----BEGIN" not in value):
            raise InvalidArgumentError(f"{name} must be PEM bytes")
    if (chain is None) != (key is None):
        raise InvalidArgumentError("a client certificate needs both certificate_chain and private_key")
    if chain is not None and not endpoint.secure:
        raise InvalidArgumentError(f"a client certificate needs a TLS endpoint (grpcs://), not {endpoint}")
    if key is not None:
        register_secret(key.decode("ascii", "replace"), pinned=True)


def check_application_name(name: str | None) -> None:
    """The ``x-ydb-application-name`` header's value: printable ASCII (or None: no header)."""
    if name is None:
        return
    if not isinstance(name, str):
        raise InvalidArgumentError(f"application_name must be a string, got {name!r}")
    if not name.isascii() or not name.isprintable():
        raise InvalidArgumentError(f"application_name must be printable ASCII, got {name!r}")


def positive_seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not value > 0:
        raise InvalidArgumentError(f"{what} must be a positive number of seconds, got {value!r}")
    return float(value)


def keepalive_options(interval: float | None, timeout: float) -> dict[str, int]:
    """gRPC channel arguments for HTTP/2 keepalive pings every ``interval`` seconds (None: off)."""
    if interval is None:
        return {}  # gRPC clients send no keepalive pings unless asked to
    return {
        "grpc.keepalive_time_ms": max(1, round(interval * 1000)),
        "grpc.keepalive_timeout_ms": max(1, round(timeout * 1000)),
        # A keepalive ping due while another ping (gRPC's bandwidth probe) is unanswered is not
        # sent; that ping's own timeout (a minute by default) then decides, so it gets the same.
        "grpc.http2.ping_timeout_ms": max(1, round(timeout * 1000)),
        # A stream waiting for acks or data sends nothing for long stretches: ping regardless.
        "grpc.http2.max_pings_without_data": 0,
        # Idle connections need no liveness check: the next call finds out.
        "grpc.keepalive_permit_without_calls": 0,
    }


def reconnect_backoff_options(policy: RetryPolicy) -> dict[str, int]:
    """gRPC channel arguments that make a channel's own reconnect attempts follow ``policy``'s
    backoff for transient failures (gRPC's defaults start at 1 s and grow 1.6 times up to 120 s)."""
    return {
        "grpc.initial_reconnect_backoff_ms": max(MIN_GRPC_BACKOFF_MS, round(policy.fast.base * 1000)),
        "grpc.max_reconnect_backoff_ms": max(MIN_GRPC_BACKOFF_MS, round(policy.fast.cap * 1000)),
    }


def channel_arguments(
    *,
    max_message_size: int,
    keepalive_interval: float | None,
    keepalive_timeout: float,
    retry: RetryPolicy,
    extra: Sequence[tuple[str, Any]] | Mapping[str, Any],
) -> list[tuple[str, Any]]:
    """The gRPC arguments every channel is made with, checked: the transport's own (message
    sizes, keepalive, reconnect backoff) with the user's ``extra`` ones over them."""
    if isinstance(max_message_size, bool) or not isinstance(max_message_size, int):
        raise InvalidArgumentError(f"max_message_size must be an int, got {max_message_size!r}")
    if max_message_size < MIN_MAX_MESSAGE_SIZE:
        raise InvalidArgumentError(f"max_message_size must be at least {MIN_MAX_MESSAGE_SIZE} bytes")
    if keepalive_interval is not None:
        keepalive_interval = positive_seconds(keepalive_interval, "keepalive_interval")
    keepalive_timeout = positive_seconds(keepalive_timeout, "keepalive_timeout")
    if not isinstance(retry, RetryPolicy):
        raise InvalidArgumentError(f"retry must be a RetryPolicy, got {retry!r}")
    if keepalive_interval is not None and keepalive_interval < MIN_SAFE_KEEPALIVE_INTERVAL:
        logger.warning(
            "keepalive_interval=%ss is below %ss: a real YDB cluster may refuse pings this frequent"
            " (GOAWAY \"too_many_pings\") and close the connection",
            keepalive_interval, MIN_SAFE_KEEPALIVE_INTERVAL,
        )
    options: dict[str, Any] = {
        "grpc.max_send_message_length": max_message_size,
        "grpc.max_receive_message_length": max_message_size,
        # Connections belong to this transport alone: gRPC would otherwise share them
        # process-wide, and closing one driver could break, or keep alive, another's calls.
        "grpc.use_local_subchannel_pool": 1,
        **keepalive_options(keepalive_interval, keepalive_timeout),
        **reconnect_backoff_options(retry),
    }
    options.update(dict(extra))
    return list(options.items())
