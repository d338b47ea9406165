"""``CompiledTarget``: rows compiled to domain objects by a compiler function, kept by key."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from laredo.errors import ConfigError, TargetError
from laredo.plugins import compiler as build_compiler
from laredo.plugins import filter as build_filter
from laredo.types import (
    ColumnDefinition,
    Row,
    SchemaChangeResponse,
    TableIdentifier,
)

from ._base import MISSING, MemoryTargetBase, Pending

logger = logging.getLogger(__name__)

RowFilter = Callable[[Row], bool]


class CompiledTarget(MemoryTargetBase[Any]):
    """Keeps ``compiler(row)`` for every row that passes ``filter``, by key.

    ``CompiledTarget(compiler=User.from_row, key_fields=["id"], filter=lambda r: r["active"])``
    or, by registered name, ``CompiledTarget(compiler="namedtuple",
    compiler_options={"fields": ["id", "name"]})``.

    * ``compiler``: ``fn(row) -> object``, or the name of a compiler registered through the
      ``laredo_register_compilers`` hook (built in: ``dict``, ``namedtuple``, ``object``),
      built with ``laredo.compiler(name, **compiler_options)``.
    * ``key_fields``: the fields that identify a row; default: the table's primary key.
    * ``filter``: ``fn(row) -> bool``, a ``PipelineFilter`` (``include(table, row)``), or a spec
      ``{"type": "field-equals", ...}`` built with ``laredo.filter``. A row failing it is not
      kept; an UPDATE that makes a row fail it deletes the row.
    * A compiler (or filter) that raises skips the row: logged, counted in ``compile_errors``;
      on UPDATE the old object is removed (a stale object is never served).
    * Reads (``get``, ``all``) return the compiled objects themselves: compile to immutable
      objects (namedtuples, frozen dataclasses, the ``dict`` compiler's read-only mappings).
    * The raw rows are kept too: ``export_snapshot`` exports them and ``restore_snapshot``
      compiles them again. Listeners receive ``(old_object, new_object)``.
    * The compiler runs on the writer's thread with the data lock held: keep it quick.
    """

    plugin_name = "compiled-memory"

    @property
    def counts_delivered_rows(self) -> bool:
        """False when a filter or failing compiler may drop rows (the engine then skips its
        row-count validation, which would report a false mismatch)."""
        return self._filter is None and self.compile_errors == 0

    def __init__(
        self,
        compiler: Callable[[Row], Any] | str,
        key_fields: Sequence[str] | str = (),
        filter: RowFilter | Mapping[str, Any] | Any | None = None,
        compiler_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        problems: list[str] = []
        self._compiler: Callable[[Row], Any] = _no_compiler
        self.compiler_name = ""
        if isinstance(compiler, str):
            self.compiler_name = compiler
            try:
                built = build_compiler(compiler, **dict(compiler_options or {}))
            except ConfigError as exc:
                problems.extend(f"compiler: {p}" for p in exc.problems)
            else:
                if callable(built):
                    self._compiler = built
                else:
                    problems.append(
                        f"compiler: {compiler!r} built {type(built).__name__}, not a function"
                    )
        elif callable(compiler):
            self._compiler = compiler
            self.compiler_name = getattr(compiler, "__qualname__", repr(compiler))
            if compiler_options:
                problems.append(
                    "compiler_options: only used with a compiler given by name; call your "
                    "function with its options yourself (functools.partial)"
                )
        else:  # pragma: no cover - guarded by typing, checked for untyped callers
            problems.append(  # type: ignore[unreachable,unused-ignore]
                f"compiler: must be a function row -> object or a registered compiler name "
                f"(got {type(compiler).__name__})"
            )
        if isinstance(key_fields, str):
            key_fields = [key_fields]
        kf = tuple(key_fields or ())
        for i, f in enumerate(kf):
            if not isinstance(f, str) or not f:
                problems.append(f"key_fields[{i}]: must be a non-empty column name (got {f!r})")
        self._filter: RowFilter | None = self._resolve_filter(filter, problems)
        if problems:
            raise ConfigError([f"compiled-memory target: {p}" for p in problems])
        self._explicit_keys = kf
        self._objects: dict[Any, Any] = {}
        self.compile_errors = 0
        """Rows skipped because the compiler or the filter raised."""

    def _resolve_filter(self, flt: Any, problems: list[str]) -> RowFilter | None:
        if flt is None:
            return None
        if isinstance(flt, Mapping):
            spec = dict(flt)
            name = spec.pop("type", None)
            if not isinstance(name, str):
                problems.append(
                    'filter: a filter spec needs "type" (e.g. {"type": "field-equals", ...})'
                )
                return None
            try:
                flt = build_filter(name, **spec)
            except ConfigError as exc:
                problems.extend(f"filter: {p}" for p in exc.problems)
                return None
        include = getattr(flt, "include", None)
        if callable(include):

            def by_pipeline_filter(row: Row) -> bool:
                return bool(include(self._table, row))

            return by_pipeline_filter
        if callable(flt):
            return flt  # type: ignore[no-any-return]
        problems.append(
            "filter: must be a function row -> bool, a PipelineFilter or a filter spec "
            f"mapping (got {type(flt).__name__})"
        )
        return None

    # ------------------------------------------------------------------ configuration
    def _explicit_key_fields(self) -> tuple[str, ...]:
        return self._explicit_keys

    def _fallback_key_fields(self) -> tuple[str, ...]:
        return ()

    def _no_key_hint(self) -> str:
        return "key_fields"

    def _configured_fields(self) -> list[tuple[str, str]]:
        return [("key field", f) for f in self._explicit_keys]

    # ------------------------------------------------------------------ storage (lock held)
    def _compile(self, row: Row) -> Any:
        """The compiled object, or MISSING when the row is filtered out or fails to compile."""
        try:
            flt = self._filter
            if flt is not None and not flt(row):
                return MISSING
            return self._compiler(row)
        except Exception as exc:
            self.compile_errors += 1
            logger.warning(
                "table %s: compiled-memory target skipped a row: %s %s: %s",
                self._table,
                self.compiler_name,
                type(exc).__name__,
                exc,
                extra={"table": str(self._table)},
            )
            return MISSING

    def _put(
        self,
        key: Any,
        row: Row,
        pending: Pending,
        moved_from: Any = MISSING,
        old: Any = MISSING,
    ) -> None:
        row = dict(row)  # the caller's row: keep a copy
        obj = self._compile(row)
        objects = self._objects
        if obj is MISSING:
            if moved_from is not MISSING:
                self._discard(moved_from, pending)
            self._discard(key, pending)
            return
        if moved_from is not MISSING:
            if key in objects:
                self._discard(key, pending)
            prev = objects.pop(moved_from, None)
            self._rows.pop(moved_from, None)
        else:
            prev = objects.get(key)
        self._rows[key] = row
        objects[key] = obj
        if pending is not None:
            pending.append((prev, obj))

    def _discard(self, key: Any, pending: Pending) -> None:
        if self._rows.pop(key, None) is None:
            return
        old = self._objects.pop(key)
        if pending is not None:
            pending.append((old, None))

    def _clear(self, pending: Pending) -> None:
        self._rows = {}
        self._objects = {}
        if pending is not None:
            pending.append((None, None))

    def _build(self, rows: Iterable[Row], copy: bool) -> tuple[dict[Any, Row], dict[Any, Any]]:
        key_of = self._key_of
        new_rows: dict[Any, Row] = {}
        objects: dict[Any, Any] = {}
        for n, row in enumerate(rows):
            try:
                key = key_of(row)
            except (KeyError, TypeError):
                key = self._key(row, f"row {n}")
            if copy:
                row = dict(row)
            obj = self._compile(row)
            try:
                if obj is MISSING:
                    new_rows.pop(key, None)
                    objects.pop(key, None)
                else:
                    new_rows[key] = row
                    objects[key] = obj
            except TypeError:
                self._check_hashable(key)
                raise
        return new_rows, objects

    def _rebuild(self) -> None:
        self._rows, self._objects = self._build(list(self._rows.values()), copy=False)

    def _replace_state(self, rows: Iterable[Row]) -> Callable[[], list[Any]]:
        new_rows, objects = self._build(rows, copy=True)

        def install() -> list[Any]:
            self._rows = new_rows
            self._objects = objects
            return list(objects.values())

        return install

    def _listener_values(self) -> list[Any]:
        return list(self._objects.values())

    # ------------------------------------------------------------------ reads
    def get(self, *key_values: Any) -> Any:
        """The compiled object with this key (values in key order), or None."""
        n = len(self._key_fields)
        if len(key_values) != n:
            self._arity("get()", self._key_fields, key_values)
        key = key_values[0] if n == 1 else key_values
        v = self._version  # optimistic read (see IndexedTarget.get)
        obj = self._objects.get(key)
        if v & 1 or v != self._version:
            with self._lock:
                obj = self._objects.get(key)
        return obj

    def all(self) -> list[Any]:
        """Every compiled object, as of one instant."""
        with self._lock:
            return list(self._objects.values())

    def get_row(self, *key_values: Any) -> Row | None:
        """A copy of the raw row the object was compiled from, or None."""
        n = len(self._key_fields)
        if len(key_values) != n:
            self._arity("get_row()", self._key_fields, key_values)
        with self._lock:
            row = self._rows.get(key_values[0] if n == 1 else key_values)
        return None if row is None else dict(row)

    # ------------------------------------------------------------------ schema
    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
    ) -> SchemaChangeResponse:
        """Unchanged columns: CONTINUE. Any added, dropped or retyped column: RE_BASELINE (the
        compiled objects may depend on every column)."""
        return self._schema_change_response(table, old_columns, new_columns, allow_added=False)


def _no_compiler(row: Row) -> Any:
    raise TargetError("compiled-memory target has no compiler")


__all__ = ["CompiledTarget"]
