"""A small decoder for PostgreSQL's ``pgoutput`` logical-replication protocol (versions 1 and 2).

Only what a change stream needs, without in-progress transaction streaming (``streaming`` off,
so versions 1 and 2 carry the same messages): Begin, Commit, Relation, Insert, Update, Delete,
Truncate; Origin, Type and logical Message are skipped. Column values arrive in text format and
are loaded with psycopg's loaders for the column's type OID, so values have the same Python
types as rows read by a psycopg cursor on the same connection.

With ``streaming`` off the server sends a transaction only once it committed, all of it at once.
The decoder builds :class:`~laredo.types.ChangeEvent` s as the changes arrive, and
:meth:`PgOutputDecoder.feed` returns the :class:`Transaction` when its Commit arrives (every
event then carries the commit end LSN). With ``chunk_size`` set it also returns the transaction,
not yet committed, each time more than ``chunk_size`` events are pending, so a huge transaction
is passed on in chunks instead of being held: those early events carry ``final_lsn + 1`` (a
position inside the transaction, above every earlier commit, at or below its own commit end), and
are not acknowledgeable. Changes of tables the caller does not track are skipped without
decoding their values.

A value its column's loader refuses never stops the stream (:mod:`.values`): a date or
timestamp infinity loads as its extreme value, anything else as an
:class:`~laredo.types.Unrepresentable` marker in its column, counted in
:attr:`Transaction.unrepresentable` (the engine dead-letters the change). Only a message that
cannot be parsed raises, and only ``DecodeError``.
"""

from __future__ import annotations

import dataclasses
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from laredo.batches import UNCHANGED, stamp_value
from laredo.errors import SourceError
from laredo.types import ChangeAction, ChangeEvent, TableIdentifier, Unrepresentable

from .typmods import Signature, signature_typmod
from .values import load_or_mark

__all__ = [
    "DecodeError",
    "PgOutputDecoder",
    "Relation",
    "RelationColumn",
    "SchemaItem",
    "Transaction",
    "make_event",
    "pg_timestamp",
    "set_position",
]


_BEGIN = struct.Struct(">QqI")
_COMMIT = struct.Struct(">bQQq")
_I32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_REL_COL = struct.Struct(">Ii")
_i32 = _I32.unpack_from

INSERT = ChangeAction.INSERT
UPDATE = ChangeAction.UPDATE
DELETE = ChangeAction.DELETE
TRUNCATE = ChangeAction.TRUNCATE


_EVENT_FIELDS = (
    "table",
    "action",
    "position",
    "timestamp",
    "new_values",
    "old_values",
    "xid",
    "commit_timestamp",
    "unchanged_toast",
)


EventSetter = Callable[[ChangeEvent, Any], ChangeEvent]


def _event_factory() -> tuple[Callable[..., ChangeEvent], EventSetter]:
    """``ChangeEvent(...)`` by position, about twice as fast as the frozen dataclass ``__init__``
    (slot descriptors set directly), and ``set_position(event, position)`` for an event not yet
    handed to anyone (it finishes its construction). Both fall back to the dataclass if the type
    changes shape."""

    def replace_position(event: ChangeEvent, position: Any) -> ChangeEvent:
        return dataclasses.replace(event, position=position)

    try:
        names = tuple(f.name for f in dataclasses.fields(ChangeEvent))
        if names != _EVENT_FIELDS or not hasattr(ChangeEvent, "__slots__"):
            return ChangeEvent, replace_position
        env: dict[str, Any] = {"new": object.__new__, "CE": ChangeEvent}
        body = ["def make(" + ", ".join(names) + "):", "    e = new(CE)"]
        for i, name in enumerate(names):
            env[f"s{i}"] = ChangeEvent.__dict__[name].__set__
            body.append(f"    s{i}(e, {name})")
        body.append("    return e")
        body += ["def set_position(e, position):", "    s2(e, position)", "    return e"]
        exec("\n".join(body), env)
        make: Callable[..., ChangeEvent] = env["make"]
        setter: EventSetter = env["set_position"]
        args: tuple[Any, ...] = (
            TableIdentifier("s", "t"),
            ChangeAction.INSERT,
            1,
            None,
            {"a": 1},
            None,
            2,
            None,
            frozenset(),
        )
        probe = make(*args)
        moved = (*args[:2], 5, *args[3:])
        if probe != ChangeEvent(*args) or setter(probe, 5) != ChangeEvent(*moved):
            return ChangeEvent, replace_position
        return make, setter
    except Exception:
        return ChangeEvent, replace_position


