"""Regenerate ``src/laredo_target_fanout/_proto/replication_pb2.py`` from
``proto/laredo/replication/v1/replication.proto`` (needs grpcio-tools).

    .venv/bin/python laredo-target-fanout/gen_proto.py
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
PROTO = "laredo/replication/v1/replication.proto"
OUT = HERE / "src" / "laredo_target_fanout" / "_proto"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{ROOT / 'proto'}",
                f"--python_out={tmp}",
                f"--pyi_out={tmp}",
                PROTO,
            ],
            check=True,
        )
        gen = pathlib.Path(tmp) / "laredo" / "replication" / "v1"
        for name in ("replication_pb2.py", "replication_pb2.pyi"):
            shutil.copy(gen / name, OUT / name)
    print(f"generated into {OUT}")


if __name__ == "__main__":
    main()
