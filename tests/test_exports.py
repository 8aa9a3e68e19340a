"""The root namespace exports what it means to: every name in ``__all__`` exists, once, and every
public object at the root is in ``__all__`` (nothing public by accident, nothing missing from a
star import or the API reference). Types that public signatures name are exported too."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
import sys
import traceback
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


# --- the public module on exported names -----------------------------------------------------------


def _ours() -> dict[str, typing.Any]:
    """The exported classes and functions the package defines (constants and type aliases aside;
    a function may be wrapped, as ``partition_key`` in its cache)."""
    found: dict[str, typing.Any] = {}
    for name in yta.__all__:
        obj = getattr(yta, name)
        ours = obj.__module__.split(".")[0] == yta.__name__ if hasattr(obj, "__module__") else False
        if ours and (isinstance(obj, type) or inspect.isfunction(inspect.unwrap(obj))):
            found[name] = obj
    return found


def test_exported_names_say_the_public_module() -> None:
    """Tracebacks, reprs and pickles name ``ydb_topic_async.X``, not the private module defining it."""
    ours = _ours()
    assert "UnauthorizedError" in ours and "Driver" in ours and "partition_key" in ours
    assert {name: obj.__module__ for name, obj in ours.items() if obj.__module__ != "ydb_topic_async"} == {}
    assert repr(yta.UnauthorizedError) == "<class 'ydb_topic_async.UnauthorizedError'>"
    line = traceback.format_exception_only(yta.UnauthorizedError("no access"))[-1]
    assert line == "ydb_topic_async.UnauthorizedError: UNAUTHORIZED: no access\n"
    for obj in ours.values():
        assert pickle.loads(pickle.dumps(obj)) is obj


def test_annotations_still_resolve_after_the_module_changed() -> None:
    """Type introspection (``typing.get_type_hints``; dataclass field types, as pydantic reads them)
    looks names up in the module a class names: they resolve there still."""
    for obj in _ours().values():
        if not isinstance(obj, type):
            continue
        typing.get_type_hints(obj)  # raises NameError for a name the public module lacks
        if dataclasses.is_dataclass(obj):
            namespace = vars(sys.modules[obj.__module__])
            for field in dataclasses.fields(obj):
                if isinstance(field.type, str):
                    eval(field.type, namespace)  # what pydantic does with a string field type


def _instances() -> list[yta.YdbTopicError]:
    errors: list[yta.YdbTopicError] = []
    for obj in _ours().values():
        if isinstance(obj, type) and issubclass(obj, yta.YdbTopicError) and obj is not yta.MessageDecodeError:
            errors.append(obj("what happened"))
    errors.append(yta.UnauthorizedError("refused", [yta.Issue("no such user", code=1)]))
    errors.append(
        yta.MessageDecodeError("bad zstd", topic_path="/local/t", partition_id=1, offset=7, codec=4, message=None)
    )
    return errors


def test_exceptions_pickle_and_repr_as_they_were() -> None:
    """An error crosses a process boundary (multiprocessing, Spark) unchanged: same class, message
    and attributes, whatever its constructor takes."""
    for error in _instances():
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), str(copy), copy.args, vars(copy)) == (type(error), str(error), error.args, vars(error))
        assert repr(copy) == repr(error) and repr(error).startswith(type(error).__name__ + "(")
