"""The ``delta`` target's own guarantees: options, bad input, durability, resume, schemas,
unchanged TOAST columns, maintenance (the generic ones are in test_conformance.py)."""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import laredo
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from laredo.errors import TargetError
from laredo.plugins import PluginManager
from laredo.testing import wait_until
from laredo.types import ChangeAction, ChangeEvent, ColumnDefinition, SchemaChangeAction
from laredo_target_delta import DeltaTarget, DeltaTargetOptions, history
from laredo_target_delta.writer import DeltaConfigError

from .conftest import COLUMNS, ITEMS, Archive, item


def _rows(uri: str) -> dict[int, dict[str, Any]]:
    from laredo_target_delta import rows_as_of

    rows, _, _ = rows_as_of(uri, "999999999")
    return {r["id"]: r for r in rows}


def _ev(action: ChangeAction, pos: int, new: Any = None, old: Any = None) -> ChangeEvent:
    return ChangeEvent(ITEMS, action, pos, new_values=new, old_values=old)


@pytest.fixture
def registry() -> Any:
    pm = PluginManager(autoload=False)
    import laredo_target_delta._plugin as plugin

    pm.register(plugin, provider="laredo-target-delta")
    return pm.registry("target")


def test_entry_point_and_defaults(registry: Any, tmp_path: Path) -> None:
    from importlib.metadata import entry_points

    assert {ep.name: ep.value for ep in entry_points(group="laredo")}["delta"] == (
        "laredo_target_delta._plugin"
    )
    t = registry.build("delta", uri=str(tmp_path / "x"), storage_options={"AWS_SECRET": "k3y"})
    o = t.options
    assert (o.flush_interval, o.flush_rows, o.maintenance.compact_every) == (10.0, 300_000, 0)
    assert isinstance(t, laredo.DurablePositionTarget) and isinstance(t, laredo.BatchTarget)
    assert "k3y" not in repr(t) and "***" in repr(t)


def test_bad_options_name_the_key(registry: Any) -> None:
    with pytest.raises(laredo.ConfigError) as info:
        registry.build("delta", uri="s3://user:pw@bucket/t", flush_rows=0, flushrows=1)
    text = str(info.value)
    assert "uri" in text and "storage_options" in text and "pw" not in text.replace("pw@", "")
    assert "flush_rows" in text and "flushrows" in text