make_event, set_position = _event_factory()
NO_TOAST: frozenset[str] = frozenset()


class DecodeError(SourceError, ValueError):
    """A pgoutput message this decoder cannot parse (a ``SourceError``; still a ``ValueError``
    for callers of 0.1)."""


def pg_timestamp(us: int) -> datetime:
    """Microseconds after :data:`~laredo.batches.STAMP_EPOCH` (UTC) -> aware ``datetime``
    (``datetime.max``/``min`` in UTC beyond its range)."""
    try:
        return stamp_value(us, UTC)
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
    decode_values: (
        Callable[[bytes, int], tuple[tuple[Any, ...], frozenset[str] | None, int]] | None
    ) = None
    """Batch mode: a tuple's values in column order (:data:`~laredo.batches.UNCHANGED` where
    an unchanged TOAST value was not sent)."""

    @property
    def signature(self) -> Signature:
        return tuple(
            (c.name, c.type_oid, signature_typmod(c.type_oid, c.type_modifier))
            for c in self.columns
        )


@dataclass(frozen=True, slots=True)
class SchemaItem:
    """A tracked table's columns changed (in stream order, inside a transaction)."""

    relation: Relation
    previous: Signature | None


@dataclass(slots=True)
class Transaction:
    """A transaction being received. ``items`` hold, in order, the :class:`ChangeEvent` s and
    :class:`SchemaItem` s not passed on yet. ``committed``: its Commit arrived (``end_lsn`` is
    set and every pending event carries it)."""

    xid: int
    final_lsn: int
    commit_time: datetime | None
    end_lsn: int = 0
    commit_lsn: int = 0
    items: list[Any] = field(default_factory=list)
    changes: int = 0
    """Change events of the transaction so far (passed on early, skipped or pending)."""
    early: int = 0
    """Change events passed on before the commit (in this or an earlier session)."""
    schema: int = 0
    """Schema items among ``items``."""
    committed: bool = False
    unrepresentable: int = 0
    """Values loaded as :class:`~laredo.types.Unrepresentable` markers so far (their changes
    are still in ``items``, in order)."""

    @property
    def position(self) -> int:
        """Where its events stand before the commit: just after the commit record's start."""
        return self.final_lsn + 1

    def take_chunk(self) -> list[Any]:
        """Pass on every pending item but the last (so the commit always completes a chunk);
        returns them and counts the change events among them as passed on early."""
        items = self.items
        chunk = items[:-1]
        self.items = items[-1:]
        self.early += len(chunk) - sum(1 for it in chunk if type(it) is SchemaItem)
        self.schema = sum(1 for it in self.items if type(it) is SchemaItem)
        return chunk


LoaderFactory = Callable[[int], Callable[[Any], Any]]


