"""PostgreSQL 17+ in production shapes: a failover to a promoted standby, and a source that
reads from a hot standby. Each needs the binaries of a 17+ major (``PG_BINDIR``); the default
suite (PostgreSQL 15) skips them and the ``pg_majors`` session runs them on 17 and 18."""

from __future__ import annotations

import contextlib
import logging
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import laredo
import psycopg
import pytest
from laredo.preflight import CheckRequest, Severity, TableUse
from laredo.testing.recording import RecordingTarget
from laredo.types import SourceConfig, TableIdentifier
from laredo_source_pg.checks import check_source
from laredo_source_pg.embedded import (
    EmbeddedPostgres,
    PostgresNotFoundError,
    find_bindir,
    server_env,
)
from laredo_source_pg.options import PostgresSourceOptions
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.pg_majors, pytest.mark.slow]

ITEMS = TableIdentifier("public", "items")


def _major(bindir: Path) -> int:
    out = subprocess.run(
        [str(bindir / "postgres"), "--version"],
        capture_output=True,
        text=True,
        check=True,
        env=server_env(bindir),
    ).stdout
    return int(out.split()[-1].split(".")[0])


def _bindir(at_least: int = 0, how: str = "") -> Path:
    """The binaries of ``PG_BINDIR`` (or the system's), of PostgreSQL ``at_least`` or newer,
    or a skip naming what was found (and ``how`` to run the test)."""
    try:
        bindir = find_bindir()
    except PostgresNotFoundError as exc:
        pytest.skip(str(exc))
    if at_least and _major(bindir) < at_least:
        pytest.skip(f"needs PostgreSQL {at_least}+ (PG_BINDIR; found {_major(bindir)}){how}")
    return bindir


@pytest.fixture(scope="module")
def bindir17() -> Path:
    """The binaries of PostgreSQL 17 or newer, or a skip naming how to run the test."""
    return _bindir(17, "; ./dev pg_majors runs it on 17 and 18")


def _primary(bindir: Path) -> EmbeddedPostgres:
    pg = EmbeddedPostgres(bindir=bindir, auth="trust").start()
    pg.execute("CREATE DATABASE app")
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, v int, note text)", "app")
    pg.execute("INSERT INTO items SELECT g, 0, 'seed' FROM generate_series(1, 500) g", "app")
    return pg


@pytest.fixture
def primary(bindir17: Path) -> Iterator[EmbeddedPostgres]:
    with _primary(bindir17) as pg:
        yield pg


@pytest.fixture
def any_primary() -> Iterator[EmbeddedPostgres]:
    """A primary of whatever major ``PG_BINDIR`` (or the system) has."""
    with _primary(_bindir()) as pg:
        yield pg


class _Writers:
    """Writes (insert, update, delete) to whatever server is read-write behind ``dsn``,
    reconnecting through a failover."""

    def __init__(self, dsn: str, n: int = 2) -> None:
        self.dsn = dsn
        self.stop = threading.Event()
        self.committed = 0
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(n)]

    def __enter__(self) -> _Writers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _run(self, seed: int) -> None:
        rnd = random.Random(seed)
        next_id = 10_000 * (seed + 1)
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2) as conn:
                    while not self.stop.is_set():
                        op = rnd.random()
                        if op < 0.4:
                            next_id += 1
                            conn.execute("INSERT INTO items VALUES (%s, 1, 'w')", (next_id,))
                        elif op < 0.8:
                            conn.execute(
                                "UPDATE items SET v = v + 1 WHERE id = %s", (rnd.randint(1, 500),)
                            )
                        else:
                            conn.execute("DELETE FROM items WHERE id = %s", (rnd.randint(1, 500),))
                        self.committed += 1
                        time.sleep(0.002)
            except psycopg.Error:
                time.sleep(0.1)  # the primary is gone: try the next read-write server


def _rows(pg: EmbeddedPostgres) -> dict[Any, dict[str, Any]]:
    return {
        (r[0],): {"id": r[0], "v": r[1], "note": r[2]}
        for r in pg.execute("SELECT id, v, note FROM items", "app")
    }


def _slot(pg: EmbeddedPostgres, name: str, cols: str) -> tuple[Any, ...] | None:
    rows = pg.execute(f"SELECT {cols} FROM pg_replication_slots WHERE slot_name = '{name}'")
    return rows[0] if rows else None


