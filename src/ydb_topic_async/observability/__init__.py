"""Observability: structured logging fields, a metrics hook, and optional OpenTelemetry tracing.

- ``MetricsRecorder`` / ``NoopMetrics``: pass a recorder as ``Driver(..., metrics=...)`` to
  feed Prometheus, StatsD or anything else from every writer and reader of the driver.
- ``OpenTelemetryMetrics``: a ready recorder, ``Driver(..., metrics=OpenTelemetryMetrics())``,
  that records them as OpenTelemetry instruments (messaging semantic conventions).
- ``OpenTelemetryTracing``: ``Driver(..., tracing=True)`` (or an instance) traces writes and
  reads, with the trace context carried in message metadata.
- Log records of writers and readers carry ``ydb_*`` extra fields (see ``.logging``), and
  credentials are masked in every SDK log record.
"""

from .logging import REDACTED, register_secret, sdk_logger
from .metrics import MetricsRecorder, NoopMetrics
from .otel_metrics import OpenTelemetryMetrics
from .tracing import OpenTelemetryTracing

__all__ = [
    "REDACTED",
    "MetricsRecorder",
    "NoopMetrics",
    "OpenTelemetryMetrics",
    "OpenTelemetryTracing",
    "register_secret",
    "sdk_logger",
]
