"""Annotations that inject the broker's objects into handlers (``msg: YdbMessage``,
``driver: YdbDriver``), as FastStream's context does."""

from __future__ import annotations

from typing import Annotated

from faststream._internal.context import Context
from faststream.annotations import ContextRepo, Logger
from faststream.params import NoCast

from ._annotations import YdbDriver, YdbMessage
from ._broker import YdbBroker as _YdbBroker

YdbBroker = Annotated[_YdbBroker, Context("broker")]
"""The broker that delivered the message."""

__all__ = ["ContextRepo", "Logger", "NoCast", "YdbBroker", "YdbDriver", "YdbMessage"]