class PgOutputDecoder:
    """Turns pgoutput messages into committed :class:`Transaction` s.

    ``loader_for(oid)`` returns a function loading one text-format value of that type.
    ``tracked(schema, table)`` returns the :class:`TableIdentifier` to report, or None to skip
    the table. ``known`` maps tracked tables to the signature (:mod:`.typmods`) the caller
    already knows (from the catalog); a Relation message with another signature yields a
    :class:`SchemaItem`.
    """

    def __init__(
        self,
        loader_for: LoaderFactory,
        tracked: Callable[[str, str], TableIdentifier | None],
        known: dict[TableIdentifier, Signature] | None = None,
        *,
        chunk_size: int = 0,
        resume: tuple[int, int] | None = None,
        batches: bool = False,
    ) -> None:
        self._loader_for = loader_for
        self.batches = batches
        """Batch mode: changes are kept as ops ``(action, new values tuple, old identity dict,
        unchanged, relation)`` (see :mod:`laredo.batches`), not :class:`ChangeEvent` s, and no
        position is stamped on them (the batch carries it)."""
        self._tracked = tracked
        self.known: dict[TableIdentifier, Signature] = dict(known or {})
        self.relations: dict[int, Relation] = {}
        self.tx: Transaction | None = None
        self._loader_cache: dict[int, Callable[[Any], Any]] = {}
        self._pending_schema: list[SchemaItem] = []
        self._chunk = chunk_size if chunk_size > 0 else sys.maxsize
        self.resume = resume
        """``(final_lsn, n)``: a transaction whose first ``n`` change events were passed on in
        an earlier session; when the server sends it again, those are skipped undecoded."""
        self._skip = 0

    def stop_chunking(self) -> None:
        """Return transactions whole, at their commit, from now on (a handler that cannot take
        partial ones: the deprecated ``on_changes(events)`` dialect)."""
        self._chunk = sys.maxsize

    # -- session handling ------------------------------------------------------------------
    def reset_session(self) -> None:
        """Forget the partial transaction and relation cache (a new connection re-sends both)."""
        self.tx = None
        self._skip = 0
        self.relations.clear()

    @property
    def in_transaction(self) -> bool:
        return self.tx is not None

    # -- decoding ------------------------------------------------------------------------
    def feed(self, buf: bytes, start: int = 0) -> Transaction | None:
        """Decode one pgoutput message, ``buf[start:]`` (``start``: the reader passes a whole
        XLogData frame with its 25-byte header, not a copy of its tail); returns the transaction
        when this is its Commit. A message it cannot parse (truncated, bad framing, bad UTF-8 in
        a name) raises ``DecodeError``, never another exception type; a value its column's
        loader rejects is no such error (see the module docstring)."""
        o = start
        try:
            kind = buf[o]
            tx = self.tx
            if kind == 73:  # 'I'
                if tx is None:
                    raise DecodeError("Insert outside a transaction")
                rel = self.relations.get(_i32(buf, o + 1)[0]) or self._relation(buf, o + 1)
                if rel.tracked:
                    tx.changes += 1
                    if self._skip:
                        self._skip -= 1
                        return None
                    if buf[o + 5] != 78:  # 'N'
                        raise DecodeError(f"Insert: expected 'N' tuple, got {chr(buf[o + 5])!r}")
                    if self.batches:
                        vals, unch, _ = rel.decode_values(buf, o + 6)  # type: ignore[misc]
                        items = tx.items
                        items.append((INSERT, vals, None, unch, rel))
                        if len(items) > self._chunk:
                            return tx
                        return None
                    new, _unch, _ = rel.decode_row(buf, o + 6)  # type: ignore[misc]
                    items = tx.items
                    ts = tx.commit_time
                    items.append(
                        make_event(
                            rel.table, INSERT, tx.final_lsn + 1, ts, new, None, tx.xid, ts, NO_TOAST
                        )
                    )
                    if len(items) > self._chunk:
                        return tx
                return None
            if kind == 85:  # 'U'
                if tx is None:
                    raise DecodeError("Update outside a transaction")
                rel = self.relations.get(_i32(buf, o + 1)[0]) or self._relation(buf, o + 1)
                if rel.tracked:
                    tx.changes += 1
                    if self._skip:
                        self._skip -= 1
                        return None
                    pos = o + 5
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
                    if self.batches:
                        vals, unch, _ = rel.decode_values(buf, pos + 1)  # type: ignore[misc]
                        items = tx.items
                        items.append((UPDATE, vals, old, unch, rel))
                        if len(items) > self._chunk:
                            return tx
                        return None
                    new, unchanged, _ = rel.decode_row(buf, pos + 1)  # type: ignore[misc]
                    items = tx.items
                    ts = tx.commit_time
                    items.append(
                        make_event(
                            rel.table,
                            UPDATE,
                            tx.final_lsn + 1,
                            ts,
                            new,
                            old,
                            tx.xid,
                            ts,
                            unchanged or NO_TOAST,
                        )
                    )
                    if len(items) > self._chunk:
                        return tx
                return None
            if kind == 68:  # 'D'
                if tx is None:
                    raise DecodeError("Delete outside a transaction")
                rel = self.relations.get(_i32(buf, o + 1)[0]) or self._relation(buf, o + 1)
                if rel.tracked:
                    tx.changes += 1
                    if self._skip:
                        self._skip -= 1
                        return None
                    marker = buf[o + 5]
                    if marker == 75:
                        old, _unch, _ = rel.decode_key(buf, o + 6)  # type: ignore[misc]
                    elif marker == 79:
                        old, _unch, _ = rel.decode_row(buf, o + 6)  # type: ignore[misc]
                    else:
                        raise DecodeError(f"Delete: expected 'K' or 'O' tuple, got {chr(marker)!r}")
                    items = tx.items
                    if self.batches:
                        items.append((DELETE, None, old, None, rel))
                        if len(items) > self._chunk:
                            return tx
                        return None
                    ts = tx.commit_time
                    items.append(
                        make_event(
                            rel.table, DELETE, tx.final_lsn + 1, ts, None, old, tx.xid, ts, NO_TOAST
                        )
                    )
                    if len(items) > self._chunk:
                        return tx
                return None
            if kind == 66:  # 'B'
                final_lsn, ts, xid = _BEGIN.unpack_from(buf, o + 1)
                tx = self.tx = Transaction(xid, final_lsn, pg_timestamp(ts))
                resume = self.resume
                if resume is not None:
                    self.resume = None
                    if resume[0] == final_lsn:  # sent again after a reconnect: skip the passed on
                        self._skip = tx.early = resume[1]
                if self._pending_schema:
                    tx.items.extend(self._pending_schema)
                    tx.schema += len(self._pending_schema)
                    self._pending_schema.clear()
                return None
            if kind == 67:  # 'C'
                if tx is None:
                    raise DecodeError("Commit outside a transaction")
                _flags, commit_lsn, end_lsn, _ts = _COMMIT.unpack_from(buf, o + 1)
                tx.commit_lsn = commit_lsn
                tx.end_lsn = end_lsn
                tx.committed = True
                self.tx = None
                self._skip = 0
                if not self.batches:
                    setter = set_position
                    for item in tx.items:
                        if type(item) is not SchemaItem:
                            setter(item, end_lsn)
                return tx
            if kind == 82:  # 'R'
                self._on_relation(bytes(buf[o:]))
                return None
            if kind == 84:  # 'T'
                if tx is None:
                    raise DecodeError("Truncate outside a transaction")
                (nrels,) = _I32.unpack_from(buf, o + 1)
                pos = o + 6
                ts = tx.commit_time
                for _ in range(nrels):
                    rel = self._relation(buf, pos)
                    pos += 4
                    if rel.tracked:
                        tx.changes += 1
                        if self._skip:
                            self._skip -= 1
                            continue
                        if self.batches:
                            tx.items.append((TRUNCATE, None, None, None, rel))
                            continue
                        tx.items.append(
                            make_event(
                                rel.table,
                                TRUNCATE,
                                tx.final_lsn + 1,
                                ts,
                                None,
                                None,
                                tx.xid,
                                ts,
                                NO_TOAST,
                            )
                        )
                if len(tx.items) > self._chunk:
                    return tx
                return None
            if kind in (79, 89, 77):  # 'O' origin, 'Y' type, 'M' message
                return None
            raise DecodeError(
                f"unsupported pgoutput message {chr(kind)!r} (streaming is not enabled)"
            )
        except DecodeError:
            raise
        except Exception as exc:
            kind_name = chr(buf[o]) if len(buf) > o else "empty"
            raise DecodeError(
                f"malformed pgoutput message {kind_name!r} ({len(buf) - o} bytes): "
                f"{type(exc).__name__}: {str(exc)[:200]}"
            ) from exc

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
            if self.batches:
                rel.decode_values = _compile_values_decoder(rel, self._values)
            sig = rel.signature
            previous = self.known.get(table)
            if previous != sig:
                self.known[table] = sig
                if self.tx is not None:
                    self.tx.items.append(SchemaItem(rel, previous))
                    self.tx.schema += 1
                else:
                    # A Relation outside a transaction (pgoutput sends none today): report it
                    # with the next transaction.
                    self._pending_schema.append(SchemaItem(rel, previous))
        self.relations[relid] = rel

    def _values(
        self, buf: bytes, pos: int, rel: Relation
    ) -> tuple[tuple[Any, ...], frozenset[str] | None, int]:
        """The generic tuple decoder in batch mode: values in column order, ``UNCHANGED`` for
        unchanged TOAST columns (named in the returned set)."""
        row, unchanged, end = self._tuple(buf, pos, rel, False)
        (ncols,) = _I16.unpack_from(buf, pos)
        values = tuple(row.get(n, UNCHANGED) for n in rel.names[:ncols])
        return values, unchanged, end

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
                data = buf[pos : pos + length]
                if len(data) != length:
                    raise DecodeError(f"tuple value of {rel.table} cut short")
                try:
                    row[names[i]] = loaders[i](data)
                except Exception:
                    row[names[i]] = value = load_or_mark(loaders[i], rel.columns[i].type_oid, data)
                    if self.tx is not None and type(value) is Unrepresentable:
                        self.tx.unrepresentable += 1
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
        # the column count, two bytes big-endian
        f"    if buf[pos] != {n >> 8} or buf[pos + 1] != {n & 0xFF}:",
        f"        return slow(buf, start, rel, {key_only})",
        "    pos += 2",
    ]
    kept: list[str] = []
    for i, name in enumerate(rel.names):
        if key_only and not rel.key_mask[i]:
            lines += [  # a key tuple sends its other columns as nulls: test that first
                "    k = buf[pos]",
                "    if k == 110:",
                "        pos += 1",
                "    elif k == 116:",
                "        pos += 5 + i32(buf, pos + 1)[0]",
                "    else:",
                f"        return slow(buf, start, rel, {key_only})",
            ]
            continue
        kept.append(f"{name!r}: v{i}")
        lines += [
            "    k = buf[pos]",
            "    if k == 116:",
            "        e = pos + 5 + i32(buf, pos + 1)[0]",
            f"        v{i} = L{i}(buf[pos + 5:e])",
            "        pos = e",
            "    elif k == 110:",
            f"        v{i} = None",
            "        pos += 1",
            "    else:",
            f"        return slow(buf, start, rel, {key_only})",
        ]
    lines.append(f"    return {{{', '.join(kept)}}}, None, pos")
    lines = _guarded(lines, f"slow(buf, start, rel, {key_only})")
    env: dict[str, Any] = {
        "i16": _I16.unpack_from,
        "i32": _I32.unpack_from,
        "slow": slow,
        "rel": rel,
        "DecodeError": DecodeError,
    }
    for i, loader in enumerate(rel.loaders):
        env[f"L{i}"] = loader
    exec("\n".join(lines), env)
    fn: Callable[[bytes, int], tuple[dict[str, Any], frozenset[str] | None, int]] = env["decode"]
    return fn