def test_unwritable_uri_names_the_key(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    t = DeltaTarget(DeltaTargetOptions(uri=str(blocker / "t")))
    with pytest.raises(TargetError, match=r"uri = .*file/t.*creating the directory failed"):
        t.on_init(ITEMS, COLUMNS)


def test_a_table_of_another_table_is_refused(archive: Archive) -> None:
    t = DeltaTarget(DeltaTargetOptions(uri=archive.uri))
    with pytest.raises(DeltaConfigError, match=r"uri = .* holds table public.items; give each"):
        t.on_init(laredo.Table("public", "orders"), COLUMNS)


def test_no_primary_key_is_refused(tmp_path: Path) -> None:
    t = DeltaTarget(DeltaTargetOptions(uri=str(tmp_path / "t")))
    with pytest.raises(DeltaConfigError, match="no primary key"):
        t.on_init(ITEMS, [ColumnDefinition("x", "text", 1)])


def test_a_reordered_primary_key_needs_a_new_version(tmp_path: Path) -> None:
    """The key is compared in key order (``primary_key_ordinal``), not table order."""

    def cols(a: int, b: int) -> list[ColumnDefinition]:
        return [
            ColumnDefinition("a", "int4", 1, False, True, a, 23),
            ColumnDefinition("b", "int4", 2, False, True, b, 23),
        ]

    t = DeltaTarget(DeltaTargetOptions(uri=str(tmp_path / "k"), flush_interval=0))
    t.on_init(ITEMS, cols(1, 2))
    t.on_baseline_rows(ITEMS, [{"a": 1, "b": 2}])
    t.set_change_position(10)
    t.on_baseline_complete(ITEMS)
    assert t.on_schema_change(ITEMS, cols(1, 2), cols(1, 2)).action is SchemaChangeAction.CONTINUE
    reply = t.on_schema_change(ITEMS, cols(1, 2), cols(2, 1))
    assert reply.action is SchemaChangeAction.RE_BASELINE
    t.on_close(ITEMS)


def test_incompatible_columns_refuse_changes_until_a_baseline(archive: Archive) -> None:
    archive.close()
    changed = [*COLUMNS[:2], ColumnDefinition("price", "text", 3, True, False, 0, 25)]
    t = DeltaTarget(DeltaTargetOptions(uri=archive.uri, flush_interval=0))
    t.on_init(ITEMS, changed)
    with pytest.raises(DeltaConfigError, match=r"uri = .* holds columns .*price numeric"):
        t.apply_changes(ITEMS, [_ev(ChangeAction.INSERT, 50, new={"id": 9})])
    t.on_baseline_rows(ITEMS, [{"id": 1, "name": "a", "price": "cheap"}])
    t.set_change_position(60)
    t.on_baseline_complete(ITEMS)  # a new version with the new columns
    t.apply_changes(ITEMS, [_ev(ChangeAction.INSERT, 70, new={"id": 2, "price": "free"})])
    t.set_change_position(71)  # a heartbeat: 70 is whole (reads skip a partial commit)
    t.flush()
    assert _rows(archive.uri)[2]["price"] == "free"
    assert [c.kind for c in history(archive.uri)] == ["baseline", "baseline", "schema", "changes"]
    assert all(c.position for c in history(archive.uri))
    t.on_close(ITEMS)


def _numeric(precision: int | None, scale: int | None) -> list[ColumnDefinition]:
    price = ColumnDefinition("price", "numeric", 3, True, False, 0, 1700, None, 0, precision, scale)
    return [*COLUMNS[:2], price]


def _price_type(uri: str) -> str:
    return str(pa.schema(DeltaTable(uri).schema().to_arrow()).field("price").type)


def test_a_numeric_stored_as_text_stays_text_when_the_source_gives_its_precision(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "items")
    t = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0))
    t.on_init(ITEMS, _numeric(None, None))  # as the source described numerics before
    t.on_baseline_rows(ITEMS, [{"id": 1, "name": "a", "price": Decimal("1.50")}])
    t.set_change_position(10)
    t.on_baseline_complete(ITEMS)
    t.on_close(ITEMS)
    assert _price_type(uri) in ("string", "large_string", "string_view")
    t = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0))
    t.on_init(ITEMS, _numeric(10, 2))  # no re-baseline, no schema commit: exact text goes on
    new = {"id": 2, "price": Decimal("2.25")}
    t.apply_changes(ITEMS, [_ev(ChangeAction.INSERT, "20", new=new)])
    t.set_change_position("21")  # a heartbeat: 20 is whole
    t.flush()
    t.on_close(ITEMS)
    assert _price_type(uri) in ("string", "large_string", "string_view")
    assert _rows(uri)[2]["price"] == Decimal("2.25")
    assert [c.kind for c in history(uri)] == ["baseline", "changes"]


def test_a_narrower_or_wider_decimal_needs_a_new_version(tmp_path: Path) -> None:
    uri = str(tmp_path / "items")
    t = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0))
    t.on_init(ITEMS, _numeric(10, 2))
    t.on_baseline_rows(ITEMS, [{"id": 1, "name": "a", "price": Decimal("1.50")}])
    t.set_change_position(10)
    t.on_baseline_complete(ITEMS)
    assert _price_type(uri) == "decimal128(10, 2)"
    reply = t.on_schema_change(ITEMS, _numeric(10, 2), _numeric(20, 4))
    assert reply.action == SchemaChangeAction.RE_BASELINE
    t.on_close(ITEMS)
    t = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0))
    t.on_init(ITEMS, _numeric(20, 4))
    with pytest.raises(DeltaConfigError, match=r"uri = .* holds columns"):
        t.apply_changes(ITEMS, [_ev(ChangeAction.INSERT, "20", new={"id": 2})])
    t.on_baseline_rows(ITEMS, [{"id": 1, "name": "a", "price": Decimal("123456789012.1234")}])
    t.set_change_position("30")
    t.on_baseline_complete(ITEMS)
    t.on_close(ITEMS)
    assert _price_type(uri) == "decimal128(20, 4)"
    assert _rows(uri)[1]["price"] == Decimal("123456789012.1234")


