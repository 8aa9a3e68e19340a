"""Argument checks shared by the public calls: each raises ``InvalidArgumentError`` naming the argument."""

from __future__ import annotations

import math

from ._errors import InvalidArgumentError


def check_timeout(value: object, what: str = "timeout") -> float | None:
    """``value`` as seconds: ``None`` (no limit) or a number >= 0 (not a bool, not NaN)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise InvalidArgumentError(f"{what} must be None or a number of seconds >= 0, got {value!r}")
    return float(value)


def check_seconds(value: object, what: str, *, positive: bool = False) -> float:
    """A required number of seconds (> 0 with ``positive``, else >= 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise InvalidArgumentError(f"{what} must be a number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise InvalidArgumentError(f"{what} must be {'positive' if positive else '>= 0'}, got {value!r}")
    return float(value)


def check_wait(value: object, what: str) -> float | None:
    """``value`` as the bound of a wait: ``None`` (no waiting) or a positive, finite number of
    seconds (a wait that is asked for has an end)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidArgumentError(
            f"{what} must be None (do not wait) or a positive, finite number of seconds, got {value!r}"
        )
    return float(value)


def check_utf8(value: str, what: str) -> bytes:
    """``value`` encoded as UTF-8; a lone surrogate (say, from bytes decoded with
    ``surrogateescape``) cannot be sent, so it is refused here rather than at the first write."""
    try:
        return value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"{what} is not valid Unicode text: {exc.reason} at position {exc.start} ({value!r})"
        ) from None



def check_int(value: object, what: str, *, minimum: int | None = 0, maximum: int | None = None) -> int:
    """``value`` as an int (not a bool) within ``[minimum, maximum]`` (``None``: no bound)."""
    if not _int_within(value, minimum, maximum):
        raise InvalidArgumentError(f"{what} must be {_int_range(minimum, maximum)}, got {value!r}")
    assert isinstance(value, int)
    return value


def check_optional_int(value: object, what: str, *, minimum: int | None = 0, maximum: int | None = None) -> int | None:
    """``check_int``, with ``None`` allowed (meaning "not set" or "no limit")."""
    if value is None:
        return None
    if not _int_within(value, minimum, maximum):
        raise InvalidArgumentError(f"{what} must be {_int_range(minimum, maximum)} or None, got {value!r}")
    assert isinstance(value, int)
    return value


def _int_within(value: object, minimum: int | None, maximum: int | None) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    )


def _int_range(minimum: int | None, maximum: int | None) -> str:
    if maximum is not None:
        return f"an int between {minimum} and {maximum}" if minimum is not None else f"an int of at most {maximum}"
    if minimum is None:
        return "an int"
    if minimum == 0:
        return "a non-negative int"
    if minimum == 1:
        return "a positive int"
    return f"an int of at least {minimum}"
