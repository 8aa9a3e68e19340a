"""The root namespace exports what it means to: every name in ``__all__`` exists, once, and every
public object at the root is in ``__all__`` (nothing public by accident, nothing missing from a
star import or the API reference). Types that public signatures name are exported too."""

from __future__ import annotations

import inspect
import types
import typing

import ydb_topic_async as yta


def test_all_names_exist_once() -> None:
    assert len(yta.__all__) == len(set(yta.__all__))
    assert [name for name in yta.__all__ if not hasattr(yta, name)] == []


def test_every_public_object_at_the_root_is_in_all() -> None:
    public = {
        name
        for name, value in vars(yta).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert sorted(public - set(yta.__all__)) == []


def test_types_in_the_credentials_signatures_are_exported() -> None:
    """A user writing a token source of their own can name the protocol it implements."""
    hints = typing.get_type_hints(yta.Oauth2TokenExchangeCredentials.__init__)
    named = {arg.__name__ for hint in hints.values() for arg in typing.get_args(hint) if inspect.isclass(arg)}
    assert "TokenSource" in named and yta.TokenSource.__name__ == "TokenSource"
