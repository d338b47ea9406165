"""A small decoder for PostgreSQL's ``pgoutput`` logical-replication protocol (versions 1 and 2).

Only what a change stream needs, without in-progress transaction streaming (``streaming`` off,
so versions 1 and 2 carry the same messages): Begin, Commit, Relation, Insert, Update, Delete,
Truncate; Origin, Type and logical Message are skipped. Column values arrive in text format and
are loaded with psycopg's loaders for the column's type OID, so values have the same Python
types as rows read by a psycopg cursor on the same connection.

The decoder assembles transactions: :meth:`PgOutputDecoder.feed` returns a
:class:`Transaction` when a Commit arrives, never before, so a partial transaction (connection
lost mid-way) is never seen by the caller. Changes of tables the caller does not track are
skipped without decoding their values.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from laredo.errors import SourceError
from laredo.types import ChangeAction, TableIdentifier

__all__ = [
    "PG_EPOCH",
    "DecodeError",
    "PgOutputDecoder",
    "Relation",
    "RelationColumn",
    "SchemaItem",
    "Transaction",
    "pg_timestamp",
]

PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_EPOCH_OFFSET_US = 946_684_800_000_000  # 2000-01-01 minus 1970-01-01, in microseconds

_BEGIN = struct.Struct(">QqI")
_COMMIT = struct.Struct(">bQQq")
_I32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_REL_COL = struct.Struct(">Ii")

INSERT = ChangeAction.INSERT
UPDATE = ChangeAction.UPDATE
DELETE = ChangeAction.DELETE
TRUNCATE = ChangeAction.TRUNCATE


class DecodeError(SourceError, ValueError):
    """A pgoutput message this decoder cannot parse (a ``SourceError``; still a ``ValueError``
    for callers of 0.1)."""


def pg_timestamp(us: int) -> datetime:
    """Microseconds since 2000-01-01 UTC -> aware ``datetime``."""
    try:
        return PG_EPOCH + timedelta(microseconds=us)
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC) if us > 0 else datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class RelationColumn:
    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(slots=True)
class Relation:
    """A Relation message: the columns a table's tuples carry (in order) and their loaders."""

    relid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[RelationColumn, ...]
    table: TableIdentifier
    tracked: bool
    names: tuple[str, ...] = ()
    loaders: tuple[Callable[[Any], Any], ...] = ()
    key_mask: tuple[bool, ...] = ()
    decode_row: Callable[[bytes, int], tuple[dict[str, Any], frozenset[str] | None, int]] | None = (
        None
    )
    decode_key: Callable[[bytes, int], tuple[dict[str, Any], frozenset[str] | None, int]] | None = (
        None
    )

    @property
    def signature(self) -> tuple[tuple[str, int], ...]:
        return tuple((c.name, c.type_oid) for c in self.columns)


@dataclass(frozen=True, slots=True)
class SchemaItem:
    """A tracked table's columns changed (in stream order, inside a transaction)."""

    relation: Relation
    previous: tuple[tuple[str, int], ...] | None


@dataclass(slots=True)
class Transaction:
    """One committed transaction. ``items`` hold, in order, change tuples
    ``(table, action, new_values, old_values, unchanged_toast)`` and :class:`SchemaItem` s."""

    xid: int
    final_lsn: int
    commit_time: datetime | None
    end_lsn: int = 0
    commit_lsn: int = 0
    items: list[Any] = field(default_factory=list)
    changes: int = 0


LoaderFactory = Callable[[int], Callable[[Any], Any]]


