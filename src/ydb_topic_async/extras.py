"""The optional extras (``spark``, ``fastapi``, ``aiohttp``, ``otel``, ``cloud``): how to install
one, and the ImportError that says so when a feature's package is missing."""

from __future__ import annotations


def install_hint(extra: str) -> str:
    """How to install the package's ``extra``: the command that works from a clone of the
    repository today, and the one for when the package is published."""
    return (
        f"install the {extra!r} extra: pip install -e \".[{extra}]\" in a clone of ydb-topic-async"
        f" (pip install 'ydb-topic-async[{extra}]' once the package is published)"
    )


def raise_for_missing_extra(exc: ImportError, feature: str, needs: str, extra: str, packages: tuple[str, ...]) -> None:
    """Re-raise ``exc`` as an ImportError naming the install command when the module it misses
    belongs to one of ``packages`` (the extra's dependencies); return otherwise."""
    if exc.name is not None and exc.name.split(".")[0] in packages:
        raise ImportError(f"{feature} needs {needs} ({exc.name} is missing): {install_hint(extra)}") from exc


__all__ = ["install_hint", "raise_for_missing_extra"]
