"""Preflight checks: what a plugin verifies before a pipeline starts, and how it says so.

A plugin registers checks per plugin kind and type name in its ``laredo_register_checks``
hook::

    @hookimpl
    def laredo_register_checks(registry):
        registry.add("source", "postgresql", check_postgres)

A check is ``fn(request: CheckRequest) -> Iterable[Finding]``. It receives the plugin's
validated options, where they are in the configuration, and the tables it serves with the fields
the pipelines read from each table. Guarantees a check must keep:

* **Read-only.** A check inspects; it never creates or changes anything (no slot, no
  publication, no bucket, no table), so ``laredo check`` is safe on production.
* **Every problem at once.** It returns all its findings instead of stopping at the first;
  each problem names its fix (``Finding.fix``), and a fix is never one already applied.
* **Bounded.** It waits at most ``request.timeout`` seconds per connection or call (or the
  plugin's own connect timeout option).

:mod:`laredo.config.preflight` builds the requests from a configuration and runs the checks
(``laredo check``, and ``laredo serve`` at startup).

Which fields a pipeline reads is declared by its components, never guessed from option names:
a filter, transform or target options model implements :class:`ReadsFields`; a transform that
renames, adds or removes fields implements :class:`MapsFields`, so a target's fields are traced
back to the source's columns. Targets that declare their indexes (``lookup_fields`` and
``indexes``, as the Query service reads them) need nothing more (:func:`declared_fields`).
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigError
from .types import TableIdentifier

__all__ = [
    "CHECK_KINDS",
    "CheckEntry",
    "CheckFunction",
    "CheckRegistry",
    "CheckReport",
    "CheckRequest",
    "ClaimsListeners",
    "FieldUse",
    "Finding",
    "KeysRows",
    "ListenerClaim",
    "MapsFields",
    "ReadsFields",
    "Severity",
    "TableUse",
    "declared_fields",
    "missing_field_findings",
]


class Severity(StrEnum):
    """How bad a finding is: ``error`` (will not work until fixed; ``laredo check`` exits 1),
    ``warning`` (works, with a risk worth fixing), ``info`` (what was found or will happen)."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Finding:
    """One result of a check: a stable ``code`` (``WAL_LEVEL``), what is wrong or was found,
    and the fix (empty for ``info``). ``where`` is the configuration key path it concerns
    (``sources.pg``, ``tables.0.targets.0.lookup_fields.0``); the runner fills in the plugin's
    own path when a check leaves it empty."""

    severity: Severity
    code: str
    message: str
    fix: str = ""
    where: str = ""
    table: TableIdentifier | None = None

    @classmethod
    def error(cls, code: str, message: str, fix: str = "", **kw: Any) -> Finding:
        return cls(Severity.ERROR, code, message, fix, **kw)

    @classmethod
    def warning(cls, code: str, message: str, fix: str = "", **kw: Any) -> Finding:
        return cls(Severity.WARNING, code, message, fix, **kw)

    @classmethod
    def info(cls, code: str, message: str, **kw: Any) -> Finding:
        return cls(Severity.INFO, code, message, **kw)

    def to_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity.value,
            "code": self.code,
            "message": self.message,
            "fix": self.fix,
            "where": self.where,
            "table": str(self.table) if self.table is not None else None,
        }


@dataclass(frozen=True, slots=True)
class FieldUse:
    """A field of the source's rows that a pipeline component reads: ``field`` (the column
    name at the source, after tracing renames back) and ``where`` (the key path naming it)."""

    field: str
    where: str


@dataclass(frozen=True, slots=True)
class TableUse:
    """A configured table (``where``: ``tables.<i>``) and the source fields its pipelines read.
    ``keyed``: ``(key path, fields)`` of each target that stores rows by a key
    (:class:`KeysRows`); empty ``fields``: the table's own key (primary key or replica identity
    index), which a source check reports missing. ``baseline_mode``: the table's own
    ``baseline.mode`` (``None``: its source's)."""

    table: TableIdentifier
    where: str
    fields: tuple[FieldUse, ...] = ()
    keyed: tuple[tuple[str, tuple[str, ...]], ...] = ()
    baseline_mode: str | None = None


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """What a check receives: the plugin ``kind`` and type ``name``, the key path of its
    configuration (``where``), its validated ``options`` (the registered options model, or a
    dict for a plugin without one), the tables it serves (a source: every table read from it; a
    target: its table), and the longest wait per connection or call."""

    kind: str
    name: str
    where: str
    options: Any
    tables: tuple[TableUse, ...] = ()
    timeout: float = 10.0


CheckFunction = Callable[[CheckRequest], Iterable[Finding]]
"""``check(request) -> findings``: read-only, every problem at once (see the module doc)."""

CHECK_KINDS = (
    "source",
    "target",
    "snapshot_store",
    "serializer",
    "dead_letter_store",
    "observer",
)
"""The plugin kinds a check can be registered for (the registry kinds configured in a file)."""


@dataclass(frozen=True, slots=True)
class CheckEntry:
    """One registered check: for plugin ``kind``/``name``, and who provided it."""

    kind: str
    name: str
    check: CheckFunction
    provider: str
    description: str = ""


