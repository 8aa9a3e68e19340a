"""The package's import graph has layers and a top: a lower module never imports a higher one.

Read from the source with ``ast``: every import a module makes counts, at the top, inside a
function, and under ``if TYPE_CHECKING:`` (a type-level dependency is a dependency: turn it into
a plain import and the package must still import). The checks:

- every module has a layer here (where a new module sits is a decision);
- no module imports a module of a higher layer;
- no import cycle anywhere in the package, within a layer too (strongly connected components);
- the local server (``testing``) uses nothing of the SDK but the protos, the key ranges and the
  extras (the one error, ``MissingDependencyError``, for a package of an extra that is missing);
- the adapters (integrations, Spark, the CLI, the demo, the FastStream broker) use only the public API: the package's
  root, the public namespaces (``observability``, ``extras``, ``testing``, ``spark``,
  ``integrations``: their modules without a leading underscore), and their own modules;
- no module is longer than ``MAX_LINES`` (the generated protobuf modules aside): a longer one
  does several jobs, and is cut for what it holds.

Importing ``pkg.sub`` counts as importing ``pkg.sub`` only: a package's ``__init__`` is a
re-export for users, placed at the layer of what it re-exports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import ydb_topic_async

pytestmark = pytest.mark.slow

PACKAGE = Path(ydb_topic_async.__file__).parent
NAME = "ydb_topic_async"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation: errors, protos, codecs, limits, helpers",
        (
            "_version", "_proto", "_errors", "_limits", "_futures", "_validate", "_codecs", "_key_ranges", "_closing",
            "extras", "observability.logging",
        ),
    ),
    ("the local topic server: protos and key ranges only", ("testing",)),
    (
        "policies: retry, credentials, observability hooks",
        (
            "_retry", "_credentials", "observability.metrics", "observability.tracing", "observability.otel_metrics",
            "observability",
        ),
    ),
    ("transport: endpoint choice", ("_balancer",)),
    ("transport: endpoints and channel options", ("_transport.endpoints",)),
    ("transport: channels", ("_transport.channels",)),
    ("transport: unary calls", ("_transport.unary",)),
    ("transport: discovery", ("_transport.discovery",)),
    ("transport: the transport, which puts them together", ("_transport.transport", "_transport")),
    ("stream wrapper", ("_stream",)),
    ("client context", ("_context",)),
    (
        "machinery",
        (
            "writer.messages", "writer.buffer", "writer.batching", "writer.sender", "writer.settings",
            "writer.transaction",
            "reader.parsing", "reader.wire", "reader.bookkeeping", "reader.messages", "reader.settings",
            "reader.decoding", "reader.commits", "reader.parts", "reader.flow_control", "reader.seeking",
            "reader.partitions", "reader.direct", "reader.session",
            "query._rpc", "query._outcome", "query.transaction", "query.session_pool", "query._binding",
            "topic.types", "topic.admin", "topic",
        ),
    ),
    (
        "writers and readers",
        (
            "writer.writer", "writer.tx_writer", "writer.keyed_lanes", "writer.rerouting", "writer.keyed",
            "writer.keyed_tx", "writer", "reader.reader", "reader.tx", "reader",
        ),
    ),
    ("clients", ("_topic_client", "query.client", "query")),
    ("driver", ("_driver", "")),
    ("adapters", ("integrations", "spark", "cli", "demo", "faststream")),
]

ADAPTERS = ("integrations", "spark", "cli", "demo", "faststream")
PUBLIC = ("", "observability", "extras", "testing", "spark", "integrations")
"""What adapters may import: the root, and these public namespaces (their modules' public names)."""
SERVER_MAY_USE = ("_proto", "_key_ranges", "extras")
MAX_LINES = 700


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


def _module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _all_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, wherever it is (``TYPE_CHECKING`` blocks and functions included)."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def _is_module(candidate: str, root: Path) -> bool:
    path = root / Path(*candidate.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, root: Path = PACKAGE) -> list[str]:
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
        targets.append(candidate if _is_module(candidate, root) else base)
    return targets


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports (generated protobuf modules left out)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(p for p in root.rglob("*.py") if "_proto" not in p.relative_to(root).parts):
        module = _module_name(path, root)
        tree = ast.parse(path.read_text(), str(path))
        found = graph.setdefault(module, set())
        for node in _all_imports(tree):
            for target in _targets(module, path.name == "__init__.py", node, root):
                if target.split(".")[0] != "_proto" and target != module:
                    found.add(target)
    return graph


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def _within(module: str, prefix: str) -> bool:
    return module == prefix or (prefix != "" and module.startswith(prefix + "."))


def adapter_violations(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports of adapters that reach past the public API."""
    found = []
    for module, targets in graph.items():
        adapter = next((a for a in ADAPTERS if _within(module, a)), None)
        if adapter is None:
            continue
        for target in targets:
            public = target == "" or any(
                _within(target, p) and not any(part.startswith("_") for part in target.split(".")) for p in PUBLIC[1:]
            )
            if not public and not _within(target, adapter):
                found.append(f"{module} -> {target}")
    return found


def server_violations(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports of the local server that reach into the SDK."""
    return [
        f"{module} -> {target}"
        for module, targets in graph.items()
        if _within(module, "testing")
        for target in targets
        if not _within(target, "testing") and not any(_within(target, allowed) for allowed in SERVER_MAY_USE)
    ]


def long_modules(root: Path = PACKAGE, limit: int = MAX_LINES) -> dict[str, int]:
    """The modules longer than ``limit`` lines, with their length (generated protobuf modules aside)."""
    return {
        _module_name(path, root) or NAME: lines
        for path in sorted(root.rglob("*.py"))
        if "_proto" not in path.relative_to(root).parts and (lines := len(path.read_text().splitlines())) > limit
    }


GRAPH = import_graph()


def test_every_module_has_a_layer() -> None:
    for module in GRAPH:
        _layer_of(module)


@pytest.mark.parametrize("module", sorted(GRAPH), ids=lambda m: m or NAME)
def test_no_module_imports_a_higher_layer(module: str) -> None:
    layer = _layer_of(module)
    upward = [
        f"{target or NAME} ({LAYERS[_layer_of(target)][0]})"
        for target in sorted(GRAPH[module])
        if _layer_of(target) > layer
    ]
    assert not upward, f"{module or NAME} ({LAYERS[layer][0]}) imports higher layers: " + "; ".join(upward)


def test_no_import_cycle() -> None:
    assert strongly_connected(GRAPH) == []


def test_the_local_server_uses_only_protos_key_ranges_and_extras() -> None:
    assert server_violations(GRAPH) == []


def test_adapters_use_only_the_public_api() -> None:
    assert adapter_violations(GRAPH) == []


def test_nothing_below_the_driver_imports_it() -> None:
    driver = _layer_of("_driver")
    below = sorted(m for m, targets in GRAPH.items() if "_driver" in targets and _layer_of(m) < driver)
    assert below == []


def test_no_module_is_longer_than_the_limit() -> None:
    assert long_modules() == {}


# --- the checks themselves can fail -------------------------------------------------------------


def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / NAME
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_check_sees_type_checking_and_function_local_imports(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "_driver.py": "",
            "_transport.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._driver import Driver\n"
                "def later():\n    from .writer import sender\n"
            ),
            "writer/__init__.py": "",
            "writer/sender.py": "",
        },
    )
    graph = import_graph(root)
    assert graph["_transport"] == {"_driver", "writer.sender"}
    assert _layer_of("_driver") > _layer_of("_transport")


