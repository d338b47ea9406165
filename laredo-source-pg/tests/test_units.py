from __future__ import annotations

import importlib.metadata
import struct
import subprocess
import sys
from typing import Any

import laredo_source_pg
import pytest
from laredo import secrets
from laredo.errors import ConfigError, SourceError, retry_class
from laredo.plugins import PluginManager
from laredo.types import ChangeAction, ChangeEvent, TableIdentifier
from laredo_source_pg import _plugin, dsn
from laredo_source_pg.dsn import mask_dsn
from laredo_source_pg.lsn import format_lsn, parse_lsn
from laredo_source_pg.options import PostgresSourceOptions
from laredo_source_pg.pgoutput import DecodeError, PgOutputDecoder
from laredo_source_pg.source import PostgresSource


def test_lsn_round_trip_and_format() -> None:
    assert format_lsn(0x1A2B3C4D5E) == "1A/2B3C4D5E"
    assert parse_lsn("1A/2B3C4D5E") == 0x1A2B3C4D5E
    assert parse_lsn("1a/2b3c4d5e") == 0x1A2B3C4D5E
    assert parse_lsn("0/10") > parse_lsn("0/2")
    assert format_lsn(parse_lsn("0/00000001")) == "0/1"  # not zero-padded, as PostgreSQL
    assert format_lsn(0x1BEF0A8) == "0/1BEF0A8"
    for lsn in (0, 1, 2**32, 2**64 - 1):
        assert parse_lsn(format_lsn(lsn)) == lsn


@pytest.mark.parametrize(
    "bad", ["", "noslash", "/", "/0", "0/", "xyz/1", "1/2/3", "100000000/0", "0/100000000", " 1 /2"]
)
def test_lsn_rejects_bad_input(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid LSN") as info:
        parse_lsn(bad)
    assert "'X/Y'" in str(info.value) and "pg_current_wal_lsn()" in str(info.value)


def test_position_from_string_names_the_lsn_form() -> None:
    src = PostgresSource("postgresql://u@localhost/db")
    assert src.position_from_string(" 16/b374d848 ") == 0x16B374D848
    for bad in ("1234", "16:B374D848", "0x16/B374D848"):
        with pytest.raises(ValueError, match=r"expected a PostgreSQL LSN 'X/Y'"):
            src.position_from_string(bad)


def test_format_lsn_rejects_non_int() -> None:
    with pytest.raises(ValueError):
        format_lsn(-1)
    with pytest.raises(ValueError):
        format_lsn("0/1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("postgresql://bob:s3cr3t@db:5432/app", "s3cr3t"),
        ("postgres://bob:s3cr3t@db/app?sslmode=require", "s3cr3t"),
        ("host=db password=s3cr3t dbname=app", "s3cr3t"),
        ("host=db password='s3 cr\\'3t' dbname=app", "cr"),
        ("postgresql://db/app?password=s3cr3t&x=1", "s3cr3t"),
    ],
)
def test_mask_dsn(dsn: str, secret: str) -> None:
    masked = mask_dsn(dsn)
    assert secret not in masked
    assert "***" in masked


def test_source_repr_and_config_errors_mask_password() -> None:
    src = PostgresSource("postgresql://bob:hunter2@localhost/app")
    assert "hunter2" not in repr(src)
    with pytest.raises(ConfigError) as info:
        PostgresSource("postgresql://bob:hunter2@localhost/app", slot_mode="sometimes")
    assert "hunter2" not in str(info.value)
    assert "slot_mode" in str(info.value)
    with pytest.raises(ConfigError) as info:
        PostgresSource("host=x password=hunter2 = = =")
    assert "hunter2" not in str(info.value)
    assert "connection" in str(info.value)


def test_config_errors_list_every_problem() -> None:
    with pytest.raises(ConfigError) as info:
        PostgresSource(
            "host=x",
            slot_name="Bad-Name",
            publication={"create": True, "publish": "insert,upsert", "bogus": 1},
            reconnect={"max_attempts": 0},
        )
    text = str(info.value)
    for needle in ("slot_name", "publish", "bogus", "max_attempts"):
        assert needle in text, text
    assert len(info.value.problems) >= 4


