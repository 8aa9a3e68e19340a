"""The transport: how the SDK reaches one database, one concern per module.

- ``endpoints``: connection strings, TLS material and the gRPC channel arguments, checked;
- ``channels``: one channel per endpoint, which one each new call takes, what a failed call says
  about its node, and closing them all;
- ``unary``: one total deadline across a unary call's attempts, and parsing YDB's answers;
- ``discovery``: the cluster's nodes, kept current in the background for the balancer;
- ``transport``: the ``Transport`` a ``Driver`` owns, which puts them together with the request
  headers and auth, and opens streams.

Which endpoint each new call or stream takes is the ``Balancer``'s choice (``_balancer``): the
transport tells it what discovery found and which calls failed with transport errors, and
rediscovers at once when it reports that most nodes are failing.
"""

from .channels import Route
from .endpoints import (
    DEFAULT_KEEPALIVE_INTERVAL,
    DEFAULT_KEEPALIVE_TIMEOUT,
    MIN_SAFE_KEEPALIVE_INTERVAL,
    parse_connection_string,
)
from .transport import Transport
from .unary import operation_result, status_result

__all__ = [
    "DEFAULT_KEEPALIVE_INTERVAL",
    "DEFAULT_KEEPALIVE_TIMEOUT",
    "MIN_SAFE_KEEPALIVE_INTERVAL",
    "Route",
    "Transport",
    "operation_result",
    "parse_connection_string",
    "status_result",
]
