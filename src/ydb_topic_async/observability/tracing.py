"""Optional OpenTelemetry tracing: producer spans for writes, consumer spans linked to them for reads.

    from ydb_topic_async import Driver, OpenTelemetryTracing

    async with Driver(endpoint, database, tracing=OpenTelemetryTracing()) as driver:  # or tracing=True
        ...

With tracing on, every message a writer accepts gets a ``PRODUCER`` span ("write <topic>") that
ends when the server acknowledges the message (with its partition, seq_no and offset) or when
the write fails. The span's W3C trace context (``traceparent``, ``tracestate``) travels in the
message's metadata items, so any reader, in any language, can continue the trace. A reader
with tracing on starts a ``CONSUMER`` span ("receive <topic>") for each message, or each batch,
it hands out, linked to the producer spans of the messages that carry a context.

Needs ``opentelemetry-api``, the ``otel`` extra (``pip install -e ".[otel]"`` in a clone of the
repository; ``pip install 'ydb-topic-async[otel]'`` once the package is published); without it
the package imports fine and only enabling tracing raises ``MissingDependencyError``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._errors import InvalidArgumentError
from .._limits import MAX_METADATA_BYTES, MAX_METADATA_ITEMS, wire_size
from ..extras import install_hint, missing_dependency

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Span, TracerProvider

INSTALL_HINT = install_hint("otel")
MESSAGING_SYSTEM = "ydb"
_TRACER_NAME = "ydb_topic_async"
_WRITE_STATUS = {"Skipped": "skipped", "WrittenInTx": "written_in_tx"}
"""The span attribute for acknowledgements other than a plain ``Written``."""
CONTEXT_SKIPPED_EVENT = "ydb.trace_context_skipped"
"""The producer span's event when the message had no room left in its metadata for the context."""


class OutgoingMessage(Protocol):
    """What tracing needs of a message a writer accepted (a writer's pending message is one)."""

    data_len: int
    """The payload's size."""
    metadata: list[tuple[str, bytes]] | None
    """The message's metadata items; tracing appends the trace context to them."""
    size: int
    """The bytes the message counts against the writer's buffer; they grow with the context."""


class WriteAck(Protocol):
    """What tracing reads of a write's acknowledgement (``Written``, ``Skipped``, ``WrittenInTx``;
    the offset only where there is one)."""

    @property
    def partition_id(self) -> int: ...

    @property
    def seq_no(self) -> int: ...


class ReceivedMessage(Protocol):
    """What tracing reads of a message a reader handed out (a ``TopicMessage`` is one)."""

    @property
    def data(self) -> bytes: ...

    @property
    def offset(self) -> int: ...

    @property
    def seq_no(self) -> int: ...

    @property
    def producer_id(self) -> str: ...

    @property
    def topic_path(self) -> str: ...

    @property
    def partition_id(self) -> int: ...

    @property
    def metadata_items(self) -> Mapping[str, bytes]: ...


_Ack = TypeVar("_Ack", bound=WriteAck)