class PgOutputDecoder:
    """Turns pgoutput messages into committed :class:`Transaction` s.

    ``loader_for(oid)`` returns a function loading one text-format value of that type.
    ``tracked(schema, table)`` returns the :class:`TableIdentifier` to report, or None to skip
    the table. ``known`` maps tracked tables to the ``(name, type_oid)`` signature the caller
    already knows (from the catalog); a Relation message with another signature yields a
    :class:`SchemaItem`.
    """

    def __init__(
        self,
        loader_for: LoaderFactory,
        tracked: Callable[[str, str], TableIdentifier | None],
        known: dict[TableIdentifier, tuple[tuple[str, int], ...]] | None = None,
    ) -> None:
        self._loader_for = loader_for
        self._tracked = tracked
        self.known: dict[TableIdentifier, tuple[tuple[str, int], ...]] = dict(known or {})
        self.relations: dict[int, Relation] = {}
        self.tx: Transaction | None = None
        self._loader_cache: dict[int, Callable[[Any], Any]] = {}
        self._pending_schema: list[SchemaItem] = []

    # -- session handling ------------------------------------------------------------------
    def reset_session(self) -> None:
        """Forget the partial transaction and relation cache (a new connection re-sends both)."""
        self.tx = None
        self.relations.clear()

    @property
    def in_transaction(self) -> bool:
        return self.tx is not None

    # -- decoding ------------------------------------------------------------------------
    def feed(self, buf: bytes) -> Transaction | None:
        """Decode one pgoutput message; returns the transaction when this is its Commit."""
        kind = buf[0]
        tx = self.tx
        if kind == 73:  # 'I'
            if tx is None:
                raise DecodeError("Insert outside a transaction")
            rel = self.relations.get(_I32.unpack_from(buf, 1)[0]) or self._relation(buf)
            if rel.tracked:
                if buf[5] != 78:  # 'N'
                    raise DecodeError(f"Insert: expected 'N' tuple, got {chr(buf[5])!r}")
                new, _unch, _ = rel.decode_row(buf, 6)  # type: ignore[misc]
                tx.items.append((rel.table, INSERT, new, None, None))
                tx.changes += 1
            return None
        if kind == 85:  # 'U'
            if tx is None:
                raise DecodeError("Update outside a transaction")
            rel = self.relations.get(_I32.unpack_from(buf, 1)[0]) or self._relation(buf)
            if rel.tracked:
                pos = 5
                old = None
                marker = buf[pos]
                if marker == 75:  # 'K'
                    old, _unch, pos = rel.decode_key(buf, pos + 1)  # type: ignore[misc]
                    marker = buf[pos]
                elif marker == 79:  # 'O'
                    old, _unch, pos = rel.decode_row(buf, pos + 1)  # type: ignore[misc]
                    marker = buf[pos]
                if marker != 78:
                    raise DecodeError(f"Update: expected 'N' tuple, got {chr(marker)!r}")
                new, unchanged, _ = rel.decode_row(buf, pos + 1)  # type: ignore[misc]
                tx.items.append((rel.table, UPDATE, new, old, unchanged))
                tx.changes += 1
            return None
        if kind == 68:  # 'D'
            if tx is None:
                raise DecodeError("Delete outside a transaction")
            rel = self.relations.get(_I32.unpack_from(buf, 1)[0]) or self._relation(buf)
            if rel.tracked:
                marker = buf[5]
                if marker == 75:
                    old, _unch, _ = rel.decode_key(buf, 6)  # type: ignore[misc]
                elif marker == 79:
                    old, _unch, _ = rel.decode_row(buf, 6)  # type: ignore[misc]
                else:
                    raise DecodeError(f"Delete: expected 'K' or 'O' tuple, got {chr(marker)!r}")
                tx.items.append((rel.table, DELETE, None, old, None))
                tx.changes += 1
            return None
        if kind == 66:  # 'B'
            final_lsn, ts, xid = _BEGIN.unpack_from(buf, 1)
            self.tx = Transaction(xid, final_lsn, pg_timestamp(ts))
            if self._pending_schema:
                self.tx.items.extend(self._pending_schema)
                self._pending_schema.clear()
            return None
        if kind == 67:  # 'C'
            if tx is None:
                raise DecodeError("Commit outside a transaction")
            _flags, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(buf, 1)
            tx.commit_lsn = commit_lsn
            tx.end_lsn = end_lsn
            tx.commit_time = pg_timestamp(ts)
            self.tx = None
            return tx
        if kind == 82:  # 'R'
            self._on_relation(buf)
            return None
        if kind == 84:  # 'T'
            if tx is None:
                raise DecodeError("Truncate outside a transaction")
            (nrels,) = _I32.unpack_from(buf, 1)
            pos = 6
            for _ in range(nrels):
                rel = self._relation(buf, pos)
                pos += 4
                if rel.tracked:
                    tx.items.append((rel.table, TRUNCATE, None, None, None))
                    tx.changes += 1
            return None
        if kind in (79, 89, 77):  # 'O' origin, 'Y' type, 'M' message
            return None
        raise DecodeError(f"unsupported pgoutput message {chr(kind)!r} (streaming is not enabled)")

    def _relation(self, buf: bytes, pos: int = 1) -> Relation:
        (relid,) = _I32.unpack_from(buf, pos)
        rel = self.relations.get(relid)
        if rel is None:
            raise DecodeError(f"change for relation {relid} before its Relation message")
        return rel

    def loader(self, oid: int) -> Callable[[Any], Any]:
        fn = self._loader_cache.get(oid)
        if fn is None:
            fn = self._loader_for(oid)
            self._loader_cache[oid] = fn
        return fn

    def _on_relation(self, buf: bytes) -> None:
        (relid,) = _I32.unpack_from(buf, 1)
        pos = 5
        end = buf.index(b"\0", pos)
        namespace = bytes(buf[pos:end]).decode()
        pos = end + 1
        end = buf.index(b"\0", pos)
        name = bytes(buf[pos:end]).decode()
        pos = end + 1
        replident = chr(buf[pos])
        pos += 1
        (ncols,) = _I16.unpack_from(buf, pos)
        pos += 2
        cols = []
        for _ in range(ncols):
            flags = buf[pos]
            pos += 1
            end = buf.index(b"\0", pos)
            cname = bytes(buf[pos:end]).decode()
            pos = end + 1
            oid, typmod = _REL_COL.unpack_from(buf, pos)
            pos += 8
            cols.append(RelationColumn(cname, oid, typmod, bool(flags & 1)))
        namespace = namespace or "pg_catalog"
        table = self._tracked(namespace, name)
        rel = Relation(
            relid,
            namespace,
            name,
            replident,
            tuple(cols),
            table or TableIdentifier(namespace, name),
            table is not None,
        )
        if table is not None:
            rel.names = tuple(c.name for c in cols)
            rel.loaders = tuple(self.loader(c.type_oid) for c in cols)
            rel.key_mask = tuple(c.is_key for c in cols)
            rel.decode_row = _compile_row_decoder(rel, self._tuple, key_only=False)
            rel.decode_key = _compile_row_decoder(rel, self._tuple, key_only=True)
            sig = rel.signature
            previous = self.known.get(table)
            if previous != sig:
                self.known[table] = sig
                if self.tx is not None:
                    self.tx.items.append(SchemaItem(rel, previous))
                else:
                    # A Relation outside a transaction (pgoutput sends none today): report it
                    # with the next transaction.
                    self._pending_schema.append(SchemaItem(rel, previous))
        self.relations[relid] = rel

    def _tuple(
        self, buf: bytes, pos: int, rel: Relation, key_only: bool
    ) -> tuple[dict[str, Any], frozenset[str] | None, int]:
        (ncols,) = _I16.unpack_from(buf, pos)
        pos += 2
        names = rel.names
        loaders = rel.loaders
        if ncols > len(names):
            raise DecodeError(
                f"tuple of {rel.table} has {ncols} columns, its Relation message {len(names)}"
            )
        row: dict[str, Any] = {}
        unchanged: list[str] | None = None
        unpack = _I32.unpack_from
        key_mask = rel.key_mask
        for i in range(ncols):
            kind = buf[pos]
            pos += 1
            if kind == 116:  # 't'
                (length,) = unpack(buf, pos)
                pos += 4
                if key_only and not key_mask[i]:
                    pos += length
                    continue
                row[names[i]] = loaders[i](buf[pos : pos + length])
                pos += length
            elif kind == 110:  # 'n'
                if not key_only or key_mask[i]:
                    row[names[i]] = None
            elif kind == 117:  # 'u' unchanged TOAST: value not sent
                if unchanged is None:
                    unchanged = []
                unchanged.append(names[i])
            elif kind == 98:  # 'b' binary (not requested)
                raise DecodeError("binary tuple data is not supported (binary option is off)")
            else:
                raise DecodeError(f"unknown tuple data kind {chr(kind)!r}")
        return row, (frozenset(unchanged) if unchanged else None), pos


