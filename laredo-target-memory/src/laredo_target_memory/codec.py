"""``RowCodec``: rows packed into one compact immutable object each, and back.

A row dict costs a hash table plus one Python object per value (a ``Decimal`` is 104 bytes, a
``datetime`` 48, every ``str`` 49 plus its text). Packed, a row is one ``bytes`` object: the
values in ``marshal`` form, with ``Decimal``, ``datetime``, ``date``, ``time``, ``timedelta`` and
``UUID`` values turned into their exact state first. For a typical row that is 3-4 times less
memory.

Guarantees:

* ``unpack(pack(row)) == row`` with every value of the same type (``bool`` stays ``bool``,
  aware datetimes keep their ``tzinfo`` object and ``fold``). Keys come back in the table's
  column order (``names``) for rows with exactly those columns, else in the row's own order.
  Every call to ``unpack`` returns a new dict: changing it never changes what is stored.
* Values of other types (containers such as JSON ``dict``/``list``, subclasses, anything else)
  are kept as references beside the packed bytes, exactly like a dict row keeps them: they are
  not copied, so treat nested values as read-only.
* Layouts are compiled per column names and value types (a few are usual: NULLs change the
  types); past :data:`MAX_LAYOUTS` rows are kept as plain dicts.
* With ``detach`` (the default) a packed row is a right-sized ``bytes`` of Python's small-object
  allocator: ``marshal.dumps`` over-allocates (its buffer grows to 1 KiB and is shrunk in place
  by the C allocator), which left each stored row in a fragment of the C heap; the process then
  grew with every update instead of reusing the space of replaced rows. The copy adds one
  trailing byte that ``marshal.loads`` ignores.

Thread-safety: ``unpack`` may run in any thread at any time; ``pack`` may run concurrently with
itself (new layouts are registered under a lock).
"""

from __future__ import annotations

import marshal
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from operator import itemgetter
from typing import Any

from laredo.batches import RowBatch, day_value, row_maker, stamp_value

from .view import FieldGetter, RowView, ViewLayout

__all__ = ["MAX_LAYOUTS", "Packed", "RowCodec"]

Packed = Any
"""What a codec stores for one row: ``bytes`` (a ``bytearray`` copy of them unpacks too), a
tuple ``(bytes, *references)``, or a dict."""

MAX_LAYOUTS = 4096
"""Distinct (column names, value types) layouts compiled per codec; later ones stay dicts."""

_NATIVE = frozenset({int, str, float, bool, type(None), bytes})
"""Types ``marshal`` writes and reads back exactly (subclasses and buffers are not here)."""

_UUID = uuid.UUID
_NONE = type(None)
_SAFE_UNKNOWN = uuid.SafeUUID.unknown


def _make_uuid(value: int) -> uuid.UUID:
    """``UUID(int=value)`` without its validation (the value came from a UUID)."""
    u = object.__new__(_UUID)
    object.__setattr__(u, "int", value)
    object.__setattr__(u, "is_safe", _SAFE_UNKNOWN)
    return u


class _Layout:
    __slots__ = (
        "decode",
        "encode_row",
        "encode_text",
        "encode_tuple",
        "encode_values",
        "getters",
        "names",
        "sid",
        "types",
    )

    def __init__(
        self,
        sid: int,
        *,
        names: tuple[str, ...],
        types: tuple[type, ...],
        encode_row: Callable[[Mapping[str, Any]], Packed],
        encode_values: Callable[[Sequence[Any]], Packed],
        encode_tuple: Callable[[Sequence[Any]], Packed],
        encode_text: Callable[[Sequence[Any]], Packed],
        decode: Callable[[tuple[Any, ...], Packed], dict[str, Any]],
        getters: dict[str, FieldGetter],
    ) -> None:
        self.sid = sid
        self.names = names
        self.types = types
        self.encode_row = encode_row
        self.encode_values = encode_values
        self.encode_tuple = encode_tuple
        self.encode_text = encode_text
        self.decode = decode
        self.getters = getters