def _compile_values_decoder(
    rel: Relation,
    slow: Callable[[bytes, int, Relation], tuple[tuple[Any, ...], frozenset[str] | None, int]],
) -> Callable[[bytes, int], tuple[tuple[Any, ...], frozenset[str] | None, int]]:
    """Batch mode's tuple decoder unrolled for this relation's columns: the values as a tuple in
    column order, each loaded by the column's loader (the same loaders as the dict decoder, so
    the values are identical). Text and null values only; anything else falls back to
    ``slow``."""
    n = len(rel.names)
    lines = [
        "def decode(buf, pos):",
        "    start = pos",
        f"    if buf[pos] != {n >> 8} or buf[pos + 1] != {n & 0xFF}:",
        "        return slow(buf, start, rel)",
        "    pos += 2",
    ]
    for i in range(n):
        lines += [
            "    k = buf[pos]",
            "    if k == 116:",
            "        e = pos + 5 + i32(buf, pos + 1)[0]",
            f"        v{i} = L{i}(buf[pos + 5:e])",
            "        pos = e",
            "    elif k == 110:",
            f"        v{i} = None",
            "        pos += 1",
            "    else:",
            "        return slow(buf, start, rel)",
        ]
    vals = ", ".join(f"v{i}" for i in range(n)) + ("," if n == 1 else "")
    lines.append(f"    return ({vals}), None, pos")
    lines = _guarded(lines, "slow(buf, start, rel)")
    env: dict[str, Any] = {
        "i32": _I32.unpack_from,
        "slow": slow,
        "rel": rel,
        "DecodeError": DecodeError,
    }
    for i, loader in enumerate(rel.loaders):
        env[f"L{i}"] = loader
    exec("\n".join(lines), env)
    fn: Callable[[bytes, int], tuple[tuple[Any, ...], frozenset[str] | None, int]] = env["decode"]
    return fn


def _guarded(lines: list[str], slow_call: str) -> list[str]:
    """The unrolled decoder ``lines`` with its body (after ``start = pos``) in a ``try``: any
    error (a loader refusing a value, a cut message) falls back to the generic decoder, which
    loads each value through :func:`~.values.load_or_mark` (or raises ``DecodeError``)."""
    head, body = lines[:2], lines[2:]
    return [
        *head,
        "    try:",
        *("    " + line for line in body),
        "    except DecodeError:",
        "        raise",
        "    except Exception:",
        "        pass",
        f"    return {slow_call}",
    ]
