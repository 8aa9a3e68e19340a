"""The package's import graph has layers: a lower module never imports a higher one at runtime.

Read from the source with ``ast``: every ``import`` a module runs (at the top or inside a
function; not those under ``if TYPE_CHECKING:``) must name a module of its own layer or a lower
one. Importing ``pkg.sub`` counts as importing ``pkg.sub`` only: a package's ``__init__`` is a
re-export for users, placed at the layer of what it re-exports. A new module must be given a
layer here, which is the point: where it sits is a decision.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ydb_topic_async

PACKAGE = Path(ydb_topic_async.__file__).parent
NAME = "ydb_topic_async"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation: errors, protos, codecs, limits, helpers",
        (
            "_version", "_proto", "_errors", "_limits", "_futures", "_validate", "_codecs", "_key_ranges", "_closing",
            "observability.logging",
        ),
    ),
    (
        "policies: retry, credentials, observability hooks",
        ("_retry", "_credentials", "observability.metrics", "observability.tracing", "observability"),
    ),
    ("transport", ("_transport",)),
    ("stream wrapper", ("_stream",)),
    (
        "machinery",
        (
            "writer.messages", "writer.buffer", "writer.batching", "writer.sender",
            "reader.messages", "reader.flow_control", "reader.commits", "reader.decoding", "reader.parsing",
            "reader.partitions", "reader.session",
            "query._rpc", "query.transaction", "query.session_pool", "query._binding",
            "topic.types",
        ),
    ),
    (
        "facades",
        (
            "writer.writer", "writer.tx_writer", "writer.keyed", "writer",
            "reader.reader", "reader.tx", "reader",
            "query.client", "query",
            "topic.client", "topic",
            "_driver", "",
        ),
    ),
    ("adapters", ("integrations", "spark", "cli", "demo", "testing")),
]


def _layer_of(module: str) -> int:
    """The layer of a module name relative to the package ("" is the package itself); the most
    specific entry wins."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix and module.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    if best is None:
        raise AssertionError(f"{module!r} has no layer in tests/test_layers.py: give it one")
    return best[0]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.orelse:
                visit(statement)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package-relative names of the modules ``node`` imports (outside modules dropped)."""
    if isinstance(node, ast.Import):
        return [a.name[len(NAME) + 1 :] if a.name != NAME else "" for a in node.names if a.name.split(".")[0] == NAME]
    if node.level == 0:
        if node.module is None or node.module.split(".")[0] != NAME:
            return []
        base = node.module[len(NAME) + 1 :] if node.module != NAME else ""
    else:
        here = module.split(".") if module else []
        if not is_package:
            here = here[:-1]
        up = node.level - 1
        anchor = here[: len(here) - up] if up else here
        base = ".".join([*anchor, *(node.module.split(".") if node.module else [])])
    targets = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}" if base else alias.name
        # ``from . import _rpc`` imports a module; ``from .x import Name`` imports from one.
        if (PACKAGE / Path(*candidate.split("."))).with_suffix(".py").exists() or (
            PACKAGE / Path(*candidate.split(".")) / "__init__.py"
        ).exists():
            targets.append(candidate)
        else:
            targets.append(base)
    return targets


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_proto" not in p.parts)


def test_every_module_has_a_layer() -> None:
    for path in _sources():
        _layer_of(_module_name(path))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_higher_layer(path: Path) -> None:
    module = _module_name(path)
    layer = _layer_of(module)
    tree = ast.parse(path.read_text(), str(path))
    upward = []
    for node in _runtime_imports(tree):
        for target in _targets(module, path.name == "__init__.py", node):
            if target.split(".")[0] == "_proto":
                continue
            if _layer_of(target) > layer:
                upward.append(f"line {node.lineno}: {target or NAME} ({LAYERS[_layer_of(target)][0]})")
    assert not upward, f"{module or NAME} ({LAYERS[layer][0]}) imports higher layers: " + "; ".join(upward)


def test_the_check_sees_an_upward_import() -> None:
    """The checker itself can fail: a transport that imported the writer would be caught."""
    tree = ast.parse("from .writer.sender import WriterSender\nif TYPE_CHECKING:\n    from ._driver import Driver\n")
    targets = [t for node in _runtime_imports(tree) for t in _targets("_transport", False, node)]
    assert targets == ["writer.sender"]
    assert _layer_of("writer.sender") > _layer_of("_transport")