def test_plugin_registered_by_name() -> None:
    (ep,) = [e for e in importlib.metadata.entry_points(group="laredo") if e.name == "postgresql"]
    assert ep.value == "laredo_source_pg._plugin"
    # Only our plugin: other packages' plugins (work in progress elsewhere) cannot interfere.
    pm = PluginManager(autoload=False)
    pm.register(_plugin, provider="laredo-source-pg")
    sources = pm.registry("source")
    src = sources.build(
        "postgresql",
        connection="host=localhost dbname=app",
        slot_mode="stateful",
        slot_name="s1",
        publication={"name": "pub1", "tables": {"public.users": {"row_filter": "id > 0"}}},
        reconnect={"max_attempts": 3},
    )
    assert isinstance(src, PostgresSource)
    assert src.supports_resume()
    assert src.publication_name == "pub1"
    assert src.options.reconnect.max_attempts == 3
    assert src.options.publication.create is None  # unset: create it when it does not exist
    with pytest.raises(ConfigError, match="unknown option"):
        sources.build("postgresql", connection="host=x", slot_nmae="typo")


def test_defaults() -> None:
    src = PostgresSource("host=localhost")
    assert src.slot_name == "laredo_slot"
    assert src.publication_name == "laredo_slot_pub"
    assert not src.supports_resume()
    assert src.last_acked_position() is None
    assert str(src.state()) == "CLOSED"
    assert src.compare_positions(1, 2) == -1
    assert src.compare_positions(5, 5) == 0
    assert src.compare_positions("0/10", "0/2") == 1
    assert src.compare_positions(None, 0) == -1
    assert src.position_to_string(src.position_from_string("16/b374d848")) == "16/B374D848"
    src.close()  # safe before init
    assert str(src.state()) == "CLOSED"


# -- decoder on hand-built messages ---------------------------------------------------------


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def _relation(relid: int, cols: list[tuple[str, int, bool]], ident: bytes = b"d") -> bytes:
    out = b"R" + struct.pack(">I", relid) + _s("public") + _s("t") + ident
    out += struct.pack(">h", len(cols))
    for name, oid, key in cols:
        out += bytes([1 if key else 0]) + _s(name) + struct.pack(">Ii", oid, -1)
    return out


def _tuple(values: list[bytes | str | None]) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v == "u":
            out += b"u"
        else:
            assert isinstance(v, bytes)
            out += b"t" + struct.pack(">I", len(v)) + v
    return out


def _decoder() -> PgOutputDecoder:
    loaders = {23: int, 25: lambda b: bytes(b).decode()}
    return PgOutputDecoder(
        lambda oid: loaders[oid],
        lambda s, n: TableIdentifier(s, n) if n == "t" else None,
        {TableIdentifier("public", "t"): (("id", 23, -1), ("body", 25, -1), ("note", 25, -1))},
    )


def test_decoder_assembles_transactions_only_at_commit() -> None:
    d = _decoder()
    cols = [("id", 23, True), ("body", 25, False), ("note", 25, False)]
    assert d.feed(b"B" + struct.pack(">QqI", 100, 0, 7)) is None
    assert d.feed(_relation(1, cols)) is None
    assert d.feed(b"I" + struct.pack(">I", 1) + b"N" + _tuple([b"1", b"x", None])) is None
    upd = b"U" + struct.pack(">I", 1) + b"N" + _tuple([b"1", "u", b"n2"])
    assert d.feed(upd) is None
    dele = b"D" + struct.pack(">I", 1) + b"K" + _tuple([b"1", None, None])
    assert d.feed(dele) is None
    assert d.in_transaction
    tx = d.feed(b"C" + struct.pack(">bQQq", 0, 90, 120, 0))
    assert tx is not None and not d.in_transaction
    assert tx.end_lsn == 120 and tx.xid == 7
    e1, e2, e3 = (e for e in tx.items if isinstance(e, ChangeEvent))
    assert [e.action for e in (e1, e2, e3)] == [
        ChangeAction.INSERT,
        ChangeAction.UPDATE,
        ChangeAction.DELETE,
    ]
    assert {e.position for e in (e1, e2, e3)} == {120}  # the commit end LSN
    assert {e.xid for e in (e1, e2, e3)} == {7}
    assert e1.new_values == {"id": 1, "body": "x", "note": None}
    assert e2.new_values == {"id": 1, "note": "n2"}  # TOAST-unchanged column left out...
    assert e2.unchanged_toast == frozenset({"body"})  # ...and named
    assert e2.old_values is None
    assert e3.old_values == {"id": 1}  # key columns only