class OpenTelemetryTracing:
    """Traces writes and reads with OpenTelemetry; pass it as ``Driver(..., tracing=...)``.

    ``tracer_provider`` defaults to the global one; ``propagator`` (what writes the context into
    message metadata and reads it back) defaults to W3C Trace Context (``traceparent`` and
    ``tracestate``). Raises ``MissingDependencyError`` when ``opentelemetry-api`` is not installed.
    """

    def __init__(
        self, tracer_provider: TracerProvider | None = None, propagator: TextMapPropagator | None = None
    ) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError as exc:
            raise missing_dependency(exc, "tracing", "the OpenTelemetry API", "otel") from exc
        from .._version import __version__

        self._trace = trace
        self._tracer = trace.get_tracer(_TRACER_NAME, __version__, tracer_provider=tracer_provider)
        self._propagator: TextMapPropagator = propagator or TraceContextTextMapPropagator()
        self._fields = frozenset(self._propagator.fields)

    # --- writing -------------------------------------------------------------------------------
    #
    # The writer calls these with the messages it has just validated and accepted, before they
    # join its buffer: spans start, the context goes into each message's metadata, and each span
    # ends with its message's acknowledgement.

    def start_writes(self, topic: str, producer_id: str, entries: Sequence[OutgoingMessage], room: int) -> list[Span]:
        """Start a producer span per message and put its context in the message's metadata,
        unless the message carries a context of its own or has no room left for one (metadata
        limits, or ``room``: the most a message may take in a request)."""
        spans = []
        for entry in entries:
            span = self._tracer.start_span(
                f"write {topic}",
                kind=self._trace.SpanKind.PRODUCER,
                attributes={
                    "messaging.system": MESSAGING_SYSTEM,
                    "messaging.operation.type": "send",
                    "messaging.operation.name": "write",
                    "messaging.destination.name": topic,
                    "messaging.ydb.producer_id": producer_id,
                    "messaging.message.body.size": entry.data_len,
                },
            )
            spans.append(span)
            self._inject(entry, span, room)
        return spans

    def _inject(self, entry: OutgoingMessage, span: Span, room: int) -> None:
        pairs = entry.metadata or []
        if any(key in self._fields for key, _ in pairs):
            return  # the caller propagates a context of its own: keep it
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        if not carrier:
            return
        added = [(key, value.encode()) for key, value in carrier.items()]
        meta_bytes = entry.size - entry.data_len
        used = sum(len(key.encode()) + len(value) for key, value in pairs)  # as YDB counts: UTF-8 bytes
        extra_bytes = sum(len(key) + len(value) for key, value in added)
        items = len(pairs) + len(added)
        if (
            used + extra_bytes > MAX_METADATA_BYTES
            or items > MAX_METADATA_ITEMS
            or wire_size(entry.data_len, meta_bytes + extra_bytes, items) > room
        ):
            # The message is valid as it is: it goes without the context rather than failing.
            span.add_event(
                CONTEXT_SKIPPED_EVENT,
                {"reason": f"the message metadata leaves no room for the trace context ({used} bytes"
                 f" and {len(pairs)} items used of {MAX_METADATA_BYTES} and {MAX_METADATA_ITEMS})"},
            )
            return
        entry.metadata = [*pairs, *added]
        entry.size += extra_bytes

    def end_writes_on_ack(self, spans: Sequence[Span], futures: Sequence[asyncio.Future[_Ack]]) -> None:
        """End each span when its message's acknowledgement (or failure) arrives."""
        for future, span in zip(futures, spans, strict=True):
            future.add_done_callback(functools.partial(self._on_ack, span))

    def fail_writes(self, spans: Sequence[Span], error: BaseException) -> None:
        """End the spans of messages that were not accepted after all (no buffer space in time,
        a cancelled call)."""
        for span in spans:
            _fail_span(self._trace, span, error)

    def _on_ack(self, span: Span, future: asyncio.Future[_Ack]) -> None:
        if future.cancelled():
            _fail_span(self._trace, span, asyncio.CancelledError())
            return
        error = future.exception()
        if error is not None:
            _fail_span(self._trace, span, error)
            return
        result = future.result()
        span.set_attribute("messaging.destination.partition.id", str(result.partition_id))
        span.set_attribute("messaging.message.id", str(result.seq_no))
        span.set_attribute("messaging.ydb.seq_no", result.seq_no)
        offset = getattr(result, "offset", None)
        if offset is not None:
            span.set_attribute("messaging.ydb.offset", offset)
        status = _WRITE_STATUS.get(type(result).__name__)
        if status is not None:
            span.set_attribute("messaging.ydb.write_status", status)
        span.end()

    # --- reading -------------------------------------------------------------------------------

    def extract_context(self, message: ReceivedMessage) -> Context:
        """The trace context a message carries (an empty context when it carries none).

        Use it to parent or link the spans of your own processing of the message.
        """
        carrier = {key: value.decode("latin-1") for key, value in message.metadata_items.items() if key in self._fields}
        return self._propagator.extract(carrier)

    def on_receive(self, consumer: str | None, messages: Sequence[ReceivedMessage]) -> None:
        """Record a consumer span for messages handed out together (one partition session)."""
        if not messages:
            return
        links = []
        for message in messages:
            context = self._trace.get_current_span(self.extract_context(message)).get_span_context()
            if context.is_valid:
                links.append(self._trace.Link(context))
        first = messages[0]
        topic = first.topic_path
        attributes: dict[str, Any] = {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.operation.type": "receive",
            "messaging.operation.name": "receive",
            "messaging.destination.name": topic,
            "messaging.destination.partition.id": str(first.partition_id),
            "messaging.consumer.group.name": consumer or "",
        }
        if len(messages) == 1:
            attributes["messaging.message.id"] = str(first.seq_no)
            attributes["messaging.ydb.offset"] = first.offset
            attributes["messaging.ydb.producer_id"] = first.producer_id
            attributes["messaging.message.body.size"] = len(first.data)
        else:
            attributes["messaging.batch.message_count"] = len(messages)
        span = self._tracer.start_span(
            f"receive {topic}", kind=self._trace.SpanKind.CONSUMER, links=links, attributes=attributes
        )
        span.end()


def _fail_span(trace: Any, span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_status(trace.Status(trace.StatusCode.ERROR, str(error) or type(error).__name__))
    span.end()


def resolve_tracing(tracing: bool | OpenTelemetryTracing | None) -> OpenTelemetryTracing | None:
    """The tracing a driver uses for ``Driver(tracing=...)``: off, the default OpenTelemetry, or the given one."""
    if tracing is None or tracing is False:
        return None
    if tracing is True:
        return OpenTelemetryTracing()
    if isinstance(tracing, OpenTelemetryTracing):
        return tracing
    raise InvalidArgumentError(f"tracing must be a bool or an OpenTelemetryTracing, not {type(tracing).__name__}")


__all__ = ["INSTALL_HINT", "OpenTelemetryTracing"]
