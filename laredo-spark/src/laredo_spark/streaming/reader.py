"""Any Laredo source as a Structured Streaming source: ``spark.readStream.format("laredo")``.

``spark.readStream.format("laredo").options(**stream_options(...)).load()`` gives one row per
change: ``position`` (the source's serialised position, ``position_to_string``), ``seq`` (order
within the micro-batch), ``table`` (``schema.table``), ``action`` (INSERT, UPDATE, DELETE,
TRUNCATE, SCHEMA_CHANGE), ``xid``, ``new_values`` / ``old_values`` (typed JSON of the row, see
:mod:`laredo.serialization`) and ``unchanged_toast`` (JSON list of column names).
With the ``table`` option (one table) the frame is instead that table's columns as native
Spark types plus Delta CDF's ``_change_type``, ``_commit_position``, ``_commit_version``,
``_commit_timestamp``, ``_seq`` (:mod:`.cdf`).

``maxRowsPerTrigger`` is the default read limit (rows of the frame per micro-batch, whole
transactions only); ``Trigger.AvailableNow`` and ``reportLatestOffset`` (the lag in
``StreamingQueryProgress``) are supported.

Offsets are ``{"position": <serialised position or null>}``. A micro-batch holds whole
transactions only: a position is offered once a later position, a heartbeat at or after it, or
``completeAfter`` seconds of quiet show its transaction is complete.

Acknowledgement: ``commit(end)`` acknowledges the source at ``end``, and only then. Spark calls
``commit`` one micro-batch late (when it plans the next batch; never while idle and never at
stop), so the source's acknowledged position trails what Spark has committed by one batch. On
restart the Spark checkpoint, not the source, is the offset authority: the stream restarts at the
source's last acknowledged position (or ``startingPosition``) and skips everything at or before
the checkpointed offset, and an uncommitted batch is re-read with exactly its logged range.

Where the code runs: ``initialOffset / latestOffset / partitions / commit`` run in one
long-lived Python process that owns the Laredo source (its ``stream`` runs on a thread there);
``read`` runs on the executors and only unpacks the events shipped in the partition. The source
is built in that process from the options, so it must be constructible there: a registered
plugin type plus config, or an importable factory.

Secrets: options are part of the query plan (``explain``, the UI's SQL and Structured
Streaming tabs, event logs, the history server), so a source config or factory arguments that
hold a credential (:mod:`laredo.secrets`: a password in a DSN, a ``*_key``, a token...) never
go into them. :func:`stream_options` writes such a config to a file readable by this user only
(0600 in a 0700 folder, removed at exit) and the options carry its path
(``source.configFile`` / ``source.argsFile``); or give ``source_config_file`` /
``factory_args_file``, a file on the driver you manage (a mounted secret). The driver reads it
when it builds the source.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from laredo.errors import ConfigError, SourceError
from laredo.plugins import source as plugin_source
from laredo.secrets import mask_secrets
from laredo.serialization import encode_columns
from laredo.types import (
    ChangeAction,
    ColumnDefinition,
    SourceConfig,
    TableIdentifier,
    primary_key_columns,
)
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ..kinds import compact_json
from .cdf import cdf_kinds, cdf_rows, cdf_schema
from .changes import CHANGE_SCHEMA, encode_row

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_ROWS",
    "EventsPartition",
    "LaredoStreamDataSource",
    "LaredoStreamReader",
    "build_source",
    "stream_options",
    "table_schema",
]

DEFAULT_MAX_ROWS = 1_000_000
"""The default ``maxRowsPerTrigger``: rows of the frame in one micro-batch."""


def stream_options(
    *,
    tables: Sequence[TableIdentifier | str] = (),
    table: TableIdentifier | str | None = None,
    source_type: str | None = None,
    source_config: Mapping[str, Any] | None = None,
    factory: str | None = None,
    factory_args: Mapping[str, Any] | None = None,
    source_config_file: str | None = None,
    factory_args_file: str | None = None,
    starting_position: str | None = None,
    complete_after: float = 1.0,
    replay_timeout: float = 120.0,
    events_per_partition: int = 50_000,
    max_rows_per_trigger: int | None = None,
) -> dict[str, str]:
    """Options for ``spark.readStream.format("laredo")``.

    ``table`` gives the typed change frame of that one table (:mod:`.cdf`, shaped like Delta's
    change data feed); ``tables`` the typed-JSON change frame of several tables that
    ``TargetSink``, ``SnapshotSink`` and ``FileSink`` take. ``max_rows_per_trigger`` bounds a
    micro-batch (whole transactions only: a larger transaction is never split; 0: no bound;
    default 1,000,000).

    The source is ``laredo.source(source_type, **source_config)`` or
    ``factory(**factory_args)`` (``"package.module:function"``, importable where Spark runs
    the stream reader). ``starting_position`` (serialised) is where a new query starts; by
    default the source's last acknowledged position, else wherever ``stream(None)`` starts.

    A config or arguments holding a secret go into a private file, never into the options
    (which Spark shows in plans and logs); ``source_config_file`` / ``factory_args_file``
    name a JSON file on the driver instead of ``source_config`` / ``factory_args``.
    """
    if (source_type is None) == (factory is None):
        raise ConfigError("laredo stream: give exactly one of source_type or factory")
    if source_config is not None and source_config_file is not None:
        raise ConfigError("laredo stream: give source_config or source_config_file, not both")
    if factory_args is not None and factory_args_file is not None:
        raise ConfigError("laredo stream: give factory_args or factory_args_file, not both")
    if (table is None) == (not tables):
        raise ConfigError(
            "laredo stream: give exactly one of table (the typed change frame of one table) "
            "or tables (the typed-JSON frame of several)"
        )
    opts = {
        **({"table": str(table)} if table is not None else {}),
        **({"tables": ",".join(str(t) for t in tables)} if tables else {}),
        "completeAfter": str(complete_after),
        "replayTimeout": str(replay_timeout),
        "eventsPerPartition": str(events_per_partition),
    }
    if source_type is not None:
        opts["source.type"] = source_type
        opts.update(_carry("source.config", source_config, source_config_file))
    else:
        assert factory is not None
        opts["source.factory"] = factory
        opts.update(_carry("source.args", factory_args, factory_args_file))
    if starting_position is not None:
        opts["startingPosition"] = starting_position
    if max_rows_per_trigger is not None:
        opts["maxRowsPerTrigger"] = str(max_rows_per_trigger)
    return opts


def _carry(key: str, value: Mapping[str, Any] | None, file: str | None) -> dict[str, str]:
    """The option carrying ``value`` as ``key`` (JSON), or as ``<key>File`` (a path) when
    ``file`` is given or ``value`` holds a secret (written to a private file)."""
    if file is not None:
        return {f"{key}File": file}
    data = dict(value or {})
    if mask_secrets(data) == data:
        return {key: json.dumps(data)}
    return {f"{key}File": _private_file(data)}


def _private_file(data: Mapping[str, Any]) -> str:
    """``data`` as JSON in a new file only this user can read (removed at exit)."""
    folder = tempfile.mkdtemp(prefix="laredo-stream-")  # 0700
    atexit.register(shutil.rmtree, folder, True)
    path = os.path.join(folder, "source.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(dict(data), f)
    return path


def _json_option(options: Mapping[str, str], key: str) -> dict[str, Any]:
    """The JSON object of option ``key``, or of the file option ``<key>File`` names."""
    path = _opt(options, f"{key}File")  # Spark hands the keys over lower-cased
    if path is None:
        return dict(json.loads(options.get(key) or "{}"))
    try:
        with open(path) as f:
            return dict(json.load(f))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"laredo stream: {key}File {path!r}: cannot read it ({exc})") from None


def build_source(options: Mapping[str, str]) -> Any:
    """The Laredo source described by stream options (see :func:`stream_options`)."""
    if "source.factory" in options:
        ref = options["source.factory"]
        mod_name, _, attr = ref.partition(":")
        if not mod_name or not attr:
            raise ConfigError(f"laredo stream: source.factory {ref!r}: use 'module:function'")
        fn = getattr(importlib.import_module(mod_name), attr)
        return fn(**_json_option(options, "source.args"))
    if "source.type" in options:
        return plugin_source(options["source.type"], **_json_option(options, "source.config"))
    raise ConfigError(
        "laredo stream: set the source.type (+ source.config) or source.factory option"
    )


def _tables(options: Mapping[str, str]) -> list[TableIdentifier]:
    one = (options.get("table") or "").strip()
    if one:
        if (options.get("tables") or "").strip():
            raise ConfigError(
                "laredo stream: set the 'table' option (typed change frame of one table) or "
                "'tables' (typed-JSON frame of several), not both"
            )
        return [TableIdentifier.parse(one)]
    text = options.get("tables") or ""
    tables = [TableIdentifier.parse(t.strip()) for t in text.split(",") if t.strip()]
    if not tables:
        raise ConfigError(
            "laredo stream: set the 'table' option ('schema.table') or 'tables' "
            "('schema.table,...')"
        )
    return tables


def _opt(options: Mapping[str, str], key: str) -> str | None:
    """An option by its documented name; Spark hands the options over with their keys
    lower-cased (a case-insensitive dict that ``dict()`` flattens)."""
    if key in options:
        return options[key]
    return options.get(key.lower())


def _max_rows(options: Mapping[str, str]) -> int:
    text = _opt(options, "maxRowsPerTrigger") or str(DEFAULT_MAX_ROWS)
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise ConfigError(
            f"laredo stream: maxRowsPerTrigger must be an integer >= 0 (0: no bound), not {text!r}"
        )
    return n


def _init(src: Any, tables: list[TableIdentifier]) -> dict[TableIdentifier, Any]:
    found = src.init(SourceConfig(list(tables)))
    problems = [str(p) for p in src.validate_tables(tables)]
    if problems:
        raise ConfigError([f"laredo stream: {p}" for p in problems])
    return dict(found or {})


def _table_columns(found: Mapping[TableIdentifier, Any], table: TableIdentifier) -> list[Any]:
    cols = list(found.get(table) or ())
    if not cols:
        raise ConfigError(f"laredo stream: the source reports no columns for table {table}")
    return cols


def table_schema(options: Mapping[str, str]) -> Any:
    """The Spark schema of the ``table`` option's frame (the source's ``init`` gives the
    columns; the source is closed again)."""
    table = _tables(options)[0]
    src = build_source(options)
    try:
        return cdf_schema(cdf_kinds(str(table), _table_columns(_init(src, [table]), table)))
    finally:
        with contextlib.suppress(Exception):
            src.close()


def _version(position: Any) -> int | None:
    """A position as ``_commit_version``: itself when it is an integer (a PostgreSQL LSN)."""
    return position if type(position) is int else None


@dataclass(frozen=True)
class EventsPartition(InputPartition):
    """Changes shipped to an executor, already encoded as output tuples."""

    rows: tuple[tuple[Any, ...], ...]


_UNSET: Any = object()


def _action(ev: Any) -> str:
    action = ev.action
    return action.name if isinstance(action, ChangeAction) else str(action)


class _Handler:
    def __init__(self, reader: LaredoStreamReader) -> None:
        self.reader = reader

    def on_changes(self, events: Sequence[Any], complete: bool = True) -> None:
        # a batch is cut at a later position, a heartbeat or quiet: `complete` is not needed
        self.reader._add(events)

    def on_change(self, event: Any) -> None:
        self.reader._add([event])

    def on_heartbeat(self, position: Any) -> None:
        self.reader._heartbeat(position)

    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
        position: Any,
    ) -> None:
        if self.reader.cdf:
            self.reader._schema_changed(table, new_columns, position)
            return
        ev = (
            position,
            str(table),
            "SCHEMA_CHANGE",
            0,
            compact_json({"columns": encode_columns(list(new_columns))}),
            compact_json({"columns": encode_columns(list(old_columns))}),
            "[]",
        )
        self.reader._add_raw([ev])


class LaredoStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """See the module docstring. One instance per query run, in Spark's stream-reader process."""

    def __init__(self, options: Mapping[str, str], schema: Any = None) -> None:
        self.options = dict(options)
        self.tables = _tables(self.options)
        self.cdf = bool((self.options.get("table") or "").strip())
        self.max_rows = _max_rows(self.options)
        self._schema = schema  # the frame's schema Spark planned with (cdf only)
        self._kinds: dict[str, str] = {}
        self._keys: list[str] = []
        self._available_now = False
        self._found: dict[TableIdentifier, Any] | None = None
        self._initial: dict[str, Any] | None = None
        self._target: Any = _UNSET
        self.complete_after = float(_opt(self.options, "completeAfter") or "1.0")
        self.replay_timeout = float(_opt(self.options, "replayTimeout") or "120")
        self.per_partition = max(1, int(_opt(self.options, "eventsPerPartition") or "50000"))
        self._cond = threading.Condition()
        self._events: list[tuple[Any, ...]] = []  # (position, table, action, xid, new, old, toast)
        self._last_pos: Any = None
        self._prev_pos: Any = None  # the last position before _last_pos (complete)
        self._heartbeat_pos: Any = None
        self._last_event_at = time.monotonic()
        self._error: BaseException | None = None
        self._source: Any = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    def __getstate__(self) -> dict[str, Any]:
        # Spark ships the reader to the executors for read(): only the options travel.
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # -- the source side -----------------------------------------------------------------
    def _src(self) -> Any:
        if self._source is None:
            self._source = build_source(self.options)
        return self._source

    def _cmp(self, a: Any, b: Any) -> int:
        if a is None and b is None:
            return 0
        if a is None:
            return -1
        if b is None:
            return 1
        return int(self._src().compare_positions(a, b))

    def _parse(self, offset: Mapping[str, Any] | None) -> Any:
        text = (offset or {}).get("position")
        return None if text is None else self._src().position_from_string(text)

    def _offset(self, position: Any) -> dict[str, Any]:
        return {"position": None if position is None else self._src().position_to_string(position)}

    def _ensure_started(self, start: Any) -> None:
        if self._thread is not None:
            return
        src = self._src()
        self._init_once()
        from_pos = start
        last = None
        with contextlib.suppress(Exception):
            if src.supports_resume():
                last = src.last_acked_position()
        if last is not None and (from_pos is None or self._cmp(last, from_pos) < 0):
            # never happens with our ACKs (they trail Spark's commits), but a source acked by
            # someone else must not skip what the checkpoint still needs
            logger.warning("source acknowledged %r, behind the checkpoint: re-reading", last)
        self._thread = threading.Thread(
            target=self._run, args=(from_pos,), name="laredo-spark-stream", daemon=True
        )
        self._last_event_at = time.monotonic()
        self._thread.start()

    def _init_once(self) -> None:
        """The source's ``init`` (once per reader), and the typed frame's columns."""
        if self._found is not None:
            return
        found = _init(self._src(), self.tables)
        if self.cdf:
            self._frame_columns(str(self.tables[0]), _table_columns(found, self.tables[0]))
        self._found = found

    def _frame_columns(self, table: str, cols: list[ColumnDefinition]) -> None:
        self._kinds = cdf_kinds(table, cols)
        self._keys = primary_key_columns(cols)
        if self._schema is not None and cdf_schema(self._kinds) != self._schema:
            raise SourceError(
                f"laredo stream: the columns of {table} are now {self._kinds}, not those of the "
                "frame the query was planned with: restart the query (or give no .schema())"
            )

    def _schema_changed(self, table: TableIdentifier, cols: Sequence[Any], position: Any) -> None:
        """A schema change of the frame's table: nothing to do when its frame is the same,
        else an error from the batch that reaches it (the frame's columns are fixed)."""
        try:
            same = cdf_kinds(str(table), list(cols)) == self._kinds
        except SourceError:
            same = False
        msg = None
        if not same:
            names = [c.name for c in cols]
            msg = (
                f"laredo stream: the columns of {table} changed at position "
                f"{self._src().position_to_string(position)} (now {names}); the typed frame's "
                "columns are read when the query starts: restart the query"
            )
        self._add_raw([(position, str(table), "SCHEMA_CHANGE", msg)])

    def _run(self, from_pos: Any) -> None:
        try:
            self._src().stream(from_pos, _Handler(self))
        except BaseException as exc:  # reported from the next Spark call
            if not self._stopped:
                logger.warning("laredo stream source failed: %s", exc)
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()

    def _add(self, events: Sequence[Any]) -> None:
        if self.cdf:
            self._add_raw([(ev.position, str(ev.table), _action(ev), ev) for ev in events])
            return
        raw = []
        for ev in events:
            raw.append(
                (
                    ev.position,
                    str(ev.table),
                    _action(ev),
                    int(ev.xid or 0),
                    encode_row(ev.new_values),
                    encode_row(ev.old_values),
                    json.dumps(sorted(ev.unchanged_toast or ())),
                )
            )
        self._add_raw(raw)

    def _add_raw(self, raw: Sequence[tuple[Any, ...]]) -> None:
        if not raw:
            return
        with self._cond:
            for ev in raw:
                pos = ev[0]
                if self._last_pos is None or self._cmp(pos, self._last_pos) > 0:
                    self._prev_pos = self._last_pos
                    self._last_pos = pos
                self._events.append(ev)
            self._last_event_at = time.monotonic()
            self._cond.notify_all()

    def _heartbeat(self, position: Any) -> None:
        if position is None:
            return
        with self._cond:
            if self._heartbeat_pos is None or self._cmp(position, self._heartbeat_pos) > 0:
                self._heartbeat_pos = position
                self._cond.notify_all()

    def _complete(self) -> Any:
        """The highest position whose transaction is known complete (call with the lock).

        Heartbeats only complete the newest delivered transaction; they never move the offset
        past delivered data (a heartbeat may race ahead of a transaction still in flight)."""
        best = self._prev_pos
        last = self._last_pos
        if last is not None and (
            (self._heartbeat_pos is not None and self._cmp(self._heartbeat_pos, last) >= 0)
            or time.monotonic() - self._last_event_at >= self.complete_after
        ):
            best = last
        return best

    def _check(self) -> None:
        err = self._error
        if err is not None:
            raise SourceError(f"laredo stream source failed: {type(err).__name__}: {err}")

    # -- Spark's side --------------------------------------------------------------------
    def initialOffset(self) -> dict[str, Any]:
        """``startingPosition``, else the source's last acknowledged position (asked after its
        ``init``), else ``None``; the same answer however often Spark asks (it asks more than
        once, and a batch from one answer to another would read a range twice)."""
        if self._initial is None:
            self._initial = self._first_offset()
        return dict(self._initial)

    def _first_offset(self) -> dict[str, Any]:
        start = _opt(self.options, "startingPosition")
        if start is None:
            src = self._src()
            self._init_once()
            with contextlib.suppress(Exception):
                if src.supports_resume():
                    last = src.last_acked_position()
                    if last is not None:
                        return self._offset(last)
            return {"position": None}
        self._src().position_from_string(start)  # validate now
        return {"position": start}

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxRowsPerTrigger)`` (default 1,000,000), or all available for 0."""
        return ReadMaxRows(self.max_rows) if self.max_rows > 0 else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """``Trigger.AvailableNow``: the query ends at the newest complete position delivered
        when the source first sends a heartbeat (PostgreSQL: the server's position, with
        every change before it delivered), or, for a source without heartbeats, once it has
        delivered something and then been quiet for ``completeAfter`` seconds (at most
        ``replayTimeout`` seconds). Changes committed later are left to the next run."""
        self._available_now = True
        self._target = _UNSET

    def _available_target(self) -> Any:
        """The end of an ``AvailableNow`` run (call with the lock)."""
        deadline = time.monotonic() + self.replay_timeout
        while True:
            self._check()
            now = time.monotonic()
            quiet = now - self._last_event_at
            if (
                self._heartbeat_pos is not None
                or (self._last_pos is not None and quiet >= self.complete_after)
                or now >= deadline
            ):
                return self._complete()
            self._cond.wait(min(0.2, deadline - now) + 0.01)

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        begin = self._parse(start)
        self._ensure_started(begin)
        max_rows = getattr(limit, "max_rows", None)
        with self._cond:
            self._check()
            if self._available_now and self._target is _UNSET:
                self._target = self._available_target()
            end = self._complete()
            if self._available_now and (
                self._target is None or (end is not None and self._cmp(end, self._target) > 0)
            ):
                end = self._target
            if end is None or self._cmp(end, begin) <= 0:
                return dict(start)
            if isinstance(max_rows, int) and max_rows > 0:
                end = self._cap(begin, end, max_rows)
            return self._offset(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The newest complete position the source has delivered (Spark reports it as the
        source's ``latestOffset`` in ``StreamingQueryProgress``: the lag is its distance to
        ``endOffset``); ``None`` before the source has delivered anything."""
        with self._cond:
            done = self._complete()
        return None if done is None else self._offset(done)

    def _weight(self, ev: tuple[Any, ...]) -> int:
        """Rows of the frame one stored event becomes."""
        if not self.cdf:
            return 1
        return {"UPDATE": 2, "SCHEMA_CHANGE": 0}.get(ev[2], 1)

    def _cap(self, begin: Any, end: Any, max_rows: int) -> Any:
        """The highest position up to ``end`` whose batch holds at most ``max_rows`` rows (at
        least one whole transaction, however large)."""
        total = 0
        chosen = None  # the last position whose transaction fits
        pos_rows = 0  # rows of the transaction at `last`
        last = None
        for ev in self._events:
            pos = ev[0]
            if self._cmp(pos, begin) <= 0:
                continue
            if self._cmp(pos, end) > 0:
                break
            if last is not None and self._cmp(pos, last) > 0:
                if chosen is not None and total + pos_rows > max_rows:
                    return chosen
                total += pos_rows
                chosen, pos_rows = last, 0
            last = pos
            pos_rows += self._weight(ev)
        if last is not None and chosen is not None and total + pos_rows > max_rows:
            return chosen
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[EventsPartition]:
        begin, stop = self._parse(start), self._parse(end)
        if stop is None:  # (begin, None]: nothing is at or before None
            return [EventsPartition(())]
        self._ensure_started(begin)
        deadline = time.monotonic() + self.replay_timeout
        with self._cond:
            while True:
                self._check()
                done = self._complete()
                if stop is None or (done is not None and self._cmp(done, stop) >= 0):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SourceError(
                        f"laredo stream: the source did not deliver up to {end.get('position')} "
                        f"within {self.replay_timeout}s to replay the checkpointed batch; it "
                        "must be able to stream again from its last acknowledged position"
                    )
                self._cond.wait(min(left, 0.2))
            rows: list[tuple[Any, ...]] = []
            src = self._src()
            picked = []
            for ev in self._events:
                pos = ev[0]
                if begin is not None and self._cmp(pos, begin) <= 0:
                    continue
                if stop is not None and self._cmp(pos, stop) > 0:
                    break
                picked.append(ev)
            if self.cdf:
                rows = self._cdf_rows(picked)
            else:
                rows = [(src.position_to_string(ev[0]), i, *ev[1:]) for i, ev in enumerate(picked)]
        chunks = [
            EventsPartition(tuple(rows[i : i + self.per_partition]))
            for i in range(0, len(rows), self.per_partition)
        ]
        return chunks or [EventsPartition(())]

    def _cdf_rows(self, picked: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        src = self._src()
        events = []
        for pos, _table, action, ev in picked:
            if action == "SCHEMA_CHANGE":
                if ev is not None:
                    raise SourceError(ev)
                continue
            events.append((src.position_to_string(pos), action, ev))
        return cdf_rows(str(self.tables[0]), self._kinds, self._keys, events, _version)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, EventsPartition)
        yield from partition.rows

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to ``end``: acknowledge the source there."""
        pos = self._parse(end)
        if pos is None:
            return
        with self._cond:
            self._events = [ev for ev in self._events if self._cmp(ev[0], pos) > 0]
        self._src().ack(pos)

    def stop(self) -> None:
        self._stopped = True
        src = self._source
        if src is None:
            return
        stopper = getattr(src, "stop_stream", None)
        with contextlib.suppress(Exception):
            if callable(stopper):
                stopper()
        if self._thread is not None:
            self._thread.join(5)
        with contextlib.suppress(Exception):
            src.close()


class LaredoStreamDataSource(DataSource):
    """``spark.readStream.format("laredo")``: see :func:`stream_options`."""

    @classmethod
    def name(cls) -> str:
        return "laredo"

    def schema(self) -> Any:
        if (self.options.get("table") or "").strip():
            return table_schema(self.options)
        return CHANGE_SCHEMA

    def streamReader(self, schema: Any) -> LaredoStreamReader:
        cdf = bool((self.options.get("table") or "").strip())
        return LaredoStreamReader(self.options, schema if cdf else None)
