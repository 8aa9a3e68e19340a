"""What CI reads from pyproject.toml to test more than one Python.

    python scripts/ci_versions.py declared                     # 3.11, 3.12, ... one a line
    python scripts/ci_versions.py requirements-without-spark   # the dev extra minus the Spark (and Connect) packages
"""

from __future__ import annotations

import pathlib
import re
import sys
import tomllib

PYPROJECT = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"
SPARK_ONLY = {"pyspark", "pyarrow", "grpcio-status", "googleapis-common-protos", "pandas", "numpy"}


def declared_versions(project: dict[str, object]) -> list[str]:
    """The versions of the "Programming Language :: Python :: 3.N" classifiers."""
    classifiers = project.get("classifiers", [])
    assert isinstance(classifiers, list)
    found = (re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c) for c in classifiers)
    return [m.group(1) for m in found if m]


def requirements_without_spark(project: dict[str, object]) -> list[str]:
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)
    names = ((r, re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower()) for r in extras["dev"])
    return [requirement.replace(" ", "") for requirement, name in names if name not in SPARK_ONLY]


def main(argv: list[str]) -> int:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    commands = {"declared": declared_versions, "requirements-without-spark": requirements_without_spark}
    if len(argv) != 1 or argv[0] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(commands[argv[0]](project)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