class CheckRegistry:
    """Preflight checks by ``(kind, type name)``. Several plugins may check the same type
    (each adds its own findings); registering the same function twice is ignored."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], list[CheckEntry]] = {}
        self._lock = threading.Lock()
        self.current_provider = "<unknown>"

    def add(self, kind: str, name: str, check: CheckFunction, description: str = "") -> None:
        """Run ``check`` for every configured plugin of ``kind`` (one of :data:`CHECK_KINDS`)
        named ``name`` (``"postgresql"``, ``"s3"``, ...)."""
        if kind not in CHECK_KINDS:
            raise ConfigError(
                f"check for {name!r}: unknown plugin kind {kind!r} (use one of "
                f"{', '.join(CHECK_KINDS)})"
            )
        if not callable(check):
            raise ConfigError(f"check for {kind} {name!r} is not callable: {check!r}")
        with self._lock:
            entries = self._entries.setdefault((kind, name), [])
            if any(e.check == check for e in entries):  # == : bound methods too
                return
            entries.append(CheckEntry(kind, name, check, self.current_provider, description))

    def get(self, kind: str, name: str) -> list[CheckEntry]:
        """The checks of ``kind``/``name`` in registration order (empty when none)."""
        return list(self._entries.get((kind, name), ()))

    def entries(self) -> list[CheckEntry]:
        return [e for key in sorted(self._entries) for e in self._entries[key]]

    def __contains__(self, key: object) -> bool:
        return key in self._entries


@dataclass(frozen=True, slots=True)
class CheckReport:
    """Every finding of a run, and what was checked (``"sources.pg (postgresql)"``)."""

    findings: tuple[Finding, ...] = ()
    checked: tuple[str, ...] = field(default=())

    def of(self, severity: Severity) -> list[Finding]:
        return [f for f in self.findings if f.severity is severity]

    @property
    def errors(self) -> list[Finding]:
        return self.of(Severity.ERROR)

    @property
    def warnings(self) -> list[Finding]:
        return self.of(Severity.WARNING)

    @property
    def ok(self) -> bool:
        """No error (warnings and infos allowed)."""
        return not self.errors

    def passed(self, strict: bool = False) -> bool:
        """No error, and with ``strict`` no warning either."""
        return self.ok and not (strict and self.warnings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "checked": list(self.checked),
            "findings": [f.to_dict() for f in self.findings],
        }


# -- which fields a component reads ---------------------------------------------------------


@runtime_checkable
class ReadsFields(Protocol):
    """A filter, transform or target (or its options model) that names fields of its input
    rows: ``(option key, field name)`` pairs, the key relative to the component's own
    configuration (``("field", "status")``, ``("lookup_fields.0", "email")``)."""

    def fields_read(self) -> Sequence[tuple[str, str]]: ...


@runtime_checkable
class KeysRows(Protocol):
    """A target's options model whose target stores rows by a key: ``row_key_fields()`` is the
    configured key (e.g. ``key_fields``), or empty for the table's own key."""

    def row_key_fields(self) -> Sequence[str]: ...


@runtime_checkable
class MapsFields(Protocol):
    """A transform that says where each output field comes from: ``input_field(name)`` is the
    input field that output field ``name`` holds (``name`` itself when untouched), or ``None``
    when the transform writes that field itself or removes it (no input field to check)."""

    def input_field(self, name: str) -> str | None: ...


# -- listeners a component opens ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListenerClaim:
    """A listener a component's options open on ``host:port``, configured by the section at
    ``key`` (relative to the component: ``"grpc"``) whose values are ``settings``. Components
    that claim the same address share one listener, so their ``settings`` must be equal."""

    key: str
    host: str
    port: int
    settings: Mapping[str, Any]
    open_warning: str = ""
    """The WARNING of a listener that serves without authentication off loopback
    (``allow_unauthenticated``; :func:`laredo.auth.open_listener_warning`); empty: none. The
    server shows it in ``GetStatus`` and ``laredo status``."""


@runtime_checkable
class ClaimsListeners(Protocol):
    """A component's options model that opens listeners (a fan-out target's port): core
    checks that components claiming one address agree, without knowing the plugin."""

    def listener_claims(self) -> Sequence[ListenerClaim]: ...


def declared_fields(obj: Any) -> list[tuple[str, str]] | None:
    """The ``(key, field)`` pairs ``obj`` declares it reads: :meth:`ReadsFields.fields_read`,
    else its index declarations (``lookup_fields``, and ``indexes`` whose items have
    ``fields``: what targets declare for the Query service); ``None`` when it declares none."""
    if isinstance(obj, ReadsFields):
        return [(str(k), str(f)) for k, f in obj.fields_read()]
    lookup = getattr(obj, "lookup_fields", None)
    indexes = getattr(obj, "indexes", None)
    if lookup is None and indexes is None:
        return None
    out: list[tuple[str, str]] = []
    if isinstance(lookup, Sequence) and not isinstance(lookup, str):
        out += [(f"lookup_fields.{i}", f) for i, f in enumerate(lookup) if isinstance(f, str)]
    if isinstance(indexes, Sequence):
        for i, index in enumerate(indexes):
            fields = getattr(index, "fields", None)
            if isinstance(fields, Sequence) and not isinstance(fields, str):
                out += [
                    (f"indexes.{i}.fields.{k}", f)
                    for k, f in enumerate(fields)
                    if isinstance(f, str)
                ]
    return out


def missing_field_findings(
    use: TableUse, columns: Collection[str], code: str = "COLUMN_NOT_FOUND"
) -> list[Finding]:
    """An error for each field of ``use`` that is not in ``columns`` (the table's columns as
    the source delivers them), with the closest column name as the likely fix. Sources call it
    from their checks once they know the columns."""
    out = []
    known = sorted(columns)
    for u in use.fields:
        if u.field in columns:
            continue
        close = difflib.get_close_matches(u.field, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        out.append(
            Finding.error(
                code,
                f"field {u.field!r} is not a column of {use.table} "
                f"(columns: {', '.join(known) or 'none'})",
                f"{hint}use one of the table's columns at {u.where}, or add the column to "
                f"{use.table}",
                where=u.where,
                table=use.table,
            )
        )
    return out
