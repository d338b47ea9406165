"""Set-up the laredo-spark tests share: a table's rows in PostgreSQL and in a Delta table
(keyed alike, for ``==``), a stateful source's config, and a driver lost between waves."""

from __future__ import annotations

from typing import Any

import pytest


def pg_rows(db: Any, table: str, key: int = 1) -> dict[Any, dict[str, Any]]:
    """``SELECT * FROM table`` by its first ``key`` columns (one: the value; more: a tuple)."""
    with db.connect() as conn:
        cur = conn.execute(f"SELECT * FROM {table}")
        names = [d.name for d in cur.description]
        return {
            r[0] if key == 1 else tuple(r[:key]): dict(zip(names, r, strict=True))
            for r in cur.fetchall()
        }


def delta_rows(
    uri: str, key: tuple[str, ...] = ("id",), storage: dict[str, str] | None = None
) -> dict[Any, dict[str, Any]]:
    """The Delta table's current rows by ``key`` (one column: the value; more: a tuple); a
    key held twice fails the test."""
    from laredo_target_delta import rows_as_of

    rows, _, _ = rows_as_of(uri, "FFFFFFFF/FFFFFFFF", storage)
    out = {r[key[0]] if len(key) == 1 else tuple(r[k] for k in key): r for r in rows}
    assert len(out) == len(rows), "a key is in the Delta table twice"
    return out


def pg_source(db: Any, **extra: Any) -> dict[str, Any]:
    """A ``postgresql`` source's config on the test database's stateful slot, the publication
    created; ``extra`` keys added (or replacing)."""
    return {
        "type": "postgresql",
        "connection": db.dsn,
        "slot_mode": "stateful",
        "slot_name": db.slot_name,
        "publication": {"create": True},
        "status_interval": 0.2,
        **extra,
    }


class DriverLost(Exception):
    """The driver, lost between two waves of a chunked baseline."""


def lose_driver_after_two_waves(monkeypatch: pytest.MonkeyPatch, sink: type) -> list[int]:
    """Make ``sink.write_chunks`` write two waves, then raise :class:`DriverLost`; the list
    the waves' sizes are appended to (``monkeypatch.undo()`` restores the sink)."""
    write = sink.write_chunks  # type: ignore[attr-defined]
    waves: list[int] = []

    def dies_after_two_waves(self: Any, spark: Any, job: Any, chunks: Any, run: Any) -> Any:
        if len(waves) == 2:
            raise DriverLost
        waves.append(len(chunks))
        return write(self, spark, job, chunks, run)

    monkeypatch.setattr(sink, "write_chunks", dies_after_two_waves)
    return waves