@contextlib.contextmanager
def _kicking(primary: EmbeddedPostgres) -> Iterator[None]:
    """Log a running-xacts record on ``primary`` every 0.2 s while in the block: creating a
    slot on a standby waits for the primary's next one."""
    stop = threading.Event()

    def kick() -> None:
        while not stop.wait(0.2):
            primary.execute("SELECT pg_log_standby_snapshot()")

    kicker = threading.Thread(target=kick, daemon=True)
    kicker.start()
    try:
        yield
    finally:
        stop.set()
        kicker.join(5)


def _standby_source(standby: EmbeddedPostgres, slot: str, **options: Any) -> PostgresSource:
    """A stateful source on ``standby`` with slot ``slot`` and the publication ``<slot>_pub``
    made on the primary (a standby cannot make one), once it is replayed there."""
    wait_until(
        lambda: standby.execute("SELECT count(*) FROM pg_publication", "app")[0][0] == 1,
        what="publication replayed",
    )
    return PostgresSource(
        standby.dsn("app"),
        slot_mode="stateful",
        slot_name=slot,
        publication={"name": f"{slot}_pub", "create": False},
        status_interval=0.2,
        **options,
    )


def _check(**options: Any) -> dict[str, tuple[Severity, str]]:
    """``laredo check`` of a source with ``options``: ``{code: (severity, text)}``."""
    opts = PostgresSourceOptions(**options)
    found = check_source(
        CheckRequest("source", "postgresql", "sources.pg", opts, (TableUse(ITEMS, "tables.0"),))
    )
    return {f.code: (f.severity, f"{f.message} / {f.fix}") for f in found}


def test_failover_to_the_promoted_standby_continues_without_a_second_baseline(
    primary: EmbeddedPostgres,
) -> None:
    standby = primary.standby({"sync_replication_slots": "on"})
    try:
        dsn = (
            f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres "
            "dbname=app target_session_attrs=read-write"
        )
        check = {"connection": dsn, "slot_mode": "stateful", "slot_name": "fo"}
        before = _check(**check)
        assert before["FAILOVER_UNPROTECTED"][0] is Severity.WARNING
        assert standby.physical_slot in before["FAILOVER_UNPROTECTED"][1]
        assert "is not on the standby" in before["SLOT_NOT_SYNCED"][1]
        one_host = _check(**{**check, "connection": primary.dsn("app")})
        assert "NO_STANDBY_IN_CONNECTION" in one_host
        primary.execute(f"ALTER SYSTEM SET synchronized_standby_slots = '{standby.physical_slot}'")
        primary.execute("SELECT pg_reload_conf()")
        src = PostgresSource(
            dsn,
            slot_mode="stateful",
            slot_name="fo",
            publication={"create": True},
            reconnect={"max_attempts": 200, "initial_backoff": 0.05, "max_backoff": 0.3},
            status_interval=0.2,
            connect_timeout=2,
        )
        target = RecordingTarget(durable=True)
        eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
        try:
            with _Writers(dsn) as writers:
                eng.start()
                assert eng.await_ready(60)
                assert _slot(primary, "fo", "failover") == (True,)

                def synced() -> bool:
                    primary.execute("SELECT pg_log_standby_snapshot()")
                    return _slot(standby, "fo", "synced, temporary") == (True, False)

                wait_until(synced, 60, interval=0.2, what="slot synced to the standby")
                after = _check(**check)
                assert "SLOT_SYNCED" in after and "SLOT_NOT_SYNCED" not in after
                assert "FAILOVER_UNPROTECTED" not in after
                wait_until(lambda: writers.committed > 300, 30, what="writes")
                primary.stop("immediate")  # the primary dies during writes
                standby.promote()
                start = writers.committed
                wait_until(lambda: writers.committed > start + 300, 60, what="writes resume")
            expected = _rows(standby)
            wait_until(lambda: dict(target.items()) == expected, 60, what="target == new primary")
            assert src.details()["failovers_total"] == 1
            assert src.details()["slot_lost_total"] == 0
            baselines = [c for c in target.calls if c[0] == "on_baseline_complete"]
            assert len(baselines) == 1, "a second baseline"
        finally:
            eng.stop()
    finally:
        standby.close()


