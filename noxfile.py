"""The one test harness. ``./dev <session>`` bootstraps ``.venv`` and runs these sessions in it.

Sessions run in the already-provisioned ``.venv`` (``venv_backend="none"``) so a fresh machine
installs once; ``./dev`` owns installation (pinned by ``constraints.txt``).
"""

from __future__ import annotations

import os
import pathlib
import sys

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "typecheck", "tests"]

PY = sys.executable
SRC_DIRS = [
    "laredo-core/src",
    "laredo-target-memory/src",
    "laredo-source-pg/src",
    "laredo-target-http/src",
    "laredo-snapshot-s3/src",
    "laredo-source-kinesis/src",
    "laredo-server/src",
    "laredo-target-fanout/src",
    "laredo-spark/src",
    "laredo-target-delta/src",
]


def _pytest(session: nox.Session, *args: str) -> None:
    session.run(PY, "-m", "pytest", *args, *session.posargs, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format) and the import contracts (``[tool.importlinter]``: no cycles,
    core layered, plugin packages independent)."""
    session.run(PY, "-m", "ruff", "check", ".", external=True)
    session.run(PY, "-m", "ruff", "format", "--check", ".", external=True)
    lint_imports = str(pathlib.Path(PY).parent / "lint-imports")
    session.run(lint_imports, "--no-logo", "--no-cache", external=True)


@nox.session
def typecheck(session: nox.Session) -> None:
    session.run(PY, "-m", "mypy", *SRC_DIRS, external=True)


@nox.session
def tests(session: nox.Session) -> None:
    """The whole suite: unit, integration (real PostgreSQL/HTTP/...), e2e."""
    _pytest(session, "-n", "2", "--dist", "loadfile")


@nox.session
def unit(session: nox.Session) -> None:
    _pytest(session, "-m", "not integration and not e2e and not spark")


@nox.session
def integration(session: nox.Session) -> None:
    _pytest(session, "-m", "integration")


@nox.session
def e2e(session: nox.Session) -> None:
    _pytest(session, "-m", "e2e")


@nox.session
def spark(session: nox.Session) -> None:
    _pytest(session, "-m", "spark")


@nox.session
def fuzz(session: nox.Session) -> None:
    """The decoders under hypothesis with a long budget (``tests/fuzz``; the normal test run
    includes them with 100 examples each). ``LAREDO_FUZZ_EXAMPLES`` sets the examples per
    test (default 20 000); inputs found are kept in ``.hypothesis/`` and replayed next time:
    add each as an ``@example`` to its test."""
    examples = os.environ.get("LAREDO_FUZZ_EXAMPLES", "20000")
    session.run(
        PY,
        "-m",
        "pytest",
        "tests/fuzz",
        "-m",
        "fuzz",
        "--hypothesis-show-statistics",
        "--timeout=0",
        *session.posargs,
        external=True,
        env={"LAREDO_FUZZ_EXAMPLES": examples},
    )


@nox.session
def bench(session: nox.Session) -> None:
    session.run(PY, "benchmarks/run.py", *session.posargs, external=True)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job on an embedded default: ``laredo quickstart`` (embedded PostgreSQL, live
    workload, the server and its CLI). Ctrl-C stops it; ``./dev demo --duration 30`` bounds it."""
    laredo = str(pathlib.Path(PY).parent / "laredo")
    session.run(laredo, "quickstart", *session.posargs, external=True)


@nox.session
def example(session: nox.Session) -> None:
    """The library example: laredo.testing.TestSource into IndexedTarget, no database."""
    session.run(PY, "examples/demo.py", *session.posargs, external=True)