def _inserts(d: PgOutputDecoder, ids: range) -> list[list[Any]]:
    """Feed inserts; the chunks passed on early (as the stream loop takes them)."""
    chunks = []
    for i in ids:
        done = d.feed(b"I" + struct.pack(">I", 1) + b"N" + _tuple([str(i).encode(), b"x", None]))
        if done is not None:
            assert not done.committed
            chunks.append(done.take_chunk())
    return chunks


def test_decoder_passes_a_big_transaction_on_in_chunks_before_its_commit() -> None:
    d = PgOutputDecoder(
        _decoder()._loader_for,
        lambda s, n: TableIdentifier(s, n) if n == "t" else None,
        {TableIdentifier("public", "t"): (("id", 23, -1), ("body", 25, -1), ("note", 25, -1))},
        chunk_size=4,
    )
    d.feed(b"B" + struct.pack(">QqI", 100, 0, 7))
    d.feed(_relation(1, [("id", 23, True), ("body", 25, False), ("note", 25, False)]))
    chunks = _inserts(d, range(10))
    assert [len(c) for c in chunks] == [4, 4]  # more than 4 pending: all but the last go
    assert all(e.position == 101 for c in chunks for e in c)  # final_lsn + 1: inside the tx
    tx = d.feed(b"C" + struct.pack(">bQQq", 0, 100, 120, 0))
    assert tx is not None and tx.committed and tx.early == 8 and tx.changes == 10
    assert [e.new_values["id"] for e in tx.items] == [8, 9]
    assert {e.position for e in tx.items} == {120}


def test_decoder_skips_what_an_earlier_session_passed_on() -> None:
    d = _decoder()
    d.resume = (100, 3)  # the first 3 changes of the transaction ending at 100 were delivered
    d.feed(b"B" + struct.pack(">QqI", 100, 0, 7))
    d.feed(_relation(1, [("id", 23, True), ("body", 25, False), ("note", 25, False)]))
    _inserts(d, range(5))
    tx = d.feed(b"C" + struct.pack(">bQQq", 0, 100, 120, 0))
    assert tx is not None and [e.new_values["id"] for e in tx.items] == [3, 4]
    assert tx.early == 3 and tx.changes == 5
    d.resume = (999, 3)  # another transaction: nothing skipped
    d.feed(b"B" + struct.pack(">QqI", 200, 0, 8))
    _inserts(d, range(2))
    tx = d.feed(b"C" + struct.pack(">bQQq", 0, 200, 220, 0))
    assert tx is not None and len(tx.items) == 2


def test_decoder_partial_transaction_is_dropped_on_reset() -> None:
    d = _decoder()
    d.feed(b"B" + struct.pack(">QqI", 100, 0, 7))
    d.feed(_relation(1, [("id", 23, True), ("body", 25, False), ("note", 25, False)]))
    d.feed(b"I" + struct.pack(">I", 1) + b"N" + _tuple([b"1", b"x", None]))
    d.reset_session()
    assert not d.in_transaction
    with pytest.raises(DecodeError, match="before its Relation"):
        d.feed(b"B" + struct.pack(">QqI", 100, 0, 8))
        d.feed(b"I" + struct.pack(">I", 1) + b"N" + _tuple([b"2", b"y", None]))


def test_decoder_skips_untracked_and_reports_schema_change() -> None:
    d = _decoder()
    d.feed(b"B" + struct.pack(">QqI", 100, 0, 7))
    other = b"R" + struct.pack(">I", 2) + _s("public") + _s("other") + b"d" + struct.pack(">h", 0)
    d.feed(other)
    d.feed(b"I" + struct.pack(">I", 2) + b"N" + b"garbage that is never decoded")
    d.feed(
        _relation(1, [("id", 23, True), ("body", 25, False), ("note", 25, False), ("x", 23, False)])
    )
    tx = d.feed(b"C" + struct.pack(">bQQq", 0, 90, 120, 0))
    assert tx is not None
    assert len(tx.items) == 1 and tx.changes == 0 and tx.schema == 1
    assert [c.name for c in tx.items[0].relation.columns] == ["id", "body", "note", "x"]


