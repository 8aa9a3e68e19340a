"""The context annotations of what a handler may take besides its message data (re-exported by
``annotations``, which adds the broker's)."""

from __future__ import annotations

from typing import Annotated

from faststream._internal.context import Context

from .. import Driver
from ._message import YdbMessage as _YdbMessage

YdbMessage = Annotated[_YdbMessage, Context("message")]
"""The message being handled, with its YDB fields (key, partition id, offset...)."""
YdbDriver = Annotated[Driver, Context("broker.driver")]
"""The broker's driver: topic administration and everything else the SDK offers."""