def test_durable_only_after_the_commit_and_never_half_a_transaction(tmp_path: Path) -> None:
    t = DeltaTarget(DeltaTargetOptions(uri=str(tmp_path / "t"), flush_interval="50ms"))
    t.on_init(ITEMS, COLUMNS)
    t.set_change_position(10)
    t.on_baseline_complete(ITEMS)
    assert t.durable_position() == 10
    t.apply_changes(ITEMS, [_ev(ChangeAction.INSERT, 20, new=item(1))])
    t.apply_changes(ITEMS, [_ev(ChangeAction.INSERT, 20, new=item(2))])  # 20 still open
    time.sleep(0.4)
    assert t.durable_position() == 10 and t.pending_changes() == 2  # nothing committed
    t.apply_changes(ITEMS, [_ev(ChangeAction.INSERT, 30, new=item(3))])  # 20 is complete
    wait_until(lambda: t.durable_position() == 20, 10, "durable 20", interval=0.02)
    assert sorted(_rows(t.options.uri)) == [1, 2]  # 30 is not in the table yet
    t.set_change_position(40)  # a heartbeat: 30 is complete
    wait_until(lambda: t.durable_position() == 30, 10, "durable 30", interval=0.02)
    t.on_close(ITEMS)
    assert [c.position for c in history(t.options.uri)] == ["10", "20", "30"]


def test_commits_while_the_stream_goes_on_keep_their_positions(tmp_path: Path) -> None:
    t = DeltaTarget(
        DeltaTargetOptions(uri=str(tmp_path / "t"), flush_interval="20ms", flush_rows=300)
    )
    t.on_init(ITEMS, COLUMNS)
    t.set_change_position(10)
    t.on_baseline_complete(ITEMS)
    last = 10
    for txn in range(1, 201):  # the flusher commits while transactions keep completing
        last = 10 + txn
        t.apply_changes(
            ITEMS, [_ev(ChangeAction.INSERT, last, new=item(txn * 100 + i)) for i in range(20)]
        )
    t.set_change_position(last + 1)
    wait_until(lambda: t.durable_position() == last, 60, f"durable {last}", interval=0.02)
    commits = history(t.options.uri)
    assert len(commits) > 3 and all(c.position and c.position.isdigit() for c in commits)
    assert len(_rows(t.options.uri)) == 4000
    t.on_close(ITEMS)


