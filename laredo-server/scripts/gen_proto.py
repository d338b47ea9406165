"""Regenerate the gRPC code of proto/laredo/v1/{oam,query}.proto.

    .venv/bin/python laredo-server/scripts/gen_proto.py

The .proto files keep ``package laredo.v1`` but are compiled from a copy under
``laredo_proto/v1/`` so the generated modules import as
``laredo_server._proto.laredo_proto.v1`` (never clashing with the ``laredo`` package). Needs
grpcio-tools (pinned in constraints.txt; ``pip install laredo-server[dev]``).
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto" / "laredo" / "v1"
OUT = ROOT / "laredo-server" / "src" / "laredo_server" / "_proto"
FILES = ("oam.proto", "query.proto")


def main() -> int:
    from grpc_tools import protoc  # noqa: PLC0415 - lazy: dev-only tool, imported when run

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "laredo_proto" / "v1"
        src.mkdir(parents=True)
        for name in FILES:
            shutil.copy(PROTO_DIR / name, src / name)
        gen = OUT / "laredo_proto" / "v1"
        if gen.exists():
            shutil.rmtree(gen)
        gen.mkdir(parents=True)
        args = [
            "protoc",
            f"-I{tmp}",
            f"--python_out={OUT}",
            f"--pyi_out={OUT}",
            f"--grpc_python_out={OUT}",
            *[f"laredo_proto/v1/{n}" for n in FILES],
        ]
        if protoc.main(args) != 0:
            return 1
    for f in gen.glob("*.py*"):
        text = f.read_text()
        text = re.sub(
            r"^from laredo_proto\.v1 import",
            "from laredo_server._proto.laredo_proto.v1 import",
            text,
            flags=re.MULTILINE,
        )
        f.write_text(text)
    for d in (OUT, OUT / "laredo_proto", gen):
        (d / "__init__.py").write_text('"""Generated gRPC code (scripts/gen_proto.py)."""\n')
    print(f"generated {sorted(p.name for p in gen.iterdir())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
