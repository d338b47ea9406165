"""Security review L8 on real PostgreSQL while changes stream: ``StartReplay`` and
``ReplayDeadLetters`` write to a pipeline's target only from that pipeline's worker, between
its batches, so a target has one writer and no call overlaps another."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import laredo
import pytest
from laredo import ChangeAction, ChangeEvent, ErrorInfo
from laredo_server._proto.laredo_proto.v1 import oam_pb2 as oam
from laredo_server._proto.laredo_proto.v1 import oam_pb2_grpc
from laredo_server.config import Built
from laredo_server.runtime import ServerRuntime
from laredo_server.serve import attach_frontends
from laredo_source_pg import PostgresSource
from laredo_target_memory import IndexedTarget

from .testkit import wait_for

pytestmark = pytest.mark.integration

ITEMS = laredo.Table("public", "items")
ROWS = 4000
WORKER = "laredo-pipeline-items"


class RecordingTarget(IndexedTarget):
    """An indexed-memory target that records which thread makes each call once ``recording``
    is set, and every call that starts while another thread is still inside the target."""

    def __init__(self) -> None:
        super().__init__()
        self.recording = False
        self.calls: list[tuple[str, str]] = []  # (method, thread name)
        self.overlaps: list[str] = []
        self._inside: dict[int, int] = {}  # thread id -> depth (a call may make another)
        self._guard = threading.Lock()

    def _enter(self, method: str) -> None:
        me = threading.get_ident()
        with self._guard:
            if any(depth for t, depth in self._inside.items() if t != me):
                self.overlaps.append(method)
            self._inside[me] = self._inside.get(me, 0) + 1
            if self.recording:
                self.calls.append((method, threading.current_thread().name))

    def _leave(self) -> None:
        with self._guard:
            self._inside[threading.get_ident()] -= 1

    def _call(self, method: str, work: Callable[[], Any]) -> Any:
        self._enter(method)
        try:
            return work()
        finally:
            self._leave()

    def on_init(self, table: Any, columns: Any) -> None:
        self._call("on_init", lambda: super(RecordingTarget, self).on_init(table, columns))

    def on_baseline_row(self, table: Any, row: Any) -> None:
        self._call("baseline", lambda: super(RecordingTarget, self).on_baseline_row(table, row))

    def on_baseline_rows(self, table: Any, rows: Any) -> None:
        self._call("baseline", lambda: super(RecordingTarget, self).on_baseline_rows(table, rows))

    def on_baseline_complete(self, table: Any) -> None:
        self._call("complete", lambda: super(RecordingTarget, self).on_baseline_complete(table))

    def apply_change_batch(self, table: Any, batch: Any) -> None:
        self._call("changes", lambda: super(RecordingTarget, self).apply_change_batch(table, batch))

    def apply_changes(self, table: Any, events: Any) -> None:
        self._call("changes", lambda: super(RecordingTarget, self).apply_changes(table, events))

    def on_insert(self, table: Any, row: Any) -> None:
        self._call("insert", lambda: super(RecordingTarget, self).on_insert(table, row))

    def on_update(self, table: Any, row: Any, identity: Any) -> None:
        self._call("update", lambda: super(RecordingTarget, self).on_update(table, row, identity))


class Server:
    """A server runtime (gRPC only) over a PostgreSQL source of ``items`` into a
    :class:`RecordingTarget`, with a local snapshot store and a memory dead-letter store."""

    def __init__(self, db: Any, tmp: Path) -> None:
        self.target = RecordingTarget()
        self.dls = laredo.dead_letter_store("memory")

        def factory(observers: Any, store_override: Any) -> Built:
            store = store_override or laredo.snapshot_store("local", path=str(tmp / "snaps"))
            source = PostgresSource(
                db.dsn,
                slot_mode="ephemeral",
                slot_name=db.slot_name,
                publication={"create": True},
                status_interval="200ms",
            )
            eng = laredo.Engine(
                sources={"pg": source},
                pipelines=[laredo.Pipeline("pg", ITEMS, self.target, id="items")],
                snapshot_store=store,
                dead_letter_store=self.dls,
                observers=list(observers),
            )
            return Built(eng, store, None, self.dls)

        self.rt = attach_frontends(ServerRuntime(factory), health_port=None)
        self.rt.start()
        assert self.rt.engine.await_ready(60)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.rt.listeners.grpc_port}")
        self.oam = oam_pb2_grpc.LaredoOAMServiceStub(self.channel)

    def stop(self) -> None:
        self.channel.close()
        self.rt.stop(grace=20)


@pytest.fixture
def server(pg_database: Any, tmp_path: Path) -> Iterator[Server]:
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL)")
    db.execute(f"INSERT INTO items SELECT g, 'base', 0 FROM generate_series(1, {ROWS}) g")
    s = Server(db, tmp_path)
    try:
        yield s
    finally:
        s.stop()


class Updater:
    """Updates random rows of ``items`` in small transactions until stopped."""

    def __init__(self, db: Any) -> None:
        self.stop = threading.Event()
        self.count = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(db,), daemon=True)
        self.thread.start()

    def _run(self, db: Any) -> None:
        rnd = random.Random(7)
        try:
            with db.connect() as conn:
                while not self.stop.is_set():
                    ids = [rnd.randint(1, ROWS) for _ in range(5)]
                    conn.execute(
                        "UPDATE items SET v = 'live', n = n + 1 WHERE id = ANY(%s)", (ids,)
                    )
                    self.count += 1
        except BaseException as exc:
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert self.error is None, self.error


def _state(server: Server, rid: str) -> Any:
    st = server.oam.GetReplayStatus(oam.GetReplayStatusRequest(replay_id=rid))
    return st if st.state != "running" else None


def _settled(server: Server, db: Any) -> bool:
    want = {r[0]: (r[1], r[2]) for r in db.execute("SELECT id, v, n FROM items")}
    got = {k[0] if isinstance(k, tuple) else k: (r["v"], r["n"]) for k, r in server.target.items()}
    return got == want


@pytest.mark.parametrize("speed", ["full", "2000"])
def test_start_replay_applies_on_the_pipeline_worker_while_changes_stream(
    server: Server, pg_database: Any, speed: str
) -> None:
    db = pg_database
    snap = server.oam.CreateSnapshot(oam.CreateSnapshotRequest()).snapshot_id
    target = server.target
    target.recording = True
    updater = Updater(db)
    try:
        assert wait_for(lambda: any(m == "changes" for m, _ in target.calls), 30)
        rid = server.oam.StartReplay(
            oam.StartReplayRequest(snapshot_id=snap, speed=speed, confirm=True)
        ).replay_id
        st = wait_for(lambda: _state(server, rid), 60)
        assert st and st.state == "completed" and st.rows_replayed == ROWS, st
        wait_for(lambda: target.calls.count(("changes", WORKER)) > 0, 5)
    finally:
        updater.finish()
    calls = list(target.calls)
    threads = {t for _, t in calls}
    assert threads == {WORKER}, threads  # one writer: the pipeline's worker
    assert target.overlaps == []
    kinds = [m for m, _ in calls]
    first = kinds.index("on_init")
    last = len(kinds) - 1 - kinds[::-1].index("complete")
    assert kinds[first:last].count("baseline") >= 2
    if speed != "full":  # a paced replay takes 2 s: streaming goes on between its calls
        assert "changes" in kinds[first:last], f"{updater.count} updates, none in the replay"
    # and nothing was lost: once every row changes again, the target equals the table
    db.execute("UPDATE items SET v = 'final', n = n + 1")
    assert wait_for(lambda: _settled(server, db), 30)
    assert target.overlaps == []


def test_replay_dead_letters_applies_on_the_pipeline_worker(
    server: Server, pg_database: Any
) -> None:
    target = server.target
    for i in (ROWS + 1, ROWS + 2):
        ev = ChangeEvent(ITEMS, ChangeAction.INSERT, 1, new_values={"id": i, "v": "dl", "n": 0})
        server.dls.write("items", ev, ErrorInfo("boom", "TargetError"))
    target.recording = True
    updater = Updater(pg_database)
    try:
        assert wait_for(lambda: any(m == "changes" for m, _ in target.calls), 30)
        r = server.oam.ReplayDeadLetters(oam.ReplayDeadLettersRequest(pipeline_id="items"))
    finally:
        updater.finish()
    assert r.replayed == 2
    assert (target.get(ROWS + 1) or {}).get("v") == (target.get(ROWS + 2) or {}).get("v") == "dl"
    assert {t for _, t in target.calls} == {WORKER} and target.overlaps == []
    assert [m for m, _ in target.calls].count("insert") == 2
    # the source was not paused for it: the pipeline still streams
    st = server.oam.GetPipelineStatus(oam.GetPipelineStatusRequest(pipeline_id="items")).status
    assert st.state == oam.PIPELINE_STATE_STREAMING