def test_transactions_completed_during_a_commit_are_committed_at_their_position(
    tmp_path: Path,
) -> None:
    t = DeltaTarget(DeltaTargetOptions(uri=str(tmp_path / "t"), flush_interval="10ms"))
    t.on_init(ITEMS, COLUMNS)
    t.set_change_position(10)
    t.on_baseline_complete(ITEMS)
    writer = t._writer
    assert writer is not None
    merge, entered, gate = writer.merge, threading.Event(), threading.Event()

    def slow_merge(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        gate.wait(10)
        return merge(*args, **kwargs)

    writer.merge = slow_merge  # type: ignore[method-assign]
    t.apply_changes(ITEMS, [_ev(ChangeAction.INSERT, 20, new=item(1))])
    t.apply_changes(ITEMS, [_ev(ChangeAction.INSERT, 30, new=item(2))])  # 20 complete
    assert entered.wait(10)  # the commit of 20 is running
    t.apply_changes(ITEMS, [_ev(ChangeAction.INSERT, 40, new=item(3))])  # 30 complete
    t.set_change_position(41)  # 40 complete; nothing arrives after this
    gate.set()
    wait_until(lambda: t.durable_position() == 40, 10, "durable 40", interval=0.02)
    assert [c.position for c in history(t.options.uri)] == ["10", "20", "40"]
    t.on_close(ITEMS)


def test_a_restored_snapshot_is_a_version_at_its_position(tmp_path: Path) -> None:
    from laredo.types import TableSnapshotInfo

    t = DeltaTarget(DeltaTargetOptions(uri=str(tmp_path / "t"), flush_interval=0))
    t.on_init(ITEMS, COLUMNS)
    t.restore_snapshot(
        TableSnapshotInfo(ITEMS, 2, tuple(COLUMNS), position="70"), [item(1), item(2)]
    )
    assert t.durable_position() == "70"
    assert [(c.kind, c.position) for c in history(t.options.uri)] == [("baseline", "70")]
    assert sorted(_rows(t.options.uri)) == [1, 2]
    t.on_close(ITEMS)


def test_restart_skips_what_is_committed(archive: Archive) -> None:
    p = archive.commit(("insert", item(5)))
    archive.close()
    t = DeltaTarget(DeltaTargetOptions(uri=archive.uri, flush_interval=0))
    t.on_init(ITEMS, COLUMNS)
    assert t.durable_position() == str(p)  # no bind_pipeline: positions as text
    # redelivered: the insert at p (already committed) then a later change
    t.apply_changes(ITEMS, [_ev(ChangeAction.INSERT, str(p), new=item(5, name="dup"))])
    t.apply_changes(ITEMS, [_ev(ChangeAction.UPDATE, str(p + 10), new=item(1, name="new"))])
    t.set_change_position(str(p + 11))  # a heartbeat: p + 10 is whole
    t.flush()
    rows = _rows(archive.uri)
    assert rows[5]["name"] == "n5" and rows[1]["name"] == "new"
    t.on_close(ITEMS)


def test_unchanged_toast_columns_keep_their_values(archive: Archive) -> None:
    t = archive.target
    t.apply_changes(
        ITEMS,
        [
            _ev(ChangeAction.UPDATE, 20, new={"id": 1, "name": "only name"}),  # doc, price kept
            _ev(ChangeAction.INSERT, 20, new=item(7)),
            _ev(ChangeAction.UPDATE, 20, new={"id": 7, "price": Decimal("9.99")}),  # from buffer
        ],
    )
    t.set_change_position(21)  # a heartbeat: 20 is whole
    t.flush()
    rows = _rows(archive.uri)
    assert rows[1] == item(1, name="only name")
    assert rows[7] == item(7, price=Decimal("9.99"))


def test_delete_of_an_absent_key_with_inserts_in_one_commit(archive: Archive) -> None:
    # delta-rs 1.6 failed such a MERGE when CDF was on; a delete row of an absent key is inert
    archive.commit(("delete", {"id": 12345}), ("insert", item(8)), ("delete", {"id": 0}))
    assert sorted(_rows(archive.uri)) == [1, 2, 8]
    last = history(archive.uri)[-1]
    assert (last.inserted, last.deleted) == (1, 2)  # delete rows written, one of them inert


def test_many_deletes_on_the_flusher_thread(tmp_path: Path) -> None:
    # a 60,000-literal IN list crashed delta-rs's planner on a thread's stack: lookups are chunked
    t = DeltaTarget(DeltaTargetOptions(uri=str(tmp_path / "t"), flush_interval="10ms"))
    t.on_init(ITEMS, COLUMNS)
    t.on_baseline_rows(ITEMS, [item(i) for i in range(100)])
    t.set_change_position(10)
    t.on_baseline_complete(ITEMS)
    deletes = [_ev(ChangeAction.DELETE, 20, old={"id": i}) for i in range(0, 490_000, 7)]
    t.apply_changes(ITEMS, deletes)
    t.set_change_position(30)
    wait_until(lambda: t.durable_position() == 20, 60, "durable 20", interval=0.05)
    assert sorted(_rows(t.options.uri)) == [i for i in range(100) if i % 7]
    t.on_close(ITEMS)


def test_added_columns_evolve_other_changes_rebaseline(archive: Archive) -> None:
    t = archive.target
    added = [*COLUMNS, ColumnDefinition("extra", "int8", 5, True, False, 0, 20)]
    assert t.on_schema_change(ITEMS, COLUMNS, added).action is SchemaChangeAction.CONTINUE
    archive.commit(("insert", item(9, extra=42)))
    rows = _rows(archive.uri)
    assert rows[9]["extra"] == 42 and rows[0]["extra"] is None
    assert history(archive.uri)[-2].kind == "schema"
    retyped = [*COLUMNS[:3], ColumnDefinition("doc", "text", 4, True, False, 0, 25)]
    assert t.on_schema_change(ITEMS, added, retyped).action is SchemaChangeAction.RE_BASELINE


def test_maintenance_compacts_with_the_position(tmp_path: Path) -> None:
    uri = str(tmp_path / "m")
    a = Archive.__new__(Archive)
    a.uri = uri
    a.target = DeltaTarget(
        DeltaTargetOptions(uri=uri, flush_interval=0, maintenance={"compact_every": 2})
    )
    a.target.on_init(ITEMS, COLUMNS)
    a.position = 10
    a.target.set_change_position(10)
    a.target.on_baseline_rows(ITEMS, [item(0)])
    a.target.on_baseline_complete(ITEMS)
    a.commit(("insert", item(1)))
    p = a.commit(("insert", item(2)))
    last = history(uri)[-1]
    assert last.operation == "OPTIMIZE" and last.position == str(p)
    assert sorted(_rows(uri)) == [0, 1, 2]
    assert DeltaTable(uri).version() == last.version
    a.close()


def test_plugin_discovery_loads_no_native_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, laredo; from laredo.plugins import PluginManager; "
        "PluginManager().registry('target'); "
        "print('deltalake' in sys.modules, 'pyarrow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("redelivered_from", ["20", "10"])
def test_a_partial_commit_at_shutdown_is_redelivered_and_applied_once(
    tmp_path: Path, redelivered_from: str
) -> None:
    """Shutdown in the middle of a large transaction: the close commits what arrived, marked
    partial; the durable position stays before that transaction; a restart gets it (and maybe
    more) again and the table ends equal to applying every change once."""
    from laredo_target_delta import rows_as_of

    uri = str(tmp_path / "items")
    t = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0))
    t.on_init(ITEMS, COLUMNS)
    t.on_baseline_rows(ITEMS, [item(i) for i in range(10)])
    t.set_change_position("10")
    t.on_baseline_complete(ITEMS)
    txn20 = [
        _ev(ChangeAction.INSERT, "20", new=item(100)),
        _ev(ChangeAction.UPDATE, "20", new=item(1, name="t20")),
    ]
    big = [_ev(ChangeAction.INSERT, "30", new=item(200 + i)) for i in range(400)]
    big += [
        _ev(ChangeAction.UPDATE, "30", new=item(2, name="big")),
        _ev(ChangeAction.DELETE, "30", old={"id": 3}),
        _ev(ChangeAction.UPDATE, "30", new={"id": 200, "name": "again"}),  # price, doc: TOAST
        _ev(ChangeAction.DELETE, "30", old={"id": 201}),
        _ev(ChangeAction.INSERT, "30", new=item(201, name="back")),
    ]
    txn40 = [_ev(ChangeAction.UPDATE, "40", new=item(200, name="t40", price=Decimal("4.00")))]
    expected = {i: item(i) for i in range(10)}
    for e in [*txn20, *big, *txn40]:
        if e.action == ChangeAction.DELETE:
            expected.pop(e.old_values["id"], None)  # type: ignore[index]
        else:
            assert e.new_values is not None
            key = e.new_values["id"]
            expected[key] = {**expected.get(key, {}), **e.new_values}

    t.apply_changes(ITEMS, txn20)
    t.apply_changes(ITEMS, big[:250])  # the rest of transaction 30 has not arrived
    t.on_close(ITEMS)
    commits = history(uri)
    assert commits[-1].partial and commits[-1].position == "30"
    assert t.durable_position() == "20"  # what the engine may acknowledge: not 30
    _, at, _ = rows_as_of(uri, "35")
    assert at == "10"  # a point-in-time read never chooses the partial commit

    t = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0))
    t.on_init(ITEMS, COLUMNS)
    assert t.durable_position() == "10"  # resumes after the last whole commit
    again = [e for e in [*txn20, *big, *txn40] if e.position > redelivered_from]
    for pos in ("20", "30", "40"):
        t.apply_changes(ITEMS, [e for e in again if e.position == pos])
    t.set_change_position("50")  # a heartbeat: 40 is complete
    t.flush()
    t.on_close(ITEMS)
    rows, at, _ = rows_as_of(uri, "45")
    assert at == "40"
    assert sorted(r["id"] for r in rows) == sorted(expected)  # no key twice, none lost
    assert {r["id"]: r for r in rows} == expected
    assert not history(uri)[-1].partial


def test_a_value_that_does_not_fit_the_decimal_names_the_column_and_the_fix(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "items")
    t = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0))
    t.on_init(ITEMS, _numeric(4, 2))
    with pytest.raises(TargetError, match=r"column 'price' \(decimal128\(4, 2\)\).*NaN.*ALTER"):
        t.on_baseline_rows(ITEMS, [{"id": i, "price": Decimal("NaN")} for i in range(50_000)])
    t.on_close(ITEMS)