def test_failover_to_a_standby_without_the_slot_rebaselines_once(
    any_primary: EmbeddedPostgres,
) -> None:
    """PostgreSQL 16 and older (or ``slot_failover = false``): the promoted standby has no
    slot; the source finds it gone at the first START_REPLICATION and re-baselines once."""
    primary = any_primary
    standby = primary.standby()
    try:
        dsn = (
            f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres "
            "dbname=app target_session_attrs=read-write"
        )
        src = PostgresSource(
            dsn,
            slot_mode="stateful",
            slot_name="nofo",
            slot_failover=False,
            publication={"create": True},
            reconnect={"max_attempts": 200, "initial_backoff": 0.05, "max_backoff": 0.3},
            status_interval=0.2,
            connect_timeout=2,
        )
        target = RecordingTarget(durable=True)
        eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
        try:
            with _Writers(dsn) as writers:
                eng.start()
                assert eng.await_ready(60)
                wait_until(lambda: writers.committed > 300, 30, what="writes")
                primary.stop("immediate")
                standby.promote()
                start = writers.committed
                wait_until(lambda: writers.committed > start + 300, 60, what="writes resume")
            expected = _rows(standby)
            wait_until(lambda: dict(target.items()) == expected, 60, what="target == new primary")
            details = src.details()
            assert details["failovers_total"] == 1
            assert details["slot_lost_total"] == 1
            assert "does not exist" in details["slot_lost_reason"]
            baselines = [c for c in target.calls if c[0] == "on_baseline_complete"]
            assert len(baselines) == 2  # the first, and one after the failover
        finally:
            eng.stop()
    finally:
        standby.close()


def test_a_source_on_a_hot_standby_baselines_and_streams_from_it(
    primary: EmbeddedPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="laredo_source_pg")
    standby = primary.standby()
    try:
        found = _check(connection=standby.dsn("app"), slot_mode="stateful", slot_name="sb")
        assert found["STANDBY_SOURCE"][0] is Severity.INFO
        assert "cannot be failover-enabled" in found["STANDBY_SOURCE"][1]
        assert found["STANDBY_PUBLICATION"][0] is Severity.ERROR
        assert "publication.create = false" in found["STANDBY_PUBLICATION"][1]
        assert "STANDBY_FEEDBACK" not in found  # the standby has hot_standby_feedback = on
        standby.execute("ALTER SYSTEM SET hot_standby_feedback = off")
        standby.execute("SELECT pg_reload_conf()")
        wait_until(lambda: standby.execute("SHOW hot_standby_feedback") == [("off",)])
        assert "STANDBY_FEEDBACK" in _check(connection=standby.dsn("app"))
        standby.execute("ALTER SYSTEM RESET hot_standby_feedback")
        standby.execute("SELECT pg_reload_conf()")
        wait_until(lambda: standby.execute("SHOW hot_standby_feedback") == [("on",)])
        # the publication is made on the primary (a standby cannot create one)
        primary.execute("CREATE PUBLICATION sb_pub FOR TABLE items", "app")
        src = _standby_source(standby, "sb")
        target = RecordingTarget(durable=True)
        eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
        try:
            with _kicking(primary):
                with _Writers(primary.dsn("app")):
                    eng.start()
                    assert eng.await_ready(60)
                    time.sleep(1)
                expected = _rows(primary)
                wait_until(lambda: dict(target.items()) == expected, 60, what="target == primary")
            assert _slot(standby, "sb", "slot_type, failover") == ("logical", False)
            assert _slot(primary, "sb", "slot_type") is None
            assert src.details()["slot_failover"] is False
            assert "waits for the primary's next running-xacts record" in caplog.text
            assert "cannot be failover-enabled" in caplog.text
        finally:
            eng.stop()
    finally:
        standby.close()


@pytest.fixture
def primary16() -> Iterator[EmbeddedPostgres]:
    """A primary of PostgreSQL 16 or newer (logical decoding on a standby is 16's)."""
    with _primary(_bindir(16)) as pg:
        yield pg


