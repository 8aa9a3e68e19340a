"""Watching what the SDK's streams send, below the writer and reader but above gRPC."""

from __future__ import annotations

from typing import Any

import pytest

from ydb_topic_async._stream import BidiStream


def record_requests(monkeypatch: pytest.MonkeyPatch, *kinds: str) -> list[Any]:
    """Every request whose ``client_message`` is one of ``kinds`` that a stream sends from now on, in order."""
    sent: list[Any] = []
    real_write = BidiStream.write

    async def recording_write(self: BidiStream[Any, Any], request: Any) -> None:
        if request.WhichOneof("client_message") in kinds:
            sent.append(request)
        await real_write(self, request)

    monkeypatch.setattr(BidiStream, "write", recording_write)
    return sent