def test_public_names_and_light_imports() -> None:
    assert laredo_source_pg.PostgresSource is PostgresSource
    assert laredo_source_pg.ReconnectOptions().max_attempts == 10
    # The pytest plugin (auto-loaded in every package's tests) and the launcher stay light.
    code = (
        "import sys, laredo_source_pg.pytest_plugin, laredo_source_pg.embedded; "
        "assert 'psycopg' not in sys.modules, 'psycopg imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- construction: options declared once ---------------------------------------------------


def test_source_takes_its_validated_options_model_without_revalidating() -> None:
    opts = PostgresSourceOptions(connection="host=localhost", slot_mode="stateful")
    src = PostgresSource(opts)
    assert src.options is opts
    assert src.supports_resume() and src.publication_name == "laredo_slot_pub"
    with pytest.raises(TypeError, match="not both"):
        PostgresSource(opts, slot_name="other")
    with pytest.raises(ConfigError, match="invalid connection string") as info:
        PostgresSource(PostgresSourceOptions(connection="host=x password=hunter2 = = ="))
    assert "hunter2" not in str(info.value)


def test_keyword_construction_keeps_its_python_errors() -> None:
    assert PostgresSource(connection="host=x").options.connection == "host=x"
    with pytest.raises(TypeError, match="unexpected keyword argument 'slot_nmae'"):
        PostgresSource("host=x", slot_nmae="typo")
    with pytest.raises(TypeError, match="missing 1 required argument: 'connection'"):
        PostgresSource()
    with pytest.raises(TypeError, match="multiple values for argument 'connection'"):
        PostgresSource("host=x", connection="host=y")
    src = PostgresSource("host=x", publication=None, reconnect=None, lease_timeout=None)
    assert src.options.reconnect.max_attempts == 10 and src.options.lease_timeout is None


def test_durations_take_text_and_numbers() -> None:
    src = PostgresSource(
        "host=x",
        status_interval="200ms",
        connect_timeout="5s",
        lease_timeout="1m",
        reconnect={"initial_backoff": "50ms", "max_backoff": 2},
    )
    o = src.options
    assert (o.status_interval, o.connect_timeout, o.lease_timeout) == (0.2, 5.0, 60.0)
    assert (o.reconnect.initial_backoff, o.reconnect.max_backoff) == (0.05, 2.0)
    assert PostgresSource("host=x", status_interval=0.5).options.status_interval == 0.5
    with pytest.raises(ConfigError) as info:
        PostgresSource("host=x", status_interval="soon", connect_timeout=0)
    text = str(info.value)
    assert "status_interval" in text and "invalid duration" in text and "connect_timeout" in text


def test_plugin_builds_from_the_model_with_durations() -> None:
    pm = PluginManager(autoload=False)
    pm.register(_plugin, provider="laredo-source-pg")
    entry = pm.registry("source").get("postgresql")
    assert entry.takes_options and entry.options is PostgresSourceOptions
    src = pm.registry("source").build(
        "postgresql", connection="postgresql://bob:hunter2@h/app", status_interval="250ms"
    )
    assert isinstance(src, PostgresSource) and src.options.status_interval == 0.25
    with pytest.raises(ConfigError) as info:
        pm.registry("source").build("postgresql", connection="host=x password=hunter2 = = =")
    assert "hunter2" not in str(info.value) and "invalid connection string" in str(info.value)
    # A caller passing the validated fields as keywords (not honouring takes_options) works too.
    fields = PostgresSourceOptions.model_validate({"connection": "host=x", "reconnect": {}})
    built = _plugin._factory(**{k: getattr(fields, k) for k in type(fields).model_fields})
    assert isinstance(built, PostgresSource) and built.options == fields


def test_decode_error_is_a_source_error_and_still_a_value_error() -> None:
    assert issubclass(DecodeError, SourceError) and issubclass(DecodeError, ValueError)
    assert retry_class(DecodeError("x")) == "unknown"


def test_dsn_masking_is_cores_rule() -> None:
    assert dsn.mask_text is secrets.mask_text
    assert mask_dsn("postgresql://bob:s3cr3t@db/app") == "postgresql://bob:***@db/app"


def test_mask_dsn_hides_a_key_value_password_containing_an_ampersand() -> None:
    assert "cd" not in mask_dsn("host=db password=ab&cd dbname=app")


def test_a_backfill_where_is_one_condition() -> None:
    from laredo.errors import ConfigError
    from laredo_source_pg.chunks import check_where

    assert check_where("  id < 10 AND note <> 'x' ") == "id < 10 AND note <> 'x'"
    for bad, why in (
        ("", "empty"),
        ("true; DROP TABLE t", "';'"),
        ("id > 1 -- x", "comment"),
        ("id > 1 /* x */", "comment"),
    ):
        with pytest.raises(ConfigError, match=why):
            check_where(bad)