def test_chunked_baseline_and_backfill_on_a_hot_standby_end_equal_to_the_primary(
    primary16: EmbeddedPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 32 on a hot standby: the chunks are read there in read-only transactions
    bracketed by ``pg_current_snapshot()`` and ``pg_last_wal_replay_lsn()`` (nothing is
    written anywhere) while writers run on the primary; the chunked start-up baseline and an
    on-demand backfill both leave the target equal to the primary."""
    primary = primary16
    primary.execute(
        "INSERT INTO items SELECT g, 0, 'more' FROM generate_series(501, 3000) g", "app"
    )
    primary.execute("CREATE PUBLICATION cb_pub FOR TABLE items", "app")
    standby = primary.standby()
    caplog.set_level(logging.INFO, logger="laredo.engine.backfiller")
    caplog.set_level(logging.INFO, logger="laredo_source_pg")
    try:
        chunked = {"mode": "chunked", "chunk_rows": 200}
        src = _standby_source(standby, "cb", catalog_check_interval=0.3, baseline=chunked)
        target = RecordingTarget(durable=False)
        eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
        try:
            with _kicking(primary):
                with _Writers(primary.dsn("app")) as writers:
                    eng.start()
                    assert eng.await_ready(60)
                    start = writers.committed
                    progress = eng.backfill("pg", ITEMS, "id <= 2000", chunk_rows=100, timeout=60)
                    assert progress["done"] and progress["chunks"] >= 15, progress
                    assert writers.committed > start, "no write on the primary during the backfill"
                expected = _rows(primary)
                wait_until(lambda: dict(target.items()) == expected, 60, what="target == primary")
            assert _slot(standby, "cb", "slot_type") == ("logical",)
            baselines = [c for c in target.calls if c[0] == "on_baseline_complete"]
            assert len(baselines) == 1
        finally:
            eng.stop()
    finally:
        standby.close()
    lines = [
        m
        for m in (r.getMessage() for r in caplog.records)
        if m.startswith("backfill of public.items: ") and "chunk(s)" in m
    ]
    assert len(lines) == 2 and "16 chunk(s)" in lines[0], lines  # 15 x 200 and an empty one
    assert "catalog check of public.items failed" not in caplog.text  # its LSN on a standby


def test_check_flags_idle_replication_slot_timeout_on_18(primary: EmbeddedPostgres) -> None:
    if _major(primary.bindir) < 18:
        pytest.skip("idle_replication_slot_timeout is PostgreSQL 18's")
    opts = {"connection": primary.dsn("app"), "slot_mode": "stateful", "slot_name": "idle"}
    assert "IDLE_SLOT_TIMEOUT" not in _check(**opts)
    primary.execute("ALTER SYSTEM SET idle_replication_slot_timeout = '1h'")
    primary.execute("SELECT pg_reload_conf()")
    wait_until(lambda: primary.execute("SHOW idle_replication_slot_timeout") == [("1h",)])
    severity, text = _check(**opts)["IDLE_SLOT_TIMEOUT"]
    assert severity is Severity.WARNING and "1h" in text
    assert "heartbeat is not needed" in text and "idle_replication_slot_timeout = 0" in text
    assert "IDLE_SLOT_TIMEOUT" not in _check(**{**opts, "slot_mode": "ephemeral"})


def test_a_slot_invalidated_for_idleness_is_handled_like_any_invalidated_slot(
    primary: EmbeddedPostgres,
) -> None:
    if _major(primary.bindir) < 18:
        pytest.skip("idle_replication_slot_timeout is PostgreSQL 18's")
    primary.execute("ALTER SYSTEM SET idle_replication_slot_timeout = '1s'")
    primary.execute("SELECT pg_reload_conf()")

    def make(**kw: Any) -> PostgresSource:
        return PostgresSource(
            primary.dsn("app"),
            slot_mode="stateful",
            slot_name="idle",
            publication={"create": True},
            **kw,
        )

    src = make()
    src.init(SourceConfig([ITEMS]))
    src.baseline([ITEMS], lambda t, r: None)
    src.close()

    def invalidated() -> bool:
        primary.execute("CHECKPOINT")
        return _slot(primary, "idle", "invalidation_reason") == ("idle_timeout",)

    wait_until(invalidated, 30, interval=0.5, what="slot invalidated for idleness")
    strict = make(on_slot_invalidated="fail", lease=False)
    try:
        strict.init(SourceConfig([ITEMS]))
        assert [e.code for e in strict.validate_tables([ITEMS])] == ["SLOT_INVALIDATED"]
    finally:
        strict.close()
    src = make()
    try:
        src.init(SourceConfig([ITEMS]))  # drops the invalidated slot
        assert src.last_acked_position() is None  # so the engine baselines
        assert _slot(primary, "idle", "slot_name") is None
    finally:
        src.close()
