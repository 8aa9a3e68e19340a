"""A missing optional framework gives an ImportError (the SDK's ``MissingDependencyError``) that says
which extra to install."""

from __future__ import annotations

import importlib
import sys

import pytest

import ydb_topic_async as yta


@pytest.mark.parametrize(("module", "framework"), [("fastapi", "fastapi"), ("aiohttp", "aiohttp")])
def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch, module: str, framework: str) -> None:
    name = f"ydb_topic_async.integrations.{module}"
    monkeypatch.setitem(sys.modules, framework, None)  # importing it now fails as if not installed
    monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError) as raised:
        importlib.import_module(name)
    assert type(raised.value) is yta.MissingDependencyError  # not a bare ModuleNotFoundError
    assert f'pip install -e ".[{framework}]" in a clone of ydb-topic-async' in str(raised.value)
    assert f"pip install 'ydb-topic-async[{framework}]' once the package is published" in str(raised.value)
    assert isinstance(raised.value.__cause__, ImportError)
