"""What publishing carries: ``YdbPublishCommand`` (one message or a batch, with its YDB options)
and ``YdbResponse`` (a handler's reply, or one message of a batch, with its own key and headers)."""

from __future__ import annotations

from typing import Any

from faststream.response import PublishCommand, Response
from faststream.response.publish_type import PublishType
from faststream.response.response import BatchPublishCommand


class YdbResponse(Response):
    """A message with YDB options: return it from a handler to reply with a key, headers or a
    sequence number, or pass it to ``publish_batch`` to give one message of a batch its own.

    Parameters:
        body: The message body (encoded as FastStream encodes any body).
        headers: Headers, sent as the message's metadata items.
        correlation_id: The correlation id (the request's by default for a reply).
        key: The message's key: the SDK's partitioner places it, and it travels in the ``__key``
            metadata item.
        seq_no: The message's sequence number, for exactly-once publishing with a producer id.
    """

    def __init__(
        self,
        body: Any,
        *,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        key: bytes | str | None = None,
        seq_no: int | None = None,
    ) -> None:
        super().__init__(body=body, headers=headers, correlation_id=correlation_id)
        self.key = key
        self.seq_no = seq_no

    def get_publish_key(self) -> bytes | str | None:
        return self.key

    def as_publish_command(self) -> YdbPublishCommand:
        return YdbPublishCommand(
            self.body,
            headers=self.headers,
            correlation_id=self.correlation_id,
            _publish_type=PublishType.PUBLISH,
            topic="",
            key=self.key,
            seq_no=self.seq_no,
        )


YdbPublishMessage = YdbResponse
"""``YdbResponse`` under the name that reads better in ``publish_batch(YdbPublishMessage(...), ...)``."""


class YdbPublishCommand(BatchPublishCommand):
    """One publish (a message, or a batch of them) on its way through the middlewares to the writers."""

    def __init__(
        self,
        message: Any,
        /,
        *messages: Any,
        topic: str,
        _publish_type: PublishType,
        key: bytes | str | None = None,
        partition: int | None = None,
        producer_id: str | None = None,
        seq_no: int | None = None,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str = "",
        no_confirm: bool = False,
        timeout: float = 0.5,
    ) -> None:
        super().__init__(
            message,
            *messages,
            destination=topic,
            reply_to=reply_to,
            correlation_id=correlation_id,
            headers=headers,
            _publish_type=_publish_type,
        )
        self.key = key
        self.partition = partition
        self.producer_id = producer_id
        self.seq_no = seq_no
        self.no_confirm = no_confirm
        self.timeout = timeout

    @classmethod
    def from_cmd(cls, cmd: PublishCommand | YdbPublishCommand, *, batch: bool = False) -> YdbPublishCommand:
        if isinstance(cmd, YdbPublishCommand):
            return cmd
        body, extra = cls._parse_bodies(cmd.body, batch=batch)
        return cls(
            body,
            *extra,
            topic=cmd.destination,
            correlation_id=cmd.correlation_id,
            headers=cmd.headers,
            reply_to=cmd.reply_to,
            _publish_type=cmd.publish_type,
        )

    def headers_to_publish(self) -> dict[str, Any]:
        """The headers every message of this publish carries: the correlation id, the reply-to
        topic and the given headers."""
        headers: dict[str, Any] = {}
        if self.correlation_id:
            headers["correlation_id"] = self.correlation_id
        if self.reply_to:
            headers["reply_to"] = self.reply_to
        return headers | self.headers