class RowCodec:
    """Packs rows of one table (see the module docstring).

    ``names``: the table's columns in order (empty: taken from the first row packed). Rows with
    exactly these columns take the fast path; others are packed under their own names.
    ``detach``: return right-sized copies (see the module docstring); False when the caller
    copies the bytes somewhere else anyway (the compact store's pages).
    """

    def __init__(self, names: Sequence[str] = (), *, detach: bool = True) -> None:
        self._detach = detach
        self._lock = threading.Lock()
        self._layouts: dict[tuple[Any, ...], _Layout] = {}
        self._decoders: list[Callable[[tuple[Any, ...], Packed], dict[str, Any]]] = []
        self._views: list[ViewLayout] = []
        self._current: _Layout | None = None
        self.fast: Callable[[Mapping[str, Any]], Packed] = _no_fast
        """The current layout's encoder: the packed row, or None when the row does not fit it
        (then call :meth:`pack`). It changes when rows change shape: read it again then."""
        self.fast_values: Callable[[Sequence[Any]], Packed] = _no_fast_values
        """Like :attr:`fast` for a row given as its values in ``names`` order (a tuple from a
        batch): the packed row, or None when the values do not fit the current layout (then
        pack the row's dict with :meth:`pack`, and read this again)."""
        self.names: tuple[str, ...] = ()
        self.names_set: frozenset[str] = frozenset()
        self.irregular = 0
        """Rows packed with a column that is not one of ``names`` (merges then unpack)."""
        self.set_names(names)

    def set_names(self, names: Sequence[str]) -> None:
        """The table's columns changed (e.g. added): new rows take the new fast path; rows
        already packed keep decoding under their own layout."""
        names = tuple(names)
        with self._lock:
            if names != self.names:
                self.names = names
                self.names_set = frozenset(names)
                self.fast = _no_fast
                self.fast_values = _no_fast_values
                self._current = None

    # -- packing --------------------------------------------------------------------------
    def pack(self, row: Mapping[str, Any]) -> Packed:
        """The packed form of ``row`` (not retained: the caller may reuse ``row``)."""
        packed = self.fast(row)
        if packed is not None:
            return packed
        return self._pack_slow(row)

    def _pack_slow(self, row: Mapping[str, Any]) -> Packed:
        names = self.names
        if not names:
            self.set_names(tuple(row))
            names = self.names
        if len(row) != len(names) or not self.names_set <= row.keys():
            names = tuple(row)
            if not self.names_set >= row.keys():
                self.irregular += 1
        values = tuple([row[n] for n in names])
        types = tuple(map(type, values))
        zones = tuple(v.tzinfo for v in values if type(v) is datetime or type(v) is time)
        layout = self._layout(names, types, zones)
        if layout is None:
            return dict(row)
        if names == self.names:
            self.fast = layout.encode_row
            self.fast_values = layout.encode_tuple
            self._current = layout
        return layout.encode_values(values)

    def _layout(
        self, names: tuple[str, ...], types: tuple[type, ...], zones: tuple[Any, ...]
    ) -> _Layout | None:
        """The layout for rows with these columns, value types and time zones (of their
        ``datetime``/``time`` values, in column order)."""
        key = (names, types, zones)
        layout = self._layouts.get(key)  # the usual case, without building the compiler
        if layout is not None:
            return layout
        return self._registered(key, lambda sid: self._compile(sid, names, types, zones))

    def _registered(
        self, key: tuple[Any, ...], compile_: Callable[[int], _Layout]
    ) -> _Layout | None:
        """The layout under ``key``, compiled by ``compile_(sid)`` and registered when new
        (None past :data:`MAX_LAYOUTS`)."""
        layout = self._layouts.get(key)
        if layout is not None:
            return layout
        with self._lock:
            layout = self._layouts.get(key)
            if layout is None:
                if len(self._decoders) >= MAX_LAYOUTS:
                    return None
                layout = compile_(len(self._decoders))
                self._views.append((layout.names, layout.getters, layout.decode))
                self._decoders.append(layout.decode)
                self._layouts[key] = layout
            return layout

    def _compile(
        self,
        sid: int,
        names: tuple[str, ...],
        types: tuple[type, ...],
        zones: tuple[Any, ...],
    ) -> _Layout:
        """Source for the row encoder, the values encoder and the decoder of one layout."""
        env: dict[str, Any] = {
            "dumps": marshal.dumps,
            "Z": b"\0",
            "loads": marshal.loads,
            "get": itemgetter(*names) if names else (lambda r: ()),
            "D": Decimal,
            "DT": datetime,
            "DA": date,
            "TI": time,
            "TD": timedelta,
            "U": _make_uuid,
        }
        n = len(names)
        checks: list[str] = []
        text_checks: list[str] = []  # encode_text: Decimal columns given as their text
        parts: list[str] = []  # marshalled elements, after the layout id
        text_parts: list[str] = []
        refs: list[str] = []  # values kept by reference
        out: list[str] = []  # decoder dict entries
        pos = 1  # index in the decoded tuple (0 is the layout id)
        zone = iter(zones)
        for i, (name, tp) in enumerate(zip(names, types, strict=True)):
            v = f"a{i}"
            env[f"T{i}"] = tp
            checks.append(f"type({v}) is T{i}")
            text_checks.append(f"type({v}) is {'str' if tp is Decimal else f'T{i}'}")
            key = repr(name)
            before = len(parts)
            if tp in _NATIVE:
                parts.append(v)
                out.append(f"{key}: t[{pos}]")
                pos += 1
            elif tp is Decimal:
                parts.append(f"str({v})")
                out.append(f"{key}: D(t[{pos}])")
                pos += 1
            elif tp is datetime or tp is time:
                # the exact pickle state (fold included); the zone is the layout's
                env[f"Z{i}"] = next(zone)
                checks.append(f"{v}.tzinfo is Z{i}")
                ctor = "DT" if tp is datetime else "TI"
                parts.append(f"{v}.__reduce_ex__(4)[1][0]")
                out.append(f"{key}: {ctor}(t[{pos}], Z{i})")
                pos += 1
            elif tp is date:
                parts.append(f"{v}.__reduce__()[1][0]")
                out.append(f"{key}: DA(t[{pos}])")
                pos += 1
            elif tp is timedelta:
                parts += [f"{v}.days", f"{v}.seconds", f"{v}.microseconds"]
                out.append(f"{key}: TD(t[{pos}], t[{pos + 1}], t[{pos + 2}])")
                pos += 3
            elif tp is _UUID:
                parts.append(f"{v}.int")
                out.append(f"{key}: U(t[{pos}])")
                pos += 1
            else:
                refs.append(v)
                out.append(f"{key}: p[{len(refs)}]")
            text_parts += [v] if tp is Decimal else parts[before:]
        unpack_vals = f"    {', '.join(f'a{i}' for i in range(n))}{',' if n == 1 else ''} = v"
        if n == 0:
            unpack_vals = "    pass"
        packed = f"dumps(({sid}, {''.join(p + ', ' for p in parts)}))"
        if self._detach:
            packed += " + Z"  # a right-sized copy (a trailing byte loads() ignores)
        result = f"({packed}, {', '.join(refs)})" if refs else packed
        text_packed = f"dumps(({sid}, {''.join(p + ', ' for p in text_parts)}))"
        if self._detach:
            text_packed += " + Z"
        text_result = f"({text_packed}, {', '.join(refs)})" if refs else text_packed
        src = [
            "def encode_values(v):",
            unpack_vals,
            f"    return {result}",
            "",
            "def encode_row(r):",
            f"    if len(r) != {n}:",
            "        return None",
            "    try:",
            "        v = get(r)",
            "    except KeyError:",
            "        return None",
            *(["    v = (v,)"] if n == 1 else []),
            unpack_vals,
            f"    if not ({' and '.join(checks) or 'True'}):",
            "        return None",
            f"    return {result}",
            "",
            "def encode_tuple(v):",
            f"    if len(v) != {n}:",
            "        return None",
            unpack_vals,
            f"    if not ({' and '.join(checks) or 'True'}):",
            "        return None",
            f"    return {result}",
            "",
            "def encode_text(v):",
            f"    if len(v) != {n}:",
            "        return None",
            unpack_vals,
            f"    if not ({' and '.join(text_checks) or 'True'}):",
            "        return None",
            f"    return {text_result}",
            "",
            *_decoder_source(names, out),
        ]
        exec("\n".join(src), env)
        return _Layout(
            sid,
            names=names,
            types=types,
            encode_row=env["encode_row"],
            encode_values=env["encode_values"],
            encode_tuple=env["encode_tuple"],
            encode_text=env["encode_text"],
            decode=env["decode"],
            getters=env["G"],
        )

    def _compile_raw(self, sid: int, names: tuple[str, ...], batch: RowBatch) -> _Layout:
        """The decoder of a raw layout: a :class:`~laredo.batches.RowBatch`'s scalar tuples
        stored as they are, nested: ``(sid, values)`` (see :meth:`pack_batch`); its raw
        columns are converted when read."""
        env: dict[str, Any] = {"D": Decimal, "S": stamp_value, "DY": day_value}
        zones = dict(batch.stamps)
        out: list[str] = []
        for i, name in enumerate(names):
            p = f"t[1][{i}]"
            if i in batch.decimals:
                expr = f"(None if {p} is None else D({p}))"
            elif i in zones:
                env[f"Z{i}"] = zones[i]
                expr = f"(None if {p} is None else S({p}, Z{i}))"
            elif i in batch.days:
                expr = f"(None if {p} is None else DY({p}))"
            else:
                expr = p
            out.append(f"{name!r}: {expr}")
        exec("\n".join(_decoder_source(names, out)), env)
        return _Layout(
            sid,
            names=names,
            types=(),
            encode_row=_no_fast,
            encode_values=_no_fast_values,
            encode_tuple=_no_fast_values,
            encode_text=_no_fast_values,
            decode=env["decode"],
            getters=env["G"],
        )

    def pack_batch(self, batch: RowBatch) -> list[Packed]:
        """The packed rows of a baseline chunk, unpacking exactly like its row dicts packed one
        by one. A scalar batch of this codec's columns (every tuple of their length) is stored
        under one raw layout by C-level ``map`` s, no Python code per row: each row is
        ``marshal.dumps(values)`` behind a fixed head that makes it the nested tuple
        ``(sid, values)`` (marshalling the loaded tuple itself is about half the cost of a new
        tuple with the layout id in front, whose shared values marshal's reference table
        would track); its raw columns are converted when read, not when stored."""
        if batch.names == self.names:
            if batch.scalar:
                packed = self._pack_raw(batch)
                if packed is not None:
                    return packed
            if not batch.stamps and not batch.days:
                return self.pack_values(batch.values, batch.decimals)
        return [self.pack(row) for row in batch]

    def _pack_raw(self, batch: RowBatch) -> list[Packed] | None:
        names = batch.names
        values = batch.values
        if not values or set(map(len, values)) != {len(names)} or set(map(type, values)) != {tuple}:
            return None
        key = (names, ("raw", batch.decimals, batch.stamps, batch.days), ())
        layout = self._registered(key, lambda sid: self._compile_raw(sid, names, batch))
        if layout is None:
            return None
        # a 2-tuple (no reference flag) holding the int sid (no flag) and then the values'
        # own marshal form, whose reference numbers thus stay valid; the concatenation is a
        # new right-sized bytes, so no detaching copy is needed
        head = b")\x02i" + layout.sid.to_bytes(4, "little", signed=True)
        try:
            return list(map(head.__add__, map(marshal.dumps, values)))
        except ValueError:  # a value marshal cannot hold: the batch was not scalar after all
            return None

    # -- unpacking ------------------------------------------------------------------------
    def unpack(self, packed: Packed) -> dict[str, Any]:
        """A new dict equal to the packed row (see the module docstring)."""
        tp = type(packed)
        t: tuple[Any, ...]
        if tp is bytes or tp is bytearray:
            t = marshal.loads(packed)
        elif tp is tuple:
            t = marshal.loads(packed[0])
        else:
            return dict(packed)
        row: dict[str, Any] = self._decoders[t[0]](t, packed)
        return row

    def pack_values(
        self, values: Sequence[Sequence[Any]], decimals: frozenset[int] = frozenset()
    ) -> list[Packed]:
        """The packed rows of value tuples in :attr:`names` order (a baseline chunk), the
        ``Decimal`` columns in ``decimals`` given as their text (as in a ``RowBatch``): the
        same as packing each row's dict, by one C-level ``map`` of the current layout's
        encoder; rows not of its shape (None from the encoder: a packed row is never falsy)
        are packed from their dicts, which may change the layout (the encoder is asked again)."""
        enc = self.text_encoder(decimals) if decimals else self.fast_values
        out: list[Any] = [None] * len(values) if enc is None else list(map(enc, values))
        if not all(out):
            make = row_maker(self.names, decimals)
            for j, packed in enumerate(out):
                if packed is None:
                    packed = None if enc is None else enc(values[j])
                    if packed is None:
                        packed = self.pack(make(values[j]))
                        enc = self.text_encoder(decimals) if decimals else self.fast_values
                    out[j] = packed
        return out

    def text_encoder(self, decimals: frozenset[int]) -> Callable[[Sequence[Any]], Packed] | None:
        """The current layout's encoder for value tuples whose ``Decimal`` columns hold the
        decimal's text (``str(Decimal(text))`` would give an equal ``Decimal``): usable when
        the current layout's ``Decimal`` columns are exactly the positions in ``decimals``
        that are not NULL in it (then text in any other column stays text). None otherwise:
        build the row with ``Decimal`` values and :meth:`pack` it (which may change the
        current layout; ask again)."""
        layout = self._current
        if layout is None or layout.names != self.names:
            return None
        types = layout.types
        for i, tp in enumerate(types):
            if (tp is Decimal) != (i in decimals) and not (tp is _NONE and i in decimals):
                return None
        return layout.encode_text

    def load(self, packed: Packed) -> tuple[tuple[Any, ...], ViewLayout]:
        """``(unpacked tuple, view layout)`` of a packed row (not a dict: see :meth:`view`)."""
        t = marshal.loads(packed[0] if type(packed) is tuple else packed)
        return t, self._views[t[0]]

    def view(self, packed: Packed) -> Mapping[str, Any]:
        """A read-only :class:`~.view.RowView` of the packed row (built without unpacking it);
        a row kept as a dict (past :data:`MAX_LAYOUTS`) comes back as a new dict."""
        if type(packed) is dict:
            return dict(packed)
        return RowView(self.load, packed)

    @property
    def layouts(self) -> int:
        """How many layouts were compiled (for tests and diagnostics)."""
        return len(self._decoders)


def _decoder_source(names: tuple[str, ...], out: list[str]) -> list[str]:
    """Source of ``decode(t, p)`` (the row dict from the entries ``'name': expr`` of ``out``)
    and ``G`` (one getter per column: ``name: lambda t, p: expr``)."""
    return [
        "def decode(t, p):",
        f"    return {{{', '.join(out)}}}",
        "",
        "G = {"
        + ", ".join(
            f"{name!r}: lambda t, p: {e[len(repr(name)) + 2 :]}"
            for name, e in zip(names, out, strict=True)
        )
        + "}",
    ]


def _no_fast(row: Mapping[str, Any]) -> Packed:
    return None


def _no_fast_values(values: Sequence[Any]) -> Packed:
    return None