def _compile_row_decoder(
    rel: Relation,
    slow: Callable[[bytes, int, Relation, bool], tuple[dict[str, Any], frozenset[str] | None, int]],
    key_only: bool,
) -> Callable[[bytes, int], tuple[dict[str, Any], frozenset[str] | None, int]]:
    """A tuple decoder unrolled for this relation's columns (the hot path of the stream).

    Handles text and null values; anything else (unchanged TOAST, a column count that differs)
    falls back to the generic decoder. ``key_only``: keep only replica-identity key columns."""
    n = len(rel.names)
    lines = [
        "def decode(buf, pos):",
        "    start = pos",
        f"    if i16(buf, pos)[0] != {n}:",
        f"        return slow(buf, start, rel, {key_only})",
        "    pos += 2",
        "    row = {}",
    ]
    for i, name in enumerate(rel.names):
        if key_only and not rel.key_mask[i]:
            lines += [
                "    k = buf[pos]",
                "    if k == 116:",
                "        pos += 5 + i32(buf, pos + 1)[0]",
                "    elif k == 110:",
                "        pos += 1",
                "    else:",
                f"        return slow(buf, start, rel, {key_only})",
            ]
            continue
        lines += [
            "    k = buf[pos]",
            "    if k == 116:",
            "        ln = i32(buf, pos + 1)[0]",
            "        pos += 5",
            f"        row[{name!r}] = L{i}(buf[pos:pos + ln])",
            "        pos += ln",
            "    elif k == 110:",
            f"        row[{name!r}] = None",
            "        pos += 1",
            "    else:",
            f"        return slow(buf, start, rel, {key_only})",
        ]
    lines.append("    return row, None, pos")
    env: dict[str, Any] = {
        "i16": _I16.unpack_from,
        "i32": _I32.unpack_from,
        "slow": slow,
        "rel": rel,
    }
    for i, loader in enumerate(rel.loaders):
        env[f"L{i}"] = loader
    exec("\n".join(lines), env)
    fn: Callable[[bytes, int], tuple[dict[str, Any], frozenset[str] | None, int]] = env["decode"]
    return fn
