"""Any Laredo source as a Structured Streaming source, and Laredo sinks for ``foreachBatch``.

``spark.readStream.format("laredo").options(**stream_options(...)).load()`` gives one row per
change: ``position`` (the source's serialised position, ``position_to_string``), ``seq`` (order
within the micro-batch), ``table`` (``schema.table``), ``action`` (INSERT, UPDATE, DELETE,
TRUNCATE, SCHEMA_CHANGE), ``xid``, ``new_values`` / ``old_values`` (typed JSON of the row, see
:mod:`laredo.serialization`) and ``unchanged_toast`` (JSON list of column names).

Offsets are ``{"position": <serialised position or null>}``. A micro-batch holds whole
transactions only: a position is offered once a later position, a heartbeat at or after it, or
``completeAfter`` seconds of quiet show its transaction is complete.

Acknowledgement: ``commit(end)`` acknowledges the source at ``end``, and only then. Spark calls
``commit`` one micro-batch late (when it plans the next batch; never while idle and never at
stop), so the source's acknowledged position trails what Spark has committed by one batch. On
restart the Spark checkpoint, not the source, is the offset authority: the stream restarts at the
source's last acknowledged position (or ``startingPosition``) and skips everything at or before
the checkpointed offset, and an uncommitted batch is re-read with exactly its logged range.
Sinks therefore see a batch again after a crash: :class:`TargetSink` and :class:`SnapshotSink`
remember the last batch id they finished and skip replays; Spark's own Parquet/JSON file sinks
are exactly-once through the checkpoint.

Where the code runs: ``initialOffset / latestOffset / partitions / commit`` run in one
long-lived Python process that owns the Laredo source (its ``stream`` runs on a thread there);
``read`` runs on the executors and only unpacks the events shipped in the partition; the sinks
run in the driver. The source is built in that process from the options, so it must be
constructible there: a registered plugin type plus config, or an importable factory.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from laredo.contracts import FlushableTarget, PositionedTarget
from laredo.errors import ConfigError, SnapshotError, SourceError
from laredo.filters import as_filter
from laredo.pipeline_ops import Chain, apply_change
from laredo.serialization import encode_value
from laredo.transforms import as_transform
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    Row,
    SnapshotMetadata,
    SourceConfig,
    TableIdentifier,
    TableSnapshotInfo,
    primary_key_columns,
)
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from .frame import _dumps, _loads

logger = logging.getLogger(__name__)

__all__ = [
    "CHANGE_SCHEMA",
    "LaredoStreamDataSource",
    "SnapshotSink",
    "TargetSink",
    "build_source",
    "decode_change_rows",
    "stream_options",
]

CHANGE_SCHEMA = (
    "position STRING, seq LONG, table STRING, action STRING, xid LONG, "
    "new_values STRING, old_values STRING, unchanged_toast STRING"
)


def stream_options(
    *,
    tables: Sequence[TableIdentifier | str],
    source_type: str | None = None,
    source_config: Mapping[str, Any] | None = None,
    factory: str | None = None,
    factory_args: Mapping[str, Any] | None = None,
    starting_position: str | None = None,
    complete_after: float = 1.0,
    replay_timeout: float = 120.0,
    events_per_partition: int = 50_000,
) -> dict[str, str]:
    """Options for ``spark.readStream.format("laredo")``.

    The source is ``laredo.source(source_type, **source_config)`` or
    ``factory(**factory_args)`` (``"package.module:function"``, importable where Spark runs
    the stream reader). ``starting_position`` (serialised) is where a new query starts; by
    default the source's last acknowledged position, else wherever ``stream(None)`` starts.
    """
    if (source_type is None) == (factory is None):
        raise ConfigError("laredo stream: give exactly one of source_type or factory")
    opts = {
        "tables": ",".join(str(t) for t in tables),
        "completeAfter": str(complete_after),
        "replayTimeout": str(replay_timeout),
        "eventsPerPartition": str(events_per_partition),
    }
    if source_type is not None:
        opts["source.type"] = source_type
        opts["source.config"] = json.dumps(dict(source_config or {}))
    else:
        assert factory is not None
        opts["source.factory"] = factory
        opts["source.args"] = json.dumps(dict(factory_args or {}))
    if starting_position is not None:
        opts["startingPosition"] = starting_position
    return opts


def build_source(options: Mapping[str, str]) -> Any:
    """The Laredo source described by stream options (see :func:`stream_options`)."""
    if "source.factory" in options:
        ref = options["source.factory"]
        mod_name, _, attr = ref.partition(":")
        if not mod_name or not attr:
            raise ConfigError(f"laredo stream: source.factory {ref!r}: use 'module:function'")
        fn = getattr(importlib.import_module(mod_name), attr)
        return fn(**json.loads(options.get("source.args") or "{}"))
    if "source.type" in options:
        import laredo

        return laredo.source(options["source.type"], **json.loads(options["source.config"]))
    raise ConfigError(
        "laredo stream: set the source.type (+ source.config) or source.factory option"
    )


def _tables(options: Mapping[str, str]) -> list[TableIdentifier]:
    text = options.get("tables") or ""
    tables = [TableIdentifier.parse(t.strip()) for t in text.split(",") if t.strip()]
    if not tables:
        raise ConfigError("laredo stream: the 'tables' option names no table ('schema.table,...')")
    return tables


def _encode_row(row: Row | None) -> str | None:
    if row is None:
        return None
    return str(_dumps({k: encode_value(v) for k, v in row.items()}))


@dataclass(frozen=True)
class EventsPartition(InputPartition):
    """Changes shipped to an executor, already encoded as output tuples."""

    rows: tuple[tuple[Any, ...], ...]


class _Handler:
    def __init__(self, reader: LaredoStreamReader) -> None:
        self.reader = reader

    def on_changes(self, events: Sequence[Any]) -> None:
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
        from laredo.serialization import encode_columns

        ev = (
            position,
            str(table),
            "SCHEMA_CHANGE",
            0,
            _dumps({"columns": encode_columns(list(new_columns))}),
            _dumps({"columns": encode_columns(list(old_columns))}),
            "[]",
        )
        self.reader._add_raw([ev])


class LaredoStreamReader(DataSourceStreamReader):
    """See the module docstring. One instance per query run, in Spark's stream-reader process."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        self.tables = _tables(self.options)
        self.complete_after = float(self.options.get("completeAfter", "1.0"))
        self.replay_timeout = float(self.options.get("replayTimeout", "120"))
        self.per_partition = max(1, int(self.options.get("eventsPerPartition", "50000")))
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
        src.init(SourceConfig(list(self.tables)))
        problems = [str(p) for p in src.validate_tables(self.tables)]
        if problems:
            raise ConfigError([f"laredo stream: {p}" for p in problems])
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
        self._thread.start()

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
        raw = []
        for ev in events:
            action = ev.action
            raw.append(
                (
                    ev.position,
                    str(ev.table),
                    action.name if isinstance(action, ChangeAction) else str(action),
                    int(ev.xid or 0),
                    _encode_row(ev.new_values),
                    _encode_row(ev.old_values),
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
        start = self.options.get("startingPosition")
        if start is None:
            src = self._src()
            with contextlib.suppress(Exception):
                if src.supports_resume():
                    last = src.last_acked_position()
                    if last is not None:
                        return self._offset(last)
            return {"position": None}
        self._src().position_from_string(start)  # validate now
        return {"position": start}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        begin = self._parse(start)
        self._ensure_started(begin)
        max_rows = getattr(limit, "max_rows", None)
        with self._cond:
            self._check()
            end = self._complete()
            if end is None or self._cmp(end, begin) <= 0:
                return dict(start)
            if isinstance(max_rows, int) and max_rows > 0:
                end = self._cap(begin, end, max_rows)
            return self._offset(end)

    def _cap(self, begin: Any, end: Any, max_rows: int) -> Any:
        n = 0
        last = None
        for ev in self._events:
            pos = ev[0]
            if self._cmp(pos, begin) <= 0:
                continue
            if self._cmp(pos, end) > 0:
                break
            if n >= max_rows and last is not None and self._cmp(pos, last) > 0:
                return last
            n += 1
            last = pos
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[EventsPartition]:
        begin, stop = self._parse(start), self._parse(end)
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
            for ev in self._events:
                pos = ev[0]
                if begin is not None and self._cmp(pos, begin) <= 0:
                    continue
                if stop is not None and self._cmp(pos, stop) > 0:
                    break
                rows.append((src.position_to_string(pos), len(rows), *ev[1:]))
        chunks = [
            EventsPartition(tuple(rows[i : i + self.per_partition]))
            for i in range(0, len(rows), self.per_partition)
        ]
        return chunks or [EventsPartition(())]

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

    def schema(self) -> str:
        return CHANGE_SCHEMA

    def streamReader(self, schema: Any) -> LaredoStreamReader:
        return LaredoStreamReader(self.options)


# -- sinks -------------------------------------------------------------------------------------


def decode_change_rows(rows: Sequence[Any]) -> list[ChangeEvent]:
    """Spark rows of the change schema as change events, in stream order (sorted by ``seq``);
    positions stay in their serialised (string) form."""
    out = []
    for r in sorted(rows, key=lambda r: r["seq"]):
        out.append(
            ChangeEvent(
                table=TableIdentifier.parse(r["table"]),
                action=ChangeAction[r["action"]],
                position=r["position"],
                timestamp=None,
                new_values=_loads(r["new_values"]) if r["new_values"] is not None else None,
                old_values=_loads(r["old_values"]) if r["old_values"] is not None else None,
                unchanged_toast=frozenset(json.loads(r["unchanged_toast"] or "[]")),
            )
        )
    return out


def _short_error(where: str, exc: BaseException) -> RuntimeError:
    # a long Py4J message can crash Spark's stream thread (StackOverflowError): keep it short
    return RuntimeError(f"{where}: {type(exc).__name__}: {str(exc)[:300]}")


class _BatchLog:
    """The last micro-batch id a sink finished, optionally persisted in a small JSON file."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.batch_id = -1
        if self.path and os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                self.batch_id = int(json.load(f)["batch_id"])

    def done(self, batch_id: int) -> None:
        self.batch_id = batch_id
        if self.path:
            tmp = f"{self.path}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"batch_id": batch_id}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)


class TargetSink:
    """``foreachBatch`` sink applying each micro-batch to Laredo targets, in stream order.

    ``pipelines`` are :class:`laredo.Pipeline` objects (their filters and transforms apply
    with the engine's rules: an update that leaves the filter becomes a delete); ``columns``
    maps each table to its columns for ``on_init``. A micro-batch id at or below the last one
    finished is skipped (a replay after a restart); ``state_path`` persists that id next to
    the checkpoint so durable targets stay exactly-once across processes. Targets that buffer
    are flushed at the end of each batch.
    """

    def __init__(
        self,
        pipelines: Sequence[Any],
        columns: Mapping[TableIdentifier, Sequence[ColumnDefinition]],
        state_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.pipelines: list[tuple[Chain, Any]] = []
        for p in pipelines:
            t = p.table if isinstance(p.table, TableIdentifier) else TableIdentifier.parse(p.table)
            chain = Chain(
                t,
                tuple(as_filter(f) for f in p.filters),
                tuple(as_transform(x) for x in p.transforms),
            )
            self.pipelines.append((chain, p.target))
        self.columns = {k: list(v) for k, v in columns.items()}
        self.log = _BatchLog(state_path)
        self._inited = False
        self.batches_applied = 0
        self.batches_skipped = 0

    def _init(self) -> None:
        for chain, target in self.pipelines:
            target.on_init(chain.table, self.columns.get(chain.table, []))
            target.on_baseline_complete(chain.table)
        self._inited = True

    def __call__(self, df: Any, batch_id: int) -> None:
        try:
            self.apply(df.collect(), batch_id)
        except Exception as exc:
            raise _short_error(f"laredo target sink, batch {batch_id}", exc) from None

    def apply(self, rows: Sequence[Any], batch_id: int) -> None:
        if batch_id <= self.log.batch_id:
            self.batches_skipped += 1
            logger.info("target sink: batch %d already applied, skipping the replay", batch_id)
            return
        if not self._inited:
            self._init()
        changes = decode_change_rows(rows)
        for chain, target in self.pipelines:
            table = chain.table
            positioned = isinstance(target, PositionedTarget)
            mine = [ch for ch in changes if ch.table == table]
            for ev in chain.prepare(mine).events:
                apply_change(target, table, ev, positioned=positioned)
            if isinstance(target, FlushableTarget):
                target.flush()
        self.log.done(batch_id)
        self.batches_applied += 1


class SnapshotSink:
    """``foreachBatch`` sink keeping each table's current rows and saving a Laredo snapshot
    after every micro-batch (id ``<prefix>-<batch id>``), tagged with the batch's last
    position for ``source_id``. The local engine restores such a snapshot and streams on from
    there. On the first batch it reloads its state from the newest snapshot it wrote; batches
    at or below that snapshot's batch id are replays and are skipped: exactly-once. Without
    one of its own yet it starts from ``seed_snapshot`` (e.g. a :func:`spark_baseline` result,
    then stream with ``starting_position`` = that snapshot's position).
    """

    def __init__(
        self,
        store: Any,
        columns: Mapping[TableIdentifier, Sequence[ColumnDefinition]],
        *,
        source_id: str,
        serializer: Any = None,
        prefix: str = "spark-stream",
        keep: int | None = 3,
        pipelines: Sequence[Any] = (),
        seed_snapshot: str | None = None,
    ) -> None:
        if serializer is None:
            from laredo.snapshots.jsonl import JsonlSerializer

            serializer = JsonlSerializer()
        self.store = store
        self.serializer = serializer
        self.source_id = source_id
        self.prefix = prefix
        self.keep = keep
        self.columns = {k: list(v) for k, v in columns.items()}
        self.keys = {t: primary_key_columns(c) or [c[0].name] for t, c in self.columns.items()}
        self.chains: dict[TableIdentifier, Chain] = {}
        for p in pipelines:
            t = p.table if isinstance(p.table, TableIdentifier) else TableIdentifier.parse(p.table)
            self.chains[t] = Chain(
                t,
                tuple(as_filter(f) for f in p.filters),
                tuple(as_transform(x) for x in p.transforms),
            )
        self.state: dict[TableIdentifier, dict[Any, Row]] = {t: {} for t in self.columns}
        self.position: str | None = None
        self.batch_id = -1
        self.seed_snapshot = seed_snapshot
        self._loaded = False

    def _load(self) -> None:
        self._loaded = True
        for desc in self.store.list():
            if desc.user_meta.get("sink") != self.prefix:
                continue
            meta, data = self.store.load(desc.snapshot_id, self.serializer)
            for info in meta.tables:
                rows = self.state.setdefault(info.table, {})
                for r in data[info.table]:
                    rows[self._key(info.table, r)] = r
            self.position = meta.source_positions.get(self.source_id)
            self.batch_id = int(meta.user_meta.get("batch_id", -1))
            logger.info(
                "snapshot sink: resumed from %s (batch %d)", desc.snapshot_id, self.batch_id
            )
            return
        if self.seed_snapshot is not None:
            meta, data = self.store.load(self.seed_snapshot, self.serializer)
            for info in meta.tables:
                if info.table not in self.state:
                    continue  # e.g. a second pipeline's copy of a table ("table~1")
                rows = self.state[info.table]
                for r in data[info.table]:
                    rows[self._key(info.table, r)] = r
            self.position = meta.source_positions.get(self.source_id)
            logger.info("snapshot sink: seeded from %s at %s", self.seed_snapshot, self.position)

    def _key(self, table: TableIdentifier, row: Row) -> Any:
        return tuple(row.get(k) for k in self.keys.get(table, ()))

    def __call__(self, df: Any, batch_id: int) -> None:
        try:
            self.apply(df.collect(), batch_id)
        except Exception as exc:
            raise _short_error(f"laredo snapshot sink, batch {batch_id}", exc) from None

    def apply(self, rows: Sequence[Any], batch_id: int) -> None:
        if not self._loaded:
            self._load()
        if batch_id <= self.batch_id:
            logger.info("snapshot sink: batch %d already saved, skipping the replay", batch_id)
            return
        for ch in decode_change_rows(rows):
            state = self.state.get(ch.table)
            if state is None:
                continue
            chain = self.chains.get(ch.table) or Chain(ch.table)
            for ev in chain.prepare((ch,)).events:
                self._apply(ev, state)
            self.position = ch.position
        self._save(batch_id)

    def _apply(self, ev: ChangeEvent, state: dict[Any, Row]) -> None:
        """Apply one prepared change to a table's rows (keyed like the target would)."""
        t = ev.table
        action = ev.action
        if action is ChangeAction.INSERT or action is ChangeAction.UPDATE:
            new = ev.new_values or {}
            if action is ChangeAction.UPDATE and ev.old_values:
                state.pop(self._key(t, ev.old_values), None)
            k = self._key(t, new)
            if ev.unchanged_toast and k in state:
                new = {**{c: state[k].get(c) for c in ev.unchanged_toast}, **new}
            state[k] = new
        elif action is ChangeAction.DELETE:
            state.pop(self._key(t, ev.old_values or {}), None)
        elif action is ChangeAction.TRUNCATE:
            state.clear()

    def _save(self, batch_id: int) -> None:
        from datetime import UTC, datetime

        snap_id = f"{self.prefix}-{batch_id:012d}"
        infos = tuple(
            TableSnapshotInfo(
                table=t,
                row_count=len(rows),
                columns=tuple(self.columns.get(t, ())),
                position=self.position,
            )
            for t, rows in self.state.items()
        )
        meta = SnapshotMetadata(
            snapshot_id=snap_id,
            created_at=datetime.now(UTC),
            source_positions={self.source_id: self.position} if self.position else {},
            tables=infos,
            format=self.serializer.format_id(),
            user_meta={"sink": self.prefix, "batch_id": batch_id, "runner": "spark"},
        )
        try:
            self.store.save(
                snap_id, meta, {t: list(r.values()) for t, r in self.state.items()}, self.serializer
            )
        except SnapshotError as exc:
            if "already exists" not in str(exc):
                raise
        self.batch_id = batch_id
        if self.keep:  # only this sink's snapshots; others in the store are left alone
            with contextlib.suppress(Exception):
                own = [d for d in self.store.list() if d.user_meta.get("sink") == self.prefix]
                for d in own[self.keep :]:
                    self.store.delete(d.snapshot_id)
