"""Loading the example applications (they are scripts, not a package) and polling helpers."""

from __future__ import annotations

import importlib.util
import pathlib
from types import ModuleType

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