def test_the_check_sees_a_cycle(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "reader/__init__.py": "",
            "reader/decoding.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .flow_control import X\n"
            ),
            "reader/flow_control.py": "from .decoding import decode\n",
        },
    )
    assert strongly_connected(import_graph(root)) == [["reader.decoding", "reader.flow_control"]]


def test_the_check_sees_adapters_and_the_server_reaching_inside(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "_retry.py": "",
            "_errors.py": "",
            "_proto/__init__.py": "",
            "observability/__init__.py": "",
            "cli/__init__.py": (
                "from .. import Driver\nfrom .._retry import RetryState\nfrom ..observability import x\n"
            ),
            "testing/__init__.py": "from .._proto import ydb_topic_pb2\nfrom .._errors import SchemeError\n",
        },
    )
    graph = import_graph(root)
    assert adapter_violations(graph) == ["cli -> _retry"]
    assert server_violations(graph) == ["testing -> _errors"]


def test_the_check_sees_a_long_module(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "fits.py": "x = 1\n" * MAX_LINES,
            "writer/__init__.py": "",
            "writer/grown.py": "x = 1\n" * (MAX_LINES + 1),
            "_proto/ydb_topic_pb2.py": "x = 1\n" * (MAX_LINES * 3),  # generated: not counted
        },
    )
    assert long_modules(root) == {"writer.grown": MAX_LINES + 1}
