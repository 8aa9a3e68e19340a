"""The optional extras (``spark``, ``fastapi``, ``aiohttp``, ``otel``, ``faststream``, ``cloud``):
how to install one, and the one error a feature raises when a package of its extra is missing:
``MissingDependencyError`` (an ``ImportError`` too), naming the extra to install.

Every place that imports an optional package goes through here: ``missing_dependency`` makes the
error of an import that failed, ``raise_for_missing_extra`` raises it for a module whose import at
the top failed because of one of the extra's packages (and lets any other ImportError through).
"""

from __future__ import annotations

from ._errors import MissingDependencyError


def install_hint(extra: str) -> str:
    """How to install the package's ``extra``: the command that works from a clone of the
    repository today, and the one for when the package is published."""
    return (
        f"install the {extra!r} extra: pip install -e \".[{extra}]\" in a clone of ydb-topic-async"
        f" (pip install 'ydb-topic-async[{extra}]' once the package is published)"
    )


def missing_dependency(
    exc: ImportError, feature: str, needs: str, extra: str | None, *, install: str | None = None
) -> MissingDependencyError:
    """The error for ``feature``, which needs ``needs`` (the ``extra``'s packages), when importing
    failed with ``exc``: it names the missing module and the install command. Raise it ``from exc``.

    ``install`` is the command for a package that no extra of ydb-topic-async installs (``extra``
    None): an extra of FastStream's, say."""
    missing = exc.name.split(".")[0] if exc.name else None  # the package to install, not its submodule
    if install is None:
        assert extra is not None, "say how to install what no extra installs"
        install = install_hint(extra)
    return MissingDependencyError(
        f"{feature} needs {needs} ({missing or 'a package'} is missing): {install}",
        name=missing,
        extra=extra,
    )


def raise_for_missing_extra(
    exc: ImportError,
    feature: str,
    needs: str,
    extra: str | None,
    packages: tuple[str, ...],
    *,
    install: str | None = None,
) -> None:
    """Raise ``missing_dependency`` for ``exc`` when the module it misses belongs to one of
    ``packages`` (the extra's dependencies); return otherwise (the caller re-raises ``exc``)."""
    if exc.name is not None and exc.name.split(".")[0] in packages:
        raise missing_dependency(exc, feature, needs, extra, install=install) from exc


__all__ = ["MissingDependencyError", "install_hint", "missing_dependency", "raise_for_missing_extra"]
