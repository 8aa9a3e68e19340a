"""Regenerate ``src/ydb_topic_async/_proto`` from ``protos/``.

Run from the repository root: ``python scripts/generate_protos.py``.
With ``--check`` it regenerates into a temporary directory and exits 1
if the committed modules differ, which is what CI runs.
"""

from __future__ import annotations

import argparse
import filecmp
import pathlib
import shutil
import sys
import tempfile

from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
TARGET = ROOT / "src" / "ydb_topic_async" / "_proto"


def generate(out: pathlib.Path) -> list[pathlib.Path]:
    sources = sorted(PROTOS.rglob("*.proto"))
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTOS}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        *(str(s) for s in sources),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return sorted((out / "ydb_topic_async" / "_proto").glob("*_pb2.py*"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if committed modules are stale")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        produced = generate(pathlib.Path(tmp))
        if opts.check:
            stale = [p.name for p in produced if not (TARGET / p.name).exists()
                     or not filecmp.cmp(p, TARGET / p.name, shallow=False)]
            extra = sorted({p.name for p in TARGET.glob("*_pb2.py*")} - {p.name for p in produced})
            if stale or extra:
                print("generated protobuf modules are stale:", *stale, *extra, file=sys.stderr)
                print("run: python scripts/generate_protos.py", file=sys.stderr)
                return 1
            print(f"{len(produced)} generated modules are up to date")
            return 0
        for old in TARGET.glob("*_pb2.py*"):
            old.unlink()
        for p in produced:
            shutil.copy(p, TARGET / p.name)
        print(f"wrote {len(produced)} modules to {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
