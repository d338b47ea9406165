"""Run every benchmark script in this folder (or the ones named) and print their tables.

./dev bench                 # all
./dev bench engine pg_source
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).parent


def main(names: list[str]) -> int:
    scripts = sorted(
        p for p in HERE.glob("*.py") if p.name != "run.py" and not p.name.startswith("_")
    )
    if names:
        scripts = [p for p in scripts if p.stem in names]
    rc = 0
    for p in scripts:
        print(f"== {p.stem} ==", flush=True)
        rc |= subprocess.call([sys.executable, str(p)])
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
