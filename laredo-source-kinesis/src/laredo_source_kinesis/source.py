"""``KinesisSource``: baseline from S3 objects, then changes from a Kinesis stream.

Guarantees
----------
- **Order**: ``PER_PARTITION_ORDER``. Records of one shard are delivered in shard order; shards
  are read concurrently (one reader thread per open shard), and a child shard is read only
  after all its parents are drained (resharding keeps per-key order).
- **Positions** (:class:`~laredo_source_kinesis.position.KinesisPosition`) are cumulative: each
  event carries the sequence of every shard delivered so far, its own shard's moved to the
  event's record. Deliveries are serialised, so successive positions are totally ordered and
  ``compare_positions`` compares them shard by shard.
- **Acknowledgement and resume**: with a ``checkpoint_table``, ``ack(position)`` writes each
  shard whose sequence moved forward to DynamoDB (``supports_resume()`` is true). A restart
  resumes each shard right AFTER its last acknowledged record (``AFTER_SEQUENCE_NUMBER``),
  never at it; a shard with no checkpoint starts at ``TRIM_HORIZON`` (or ``LATEST`` with
  ``start_at_latest``). Without checkpointing, every start runs the baseline again.
- **Failures**: throttling and transient errors are retried with exponential backoff (100 ms
  doubling to 5 s, ``max_retries`` times); an expired shard iterator is renewed after the last
  delivered record. An error that outlives the retries stops every shard reader and surfaces
  from ``stream()`` as a ``SourceError`` (the engine marks the source failed); it never hangs.
- **Bad records** (see :mod:`laredo_source_kinesis.records`) go to the ``dead_letter_store``
  given to the source (pipeline id ``dead_letter_pipeline``, default ``kinesis:<stream>``) with
  the reason, or are logged; ``stats()["bad_records"]`` counts them. The stream continues.

The baseline is described in :mod:`laredo_source_kinesis.baseline`.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from laredo.contracts import ChangeHandler, DeadLetterStore, RowCallback
from laredo.errors import (
    ConfigError,
    MissingDependencyError,
    SourceError,
    TransientError,
    aws_error_code,
)
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    ErrorInfo,
    LagInfo,
    OrderingGuarantee,
    Row,
    SourceConfig,
    SourceState,
    TableIdentifier,
    TableProblem,
)

from .baseline import BaselineObject, Manifest, S3Baseline, key_columns
from .checkpoints import DynamoCheckpoints
from .position import KinesisPosition, compare_positions
from .records import BadRecord, ParsedChange, parse_record

logger = logging.getLogger(__name__)

RETRYABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "LimitExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "KMSThrottlingException",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "SlowDown",
        "RequestTimeout",
    }
)


def _is_transient(exc: BaseException) -> bool:
    if aws_error_code(exc) in RETRYABLE_CODES:
        return True
    try:
        from botocore.exceptions import (  # noqa: PLC0415 - lazy: botocore only once errors occur
            ConnectionClosedError,
            EndpointConnectionError,
            ReadTimeoutError,
        )
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, EndpointConnectionError | ConnectionClosedError | ReadTimeoutError)


_SESSIONS: dict[str | None, Any] = {}
_SESSION_LOCK = threading.Lock()


class _Stopped(Exception):
    pass


@dataclass
class _Shard:
    shard_id: str
    parents: tuple[str, ...]
    ending: str | None
    status: str = "waiting"  # waiting | reading | done
    lag_ms: int = 0


class KinesisSource:
    """Baseline from S3 + change stream from Kinesis (see the module docstring).

    ``laredo.source("kinesis", stream_name=..., baseline_bucket=..., baseline_prefix=...,
    checkpoint_table=..., region=...)``; boto3 clients may be injected (``s3_client``,
    ``kinesis_client``, ``dynamodb_client``), else they are built from ``region``/
    ``endpoint_url`` and the AWS credential chain.
    """

    def __init__(
        self,
        stream_name: str,
        baseline_bucket: str,
        baseline_prefix: str = "",
        *,
        manifest_key: str | None = None,
        checkpoint_table: str | None = None,
        checkpoint_id: str | None = None,
        create_checkpoint_table: bool = False,
        region: str | None = None,
        endpoint_url: str | None = None,
        profile: str | None = None,
        start_at_latest: bool = False,
        unknown_tables: str = "dead_letter",
        dead_letter_store: DeadLetterStore | None = None,
        dead_letter_pipeline: str | None = None,
        batch_size: int = 1000,
        poll_interval: float = 1.0,
        min_fetch_interval: float = 0.2,
        shard_refresh_interval: float = 10.0,
        heartbeat_interval: float = 1.0,
        max_retries: int = 10,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        s3_client: Any = None,
        kinesis_client: Any = None,
        dynamodb_client: Any = None,
    ) -> None:
        problems = []
        if not stream_name:
            problems.append("kinesis source: 'stream_name' is required")
        if not baseline_bucket:
            problems.append("kinesis source: 'baseline_bucket' is required (S3 baseline bucket)")
        if unknown_tables not in ("dead_letter", "ignore"):
            problems.append(
                f"kinesis source: unknown_tables must be 'dead_letter' or 'ignore' "
                f"(got {unknown_tables!r})"
            )
        if not 1 <= batch_size <= 10000:
            problems.append(f"kinesis source: batch_size must be 1..10000 (got {batch_size})")
        if create_checkpoint_table and not checkpoint_table:
            problems.append("kinesis source: create_checkpoint_table needs checkpoint_table")
        if problems:
            raise ConfigError(problems)
        prefix = baseline_prefix.lstrip("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        self.stream_name = stream_name
        self.bucket = baseline_bucket
        self.prefix = prefix
        self.manifest_key = manifest_key
        self.checkpoint_table = checkpoint_table
        self.checkpoint_id = checkpoint_id or stream_name
        self.create_checkpoint_table = create_checkpoint_table
        self.start_at_latest = start_at_latest
        self.unknown_tables = unknown_tables
        self.dead_letter_store = dead_letter_store
        self.dead_letter_pipeline = dead_letter_pipeline or f"kinesis:{stream_name}"
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.min_fetch_interval = min_fetch_interval
        self.shard_refresh_interval = shard_refresh_interval
        self.heartbeat_interval = heartbeat_interval
        self.max_retries = max_retries
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._client_args = {"region": region, "endpoint_url": endpoint_url, "profile": profile}
        self._s3 = s3_client
        self._kinesis = kinesis_client
        self._ddb = dynamodb_client

        self._state = SourceState.CLOSED
        self._state_lock = threading.Lock()
        self._tables: list[TableIdentifier] = []
        self._manifest: Manifest | None = None
        self._keys: dict[TableIdentifier, list[str]] = {}
        self._baseline_reader: S3Baseline | None = None
        self._checkpoints: DynamoCheckpoints | None = None
        self._stop = threading.Event()
        self._resume_event = threading.Event()
        self._resume_event.set()
        self._dispatch = threading.Lock()
        self._frontier: dict[str, str] = {}
        self._position = KinesisPosition()
        self._moved = False
        self._shards: dict[str, _Shard] = {}
        self._wake = threading.Condition()
        self._errors: list[BaseException] = []
        self._parked = 0
        self._stats = {
            "records": 0,
            "events": 0,
            "bad_records": 0,
            "skipped": 0,
            "retries": 0,
            "expired_iterators": 0,
        }

    # -- clients ----------------------------------------------------------------------------

    def bind_dead_letter_store(self, store: DeadLetterStore) -> None:
        """Engine hook: use the engine's dead-letter store unless one was given to the source."""
        if self.dead_letter_store is None:
            self.dead_letter_store = store

    def _client(self, service: str) -> Any:
        try:
            import boto3  # noqa: PLC0415 - lazy: boto3 costs ~0.5 s to import; first use only
            from botocore.config import Config  # noqa: PLC0415 - lazy: as boto3
        except ImportError as exc:
            raise MissingDependencyError("boto3", "the Kinesis source") from exc
        profile = self._client_args["profile"]
        config = Config(
            retries={"mode": "standard", "max_attempts": 3},
            connect_timeout=10,
            read_timeout=30,
            max_pool_connections=50,
        )
        with _SESSION_LOCK:  # one session per profile: service models load once per process
            session = _SESSIONS.get(profile)
            if session is None:
                session = _SESSIONS[profile] = boto3.session.Session(profile_name=profile)
            return session.client(
                service,
                region_name=self._client_args["region"],
                endpoint_url=self._client_args["endpoint_url"],
                config=config,
            )

    def _ensure_clients(self) -> None:
        if self._s3 is None:
            self._s3 = self._client("s3")
        if self._kinesis is None:
            self._kinesis = self._client("kinesis")
        if self.checkpoint_table and self._ddb is None:
            self._ddb = self._client("dynamodb")

    # -- SyncSource: setup ------------------------------------------------------------------
    def init(self, config: SourceConfig) -> dict[TableIdentifier, list[ColumnDefinition]]:
        self._set_state(SourceState.CONNECTING)
        self._stop.clear()
        self._ensure_clients()
        self._tables = list(config.tables)
        self._baseline_reader = S3Baseline(self._s3, self.bucket, self.prefix, self.manifest_key)
        self._manifest = self._baseline_reader.read_manifest(required=self.manifest_key is not None)
        columns = dict(self._manifest.columns) if self._manifest else {}
        self._keys = key_columns(columns)
        if self.checkpoint_table:
            self._checkpoints = DynamoCheckpoints(
                self._ddb, self.checkpoint_table, self.checkpoint_id
            )
            self._checkpoints.ensure_table(self.create_checkpoint_table)
        self._set_state(SourceState.CONNECTED)
        return {t: list(columns.get(t, [])) for t in self._tables}

    def validate_tables(self, tables: Sequence[TableIdentifier]) -> list[TableProblem]:
        errors: list[TableProblem] = []
        try:
            self._call(self._kinesis.describe_stream_summary, StreamName=self.stream_name)
        except Exception as exc:
            errors.append(
                TableProblem(
                    None,
                    "STREAM_NOT_FOUND",
                    f"Kinesis stream {self.stream_name!r} is not reachable: {exc}",
                )
            )
        assert self._baseline_reader is not None, "init() first"
        for table in tables:
            if self._manifest is not None and table not in self._manifest.columns:
                errors.append(
                    TableProblem(
                        table,
                        "TABLE_NOT_FOUND",
                        f"{table} is not in the baseline manifest; add it under 'tables'",
                    )
                )
                continue
            if not self._baseline_reader.objects(table):
                errors.append(
                    TableProblem(
                        table,
                        "NO_BASELINE",
                        f"no baseline object for {table}: expected "
                        f"{self._baseline_reader.expected_location(table)} (or .jsonl.gz, "
                        f".parquet, or parts under {table}/); upload an empty file for an "
                        f"empty table",
                    )
                )
        return errors

    # -- baseline ---------------------------------------------------------------------------
    def baseline_batches(
        self,
        tables: Sequence[TableIdentifier],
        batch_callback: Callable[[TableIdentifier, list[Row]], None],
    ) -> KinesisPosition:
        """Read every table's baseline objects; returns the position the stream starts from
        (no shard read yet, the baseline marker and the manifest's ``source_sequence``)."""
        reader = self._baseline_reader
        assert reader is not None, "init() first"
        listed: dict[TableIdentifier, list[BaselineObject]] = {t: reader.objects(t) for t in tables}
        for table, objects in listed.items():
            for obj in objects:
                for rows in reader.read_rows(obj, self.batch_size):
                    batch_callback(table, rows)
        marker = S3Baseline.marker(listed, self._manifest)
        seq = self._manifest.source_sequence if self._manifest else None
        return KinesisPosition({}, marker, seq)

    def baseline(
        self, tables: Sequence[TableIdentifier], row_callback: RowCallback
    ) -> KinesisPosition:
        def each(table: TableIdentifier, rows: list[Row]) -> None:
            for row in rows:
                row_callback(table, row)

        return self.baseline_batches(tables, each)

    # -- positions --------------------------------------------------------------------------
    @staticmethod
    def _pos(p: Any) -> KinesisPosition:
        if isinstance(p, KinesisPosition):
            return p
        if isinstance(p, str):
            return KinesisPosition.parse(p)
        raise TypeError(f"not a Kinesis position: {p!r}")

    def compare_positions(self, a: Any, b: Any) -> int:
        return compare_positions(self._pos(a), self._pos(b))

    def position_to_string(self, position: Any) -> str:
        return self._pos(position).to_string()

    def position_from_string(self, text: str) -> KinesisPosition:
        return KinesisPosition.parse(text)

    def supports_resume(self) -> bool:
        return self.checkpoint_table is not None

    def last_acked_position(self) -> KinesisPosition | None:
        if self._checkpoints is None:
            if not self.checkpoint_table:
                return None
            self._ensure_clients()
            self._checkpoints = DynamoCheckpoints(
                self._ddb, self.checkpoint_table, self.checkpoint_id
            )
        return self._checkpoints.load()

    def ack(self, position: Any) -> None:
        """Persist ``position``: every shard whose sequence moved forward (one item each)."""
        if self._checkpoints is None:
            return
        pos = self._pos(position)
        checkpoints = self._checkpoints
        # Not interruptible: the engine's final ack comes after stop_stream().
        self._retry(lambda: checkpoints.save(pos), "DynamoDB checkpoint", interruptible=False)

    def reset_source(self, drop_publication: bool = False) -> None:
        """Forget the checkpoints: the next start runs the baseline again."""
        if self._checkpoints is None and self.checkpoint_table:
            self._ensure_clients()
            self._checkpoints = DynamoCheckpoints(
                self._ddb, self.checkpoint_table, self.checkpoint_id
            )
        if self._checkpoints is not None:
            self._checkpoints.clear()

    def ordering_guarantee(self) -> OrderingGuarantee:
        return OrderingGuarantee.PER_PARTITION_ORDER

    # -- state ------------------------------------------------------------------------------
    def _set_state(self, state: SourceState) -> None:
        with self._state_lock:
            self._state = state

    def state(self) -> SourceState:
        with self._state_lock:
            return self._state

    def pause(self) -> None:
        """Stop fetching records (shard readers wait); ``resume`` continues where they were."""
        self._resume_event.clear()
        self._set_state(SourceState.PAUSED)

    def resume(self) -> None:
        self._resume_event.set()
        self._set_state(SourceState.STREAMING)

    def get_lag(self) -> LagInfo:
        lag = max(
            (s.lag_ms for s in list(self._shards.values()) if s.status == "reading"), default=0
        )
        return LagInfo(lag_bytes=0, lag_time=dt.timedelta(milliseconds=lag))

    def stats(self) -> dict[str, int]:
        """Counters: records read, events delivered, bad records, skipped records, retries,
        expired iterators; ``paused_readers`` is how many shard readers wait on ``resume``."""
        return {**self._stats, "paused_readers": self._parked}

    def stop_stream(self) -> None:
        self._stop.set()
        self._resume_event.set()
        with self._wake:
            self._wake.notify_all()

    def close(self) -> None:
        self.stop_stream()
        self._set_state(SourceState.CLOSED)

    # -- AWS calls with retry ---------------------------------------------------------------
    def _retry(self, fn: Callable[[], Any], what: str, interruptible: bool = True) -> Any:
        """Call ``fn``, retrying transient errors with jittered exponential backoff. With
        ``interruptible``, ``stop_stream`` cuts the backoff short (raises ``_Stopped``)."""
        delay = self.backoff_initial
        for attempt in range(self.max_retries + 1):
            try:
                return fn()
            except Exception as exc:
                if not _is_transient(exc) or attempt >= self.max_retries:
                    if _is_transient(exc):
                        raise TransientError(
                            f"{what}: still failing after {self.max_retries} retries: {exc}"
                        ) from exc
                    raise
                self._stats["retries"] += 1
                logger.info("%s: %s; retrying in %.2fs", what, aws_error_code(exc) or exc, delay)
                pause = delay * (0.5 + random.random() / 2)
                if not interruptible:
                    time.sleep(pause)
                elif self._stop.wait(pause):
                    raise _Stopped() from exc
                delay = min(delay * 2, self.backoff_max)
        raise AssertionError("unreachable")  # pragma: no cover

    def _call(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        name = getattr(fn, "__name__", "call")
        return self._retry(lambda: fn(**kwargs), f"kinesis {name} ({self.stream_name})")

    # -- stream -----------------------------------------------------------------------------
    def stream(self, from_position: Any, handler: ChangeHandler) -> None:
        """Read every shard concurrently and deliver changes until ``stop_stream``/``close``.

        Raises ``SourceError`` when a shard fails beyond its retries.
        """
        start = self._pos(from_position) if from_position is not None else KinesisPosition()
        # _stop is cleared by init(), not here: a stop_stream() that races ahead of stream()
        # (engine stopping during start-up) still makes this call return at once.
        self._errors = []
        with self._dispatch:
            self._frontier = dict(start.shards)
            self._position = start
            self._moved = False
        self._shards = {}
        self._set_state(SourceState.STREAMING)
        threads: list[threading.Thread] = []
        next_refresh = 0.0
        next_heartbeat = time.monotonic() + self.heartbeat_interval
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_refresh:
                    self._refresh_shards(start)
                    next_refresh = now + self.shard_refresh_interval
                for shard in self._startable():
                    shard.status = "reading"
                    t = threading.Thread(
                        target=self._read_shard,
                        args=(shard, handler),
                        name=f"laredo-kinesis-{shard.shard_id}",
                        daemon=True,
                    )
                    threads.append(t)
                    t.start()
                if self._errors:
                    break
                if now >= next_heartbeat:
                    self._heartbeat(handler)
                    next_heartbeat = now + self.heartbeat_interval
                with self._wake:
                    if not self._errors and not self._stop.is_set() and not self._startable():
                        self._wake.wait(
                            max(0.0, min(next_refresh, next_heartbeat) - time.monotonic())
                        )
        except _Stopped:
            pass
        except Exception as exc:  # listing shards failed beyond retries
            self._errors.append(exc)
        finally:
            self._stop.set()
            self._resume_event.set()
            for t in threads:
                t.join(timeout=30)
            if self.state() is not SourceState.CLOSED:
                self._set_state(SourceState.CONNECTED)
        if self._errors:
            self._set_state(SourceState.ERROR)
            first = self._errors[0]
            raise SourceError(f"Kinesis stream {self.stream_name}: {first}") from first
        # A clean stop: one last heartbeat carries the final position to every table's
        # pipeline, so the engine's final ACK covers everything delivered (a table that had
        # no recent change would otherwise hold the ACK back to its older position).
        self._heartbeat(handler)

    def _heartbeat(self, handler: ChangeHandler) -> None:
        with self._dispatch:
            if not self._moved:
                return
            self._moved = False
            handler.on_heartbeat(self._position)

    def _refresh_shards(self, start: KinesisPosition) -> None:
        shards: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"StreamName": self.stream_name}
        while True:
            resp = self._call(self._kinesis.list_shards, **kwargs)
            shards.extend(resp.get("Shards", []))
            token = resp.get("NextToken")
            if not token:
                break
            kwargs = {"NextToken": token}
        with self._wake:
            listed = {s["ShardId"]: s for s in shards}
            for sid, s in listed.items():
                parents = tuple(
                    p for p in (s.get("ParentShardId"), s.get("AdjacentParentShardId")) if p
                )
                ending = s.get("SequenceNumberRange", {}).get("EndingSequenceNumber")
                known = self._shards.get(sid)
                if known is None:
                    self._shards[sid] = _Shard(sid, parents, ending)
                else:
                    known.ending = ending
            # Ancestors of a shard that already has a position were drained before (resume).
            todo = [sid for sid in start.shards if sid in self._shards]
            seen: set[str] = set()
            while todo:
                for parent in self._shards[todo.pop()].parents:
                    if parent in seen or parent not in self._shards:
                        continue
                    seen.add(parent)
                    todo.append(parent)
                    if parent not in start.shards and self._shards[parent].status == "waiting":
                        self._shards[parent].status = "done"
            self._wake.notify_all()

    def _startable(self) -> list[_Shard]:
        out = []
        for shard in self._shards.values():
            if shard.status != "waiting":
                continue
            if all(
                p not in self._shards or self._shards[p].status == "done" for p in shard.parents
            ):
                out.append(shard)
        return out

    def _iterator(self, shard_id: str, after: str | None) -> str:
        if after is not None:
            kwargs = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": after}
        elif self.start_at_latest:
            kwargs = {"ShardIteratorType": "LATEST"}
        else:
            kwargs = {"ShardIteratorType": "TRIM_HORIZON"}
        resp = self._call(
            self._kinesis.get_shard_iterator,
            StreamName=self.stream_name,
            ShardId=shard_id,
            **kwargs,
        )
        return str(resp["ShardIterator"])

    def _read_shard(self, shard: _Shard, handler: ChangeHandler) -> None:
        sid = shard.shard_id
        try:
            with self._dispatch:
                last = self._frontier.get(sid)
            iterator: str | None = self._iterator(sid, last)
            while not self._stop.is_set():
                if not self._resume_event.is_set():
                    with self._wake:
                        self._parked += 1
                    try:
                        self._resume_event.wait()
                    finally:
                        with self._wake:
                            self._parked -= 1
                    continue
                began = time.monotonic()
                try:
                    resp = self._call(
                        self._kinesis.get_records, ShardIterator=iterator, Limit=self.batch_size
                    )
                except Exception as exc:
                    if aws_error_code(exc) != "ExpiredIteratorException":
                        raise
                    self._stats["expired_iterators"] += 1
                    logger.info("shard %s: iterator expired; renewing after %s", sid, last)
                    iterator = self._iterator(sid, last)
                    continue
                records = resp.get("Records", [])
                shard.lag_ms = int(resp.get("MillisBehindLatest", 0) or 0)
                if records:
                    last = self._deliver(sid, records, handler)
                iterator = resp.get("NextShardIterator")
                if iterator is None:
                    break  # AWS: the closed shard is drained
                if not records:
                    ending = shard.ending
                    if ending is not None and int(last or 0) >= int(ending):
                        break  # closed and read up to its end (moto never ends the iterator)
                    if self._stop.wait(self.poll_interval):
                        break
                else:
                    pause = self.min_fetch_interval - (time.monotonic() - began)
                    if pause > 0 and self._stop.wait(pause):
                        break
            else:
                return
            if not self._stop.is_set():
                logger.info("shard %s of %s drained (closed)", sid, self.stream_name)
                with self._wake:
                    shard.status = "done"
                    self._wake.notify_all()
        except _Stopped:
            return
        except BaseException as exc:
            if self._stop.is_set():
                return
            logger.error("shard %s of %s failed: %s", sid, self.stream_name, exc)
            with self._wake:
                self._errors.append(exc)
                self._stop.set()
                self._wake.notify_all()

    def _deliver(self, sid: str, records: list[dict[str, Any]], handler: ChangeHandler) -> str:
        """Turn one GetRecords batch into events and hand them over (serialised).

        Bad records are reported (dead letter) before any later record is delivered, so an
        acknowledgement never passes a bad record that was not reported."""
        with self._dispatch:
            events: list[ChangeEvent] = []
            baseline_seq = self._position.baseline_sequence
            tables = set(self._tables)
            for rec in records:
                seq = str(rec["SequenceNumber"])
                self._frontier[sid] = seq
                position = KinesisPosition(self._frontier, self._position.baseline, baseline_seq)
                self._position = position
                self._moved = True
                self._stats["records"] += 1
                try:
                    changes = parse_record(rec["Data"], self._keys)
                    selected = self._select(changes, tables)
                except BadRecord as exc:
                    self._bad_record(sid, rec, exc, position)
                    continue
                arrival = rec.get("ApproximateArrivalTimestamp")
                for ch in selected:
                    if baseline_seq is not None and ch.seq is not None and ch.seq <= baseline_seq:
                        self._stats["skipped"] += 1
                        continue
                    events.append(
                        ChangeEvent(
                            table=ch.table,
                            action=ch.action,
                            position=position,
                            timestamp=ch.timestamp or arrival,
                            new_values=ch.new_values,
                            old_values=ch.old_values,
                            xid=ch.seq or 0,
                            commit_timestamp=ch.timestamp,
                        )
                    )
            if events:
                self._stats["events"] += len(events)
                handler.on_changes(events)
            if not events or events[-1].position is not self._position:
                handler.on_heartbeat(self._position)
            return self._frontier[sid]

    def _select(
        self, changes: list[ParsedChange], tables: set[TableIdentifier]
    ) -> list[ParsedChange]:
        out = []
        for ch in changes:
            if ch.table in tables:
                out.append(ch)
                continue
            known = self._manifest is not None and ch.table in self._manifest.columns
            if known or self.unknown_tables == "ignore":
                self._stats["skipped"] += 1
                continue
            configured = ", ".join(sorted(map(str, tables))) or "none"
            raise BadRecord(
                f"unknown table {str(ch.table)!r}: not configured on this source (configured: "
                f"{configured}) and not in the baseline manifest",
                ch.table,
            )
        return out

    def _bad_record(
        self, sid: str, rec: dict[str, Any], exc: BadRecord, position: KinesisPosition
    ) -> None:
        self._stats["bad_records"] += 1
        raw = rec.get("Data", b"")
        seq = str(rec.get("SequenceNumber"))
        reason = (
            f"bad Kinesis record (stream {self.stream_name}, shard {sid}, sequence {seq}): "
            f"{exc.reason}"
        )
        if self.dead_letter_store is None:
            logger.warning("%s; skipped", reason)
            return
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)

        event = ChangeEvent(
            table=exc.table or TableIdentifier("kinesis", self.stream_name),
            action=ChangeAction.INSERT,
            position=position,
            timestamp=rec.get("ApproximateArrivalTimestamp"),
            new_values={
                "data": text,
                "stream": self.stream_name,
                "shard_id": sid,
                "sequence_number": seq,
                "partition_key": rec.get("PartitionKey"),
            },
        )
        try:
            self.dead_letter_store.write(
                self.dead_letter_pipeline,
                event,
                ErrorInfo(reason, "BadRecord"),
                position=position.to_string(),
            )
        except Exception as dlq_exc:
            # never skip a record that was not reported: the shard stops here, before any
            # later record is delivered or acknowledged, and a restart reads it again
            raise SourceError(
                f"{reason}; writing it to the dead letters failed ({dlq_exc}); the source "
                "stops without acknowledging it"
            ) from dlq_exc
