"""``laredo.v1.LaredoQueryService``: reads from a table's queryable target (lookups by key or
index, key-ordered pages, counts) and ``Subscribe`` to its row changes.

Listings are in key order (:func:`~laredo_server.services.convert.sort_key`); a page token
is the last key of the previous page, so a listing survives concurrent writes (rows deleted
meanwhile are skipped, rows added after the token's key appear). The sorted key list is cached
per target until its ``version`` changes.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc
from laredo import Pipeline
from laredo.errors import EngineStateError
from laredo.types import ColumnDefinition, Row

from .._proto.laredo_proto.v1 import query_pb2 as qry
from .._proto.laredo_proto.v1 import query_pb2_grpc as qry_grpc
from ..capabilities import (
    KeyListingTarget,
    LazilyListenableTarget,
    ListenableTarget,
    LookupTarget,
    QueryableTarget,
    ReportsPosition,
    VersionedTarget,
)
from ..runtime import ServerRuntime
from ._rpc import RpcStatusError, long_call, rpc, stream
from .convert import (
    decode_json_value,
    decode_page_token,
    encode_page_token,
    ms,
    row_pb,
    sort_key,
    table_id,
)
from .keys import coerce_key, index_fields, key_fields

__all__ = ["MAX_PAGE", "QUERY_SERVICE", "SUBSCRIBE_BATCH", "QueryService"]

QUERY_SERVICE = "laredo.v1.LaredoQueryService"

MAX_PAGE = 10_000
SUBSCRIBE_BATCH = 1000
DEFAULT_WAIT = 30.0
MAX_WAIT = 300.0


class QueryService(qry_grpc.LaredoQueryServiceServicer):
    """The Query service of one runtime: reads from tables' queryable (in-memory) targets."""

    def __init__(self, rt: ServerRuntime) -> None:
        self.rt = rt
        self._keys: dict[int, tuple[int, list[tuple[Any, Any]]]] = {}

    def _target(self, ref: qry.TableRef) -> tuple[QueryableTarget, Pipeline]:
        """(target, pipeline config) of the first queryable target of the table."""
        table = table_id(ref.schema, ref.table)
        found = []
        for cfg in self.rt.engine.pipeline_configs:
            if cfg.table_id != table:
                continue
            if ref.pipeline_id and cfg.pipeline_id() != ref.pipeline_id:
                continue
            found.append(cfg)
            t = cfg.target
            if isinstance(t, QueryableTarget):
                return t, cfg
        if not found:
            raise KeyError(
                f"no pipeline for table {table}"
                + (f" with id {ref.pipeline_id!r}" if ref.pipeline_id else "")
            )
        raise EngineStateError(
            f"table {table} has no queryable target (use an indexed-memory target); "
            f"its targets: {', '.join(c.resolved_target_type() for c in found)}"
        )

    def _lookup_target(self, ref: qry.TableRef) -> tuple[LookupTarget, Pipeline]:
        target, cfg = self._target(ref)
        if not isinstance(target, LookupTarget):
            raise EngineStateError(
                f"the target of {cfg.table_id} has no lookup indexes (use an indexed-memory "
                "target with lookup_fields or indexes)"
            )
        return target, cfg

    def _columns(self, target: object, cfg: Pipeline) -> list[ColumnDefinition]:
        """The columns the target was initialised with, else the source's catalog."""
        cols = getattr(target, "columns", None)
        if isinstance(cols, tuple | list) and cols and isinstance(cols[0], ColumnDefinition):
            return list(cols)
        return self.rt.engine.table_schema(cfg.table_id, cfg.source_id)

    def _key(
        self, target: object, cfg: Pipeline, raw: Sequence[str], index_name: str | None
    ) -> tuple[list[Any], list[str]]:
        """The typed-JSON (or plain text) values of a request converted to the types of the
        key (``index_name`` None) or index fields, and those fields."""
        cols = self._columns(target, cfg)
        if index_name is None:
            fields = key_fields(target, cols)
        else:
            fields = index_fields(target, index_name, cols)
        values = [decode_json_value(v) for v in raw]
        return coerce_key(values, fields, cols, cfg.table_id), fields

    @rpc()
    def Lookup(
        self, request: qry.LookupRequest, context: grpc.ServicerContext
    ) -> qry.LookupResponse:
        target, cfg = self._lookup_target(request.table)
        values, fields = self._key(target, cfg, request.key_values, request.index_name)
        if request.index_name:
            rows = target.lookup_all(request.index_name, *values)
            row = rows[0] if rows else None
        else:
            row = target.lookup(*values)
        return qry.LookupResponse(
            found=row is not None, row=row_pb(row), pipeline_id=cfg.pipeline_id(), key_fields=fields
        )

    @rpc()
    def LookupAll(
        self, request: qry.LookupAllRequest, context: grpc.ServicerContext
    ) -> qry.LookupAllResponse:
        if not request.index_name:
            raise ValueError("index_name is required (see GetTableStatus for the indexes)")
        target, cfg = self._lookup_target(request.table)
        values, _ = self._key(target, cfg, request.key_values, request.index_name)
        rows = target.lookup_all(request.index_name, *values)
        return qry.LookupAllResponse(rows=[row_pb(r) for r in rows])

    @rpc()
    def GetRow(
        self, request: qry.GetRowRequest, context: grpc.ServicerContext
    ) -> qry.GetRowResponse:
        target, cfg = self._target(request.table)
        values, fields = self._key(target, cfg, request.primary_key, None)
        if not values:
            raise ValueError("primary_key is required (one value per key column, in key order)")
        row = target.get(*values)
        return qry.GetRowResponse(
            found=row is not None, row=row_pb(row), pipeline_id=cfg.pipeline_id(), key_fields=fields
        )

    @rpc()
    def ListRows(
        self, request: qry.ListRowsRequest, context: grpc.ServicerContext
    ) -> qry.ListRowsResponse:
        target, _ = self._target(request.table)
        size = request.page_size or 100
        if size < 0 or size > MAX_PAGE:
            raise ValueError(f"page_size must be 1..{MAX_PAGE}")
        keys = self._sorted_keys(target)
        start = 0
        if request.page_token:
            after = sort_key(decode_page_token(request.page_token))
            lo, hi = 0, len(keys)
            while lo < hi:  # first key strictly greater than the token's key
                mid = (lo + hi) // 2
                if keys[mid][0] <= after:
                    lo = mid + 1
                else:
                    hi = mid
            start = lo
        rows: list[Row] = []
        last: Any = None
        i = start
        while len(rows) < size and i < len(keys):
            key = keys[i][1]
            r = target.get(*key) if isinstance(key, tuple) else target.get(key)
            if r is not None:  # deleted since the key list was taken
                rows.append(r)
                last = key
            i += 1
        token = encode_page_token(last) if rows and i < len(keys) else ""
        return qry.ListRowsResponse(
            rows=[row_pb(r) for r in rows], next_page_token=token, total_count=int(target.count())
        )

    def _sorted_keys(self, target: QueryableTarget) -> list[tuple[Any, Any]]:
        """``(sort key, key)`` of every row, sorted; cached until the target changes."""
        version = _version(target)
        cached = self._keys.get(id(target))
        if cached is not None and version is not None and cached[0] == version:
            return cached[1]
        if isinstance(target, KeyListingTarget):  # memory targets: keys without copying rows
            raw = list(target.keys())
        else:
            raw = [k for k, _ in target.items()]
        if _version(target) != version:
            version = None  # a write ran meanwhile: use, but do not cache
        keys = [(sort_key(k), k) for k in raw]
        try:
            keys.sort(key=lambda kv: kv[0])
        except TypeError:
            keys.sort(key=lambda kv: repr(kv[1]))
        if version is not None and not version & 1:
            self._keys[id(target)] = (version, keys)
        return keys

    @rpc()
    def CountRows(
        self, request: qry.CountRowsRequest, context: grpc.ServicerContext
    ) -> qry.CountRowsResponse:
        target, _ = self._target(request.table)
        return qry.CountRowsResponse(count=int(target.count()))

    @rpc()
    def WaitForPosition(
        self, request: qry.WaitForPositionRequest, context: grpc.ServicerContext
    ) -> qry.WaitForPositionResponse:
        """Block until every pipeline of the source applied (``durable``: made durable) every
        change at or before the position, the timeout (default 30 s, at most 5 min) or the
        call's deadline."""
        timeout = request.timeout_ms / 1000 if request.timeout_ms > 0 else DEFAULT_WAIT
        remaining = context.time_remaining()
        if remaining is not None:
            timeout = min(timeout, max(0.0, remaining - 0.05))
        timeout = min(timeout, MAX_WAIT)
        engine = self.rt.engine
        with long_call(self.rt):
            reached = engine.wait_for(
                request.source_id, request.position, timeout, durable=request.durable
            )
        applied = engine.applied_position(request.source_id)
        durable = engine.durable_position(request.source_id)
        return qry.WaitForPositionResponse(
            reached=reached, applied_position=applied or "", durable_position=durable or ""
        )

    @stream()
    def Subscribe(
        self, request: qry.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[qry.SubscribeResponse]:
        target, cfg = self._target(request.table)
        if not isinstance(target, ListenableTarget):
            raise EngineStateError(f"target of {cfg.table_id} does not support listeners")
        position_of = _position_reader(target)
        limit = self.rt.watch_buffer
        # The existing rows (replay_existing) come first: from listen_lazily, decoded as the
        # client takes them (outside the target's locks); from another target, delivered by
        # listen() on this thread into ``existing``. Later changes arrive on the pipeline's
        # thread into ``pending``, at most ``limit`` ahead of the client.
        existing: collections.deque[Any] = collections.deque()
        pending: collections.deque[Any] = collections.deque()
        has_data = threading.Event()
        overflow = threading.Event()
        replaying = threading.local()
        source = self.rt.engine.sources.get(cfg.source_id)

        def on_change(old: Any, new: Any) -> None:
            if getattr(replaying, "on", False):
                existing.append((old, new, position_of(), True))
                return
            # Runs on the pipeline's writer thread: keep it to an append.
            if len(pending) >= limit:
                overflow.set()
                has_data.set()
                return
            pending.append((old, new, position_of(), False))
            has_data.set()

        if request.replay_existing and isinstance(target, LazilyListenableTarget):
            # N5: the rows are decoded as the client takes them, outside the writer's lock
            pairs, unsubscribe = target.listen_lazily(on_change)
            existing = _Replayed(pairs, position_of())  # type: ignore[assignment]
        else:
            replaying.on = bool(request.replay_existing)
            try:
                unsubscribe = target.listen(
                    on_change, replay_existing=bool(request.replay_existing)
                )
            finally:
                replaying.on = False
        context.add_callback(unsubscribe)
        last_pos: Any = None
        last_text = ""
        try:
            while context.is_active() and not self.rt.stopping.is_set():
                if overflow.is_set():
                    raise RpcStatusError(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"subscriber fell more than {limit} changes behind; "
                        "resubscribe with replay_existing=true",
                    )
                queue = existing or pending
                if not queue:
                    if has_data.wait(0.25):
                        has_data.clear()  # the queues are checked again before waiting
                    continue
                events: list[Any] = []
                now = ms(time.time())
                while queue and len(events) < SUBSCRIBE_BATCH:
                    old, new, pos, replayed = queue.popleft()
                    if pos is not last_pos:
                        last_pos = pos
                        last_text = _pos_text(source, pos)
                    if old is None:
                        action = "TRUNCATE" if new is None else "INSERT"
                    else:
                        action = "DELETE" if new is None else "UPDATE"
                    events.append(
                        qry.RowEvent(
                            action=action,
                            old_values=row_pb(old),
                            new_values=row_pb(new),
                            position=last_text,
                            timestamp=now,
                            replayed=replayed,
                        )
                    )
                yield qry.SubscribeResponse(events=events)
        finally:
            unsubscribe()


class _Replayed:
    """The rows of a lazy replay, taken one at a time like a deque's ``popleft``."""

    def __init__(self, pairs: Iterator[tuple[None, Any]], position: Any) -> None:
        self._pairs = pairs
        self._next = next(pairs, None)
        self._position = position

    def __bool__(self) -> bool:
        return self._next is not None

    def popleft(self) -> tuple[Any, Any, Any, bool]:
        assert self._next is not None
        old, new = self._next
        self._next = next(self._pairs, None)
        return old, new, self._position, True


def _version(target: object) -> int | None:
    return target.version if isinstance(target, VersionedTarget) else None


def _position_reader(target: object) -> Callable[[], Any]:
    """Reads the target's applied position (None when it does not report one); the check is
    made once, not per change."""
    if isinstance(target, ReportsPosition):
        return lambda: target.position
    return lambda: None


def _pos_text(source: Any, pos: Any) -> str:
    if pos is None or source is None:
        return ""
    try:
        return str(source.position_to_string(pos))
    except Exception:
        return str(pos)
