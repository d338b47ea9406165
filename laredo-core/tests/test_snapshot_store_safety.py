"""Snapshots and dead letters stay in their store (issue 21: M3, L6, L7), on real files: a
manifest cannot point a part outside its snapshot's directory, layout 2 requires the SHA-256,
files are created 0600 (folders 0700), stale staging folders are removed, a directory fsync
failure is not swallowed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from laredo.deadletter import LocalDeadLetterStore
from laredo.errors import SnapshotError
from laredo.snapshots import local as local_mod
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ErrorInfo,
    SnapshotMetadata,
    TableIdentifier,
    TableSnapshotInfo,
)

USERS = TableIdentifier("public", "users")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
PART = "public.users/part-00000.jsonl"


def _meta(sid: str) -> SnapshotMetadata:
    return SnapshotMetadata(sid, T0, {"pg": "1"}, (TableSnapshotInfo(USERS, 1),))


@pytest.fixture
def umask022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _saved(tmp_path: Path) -> tuple[LocalSnapshotStore, Path]:
    store = LocalSnapshotStore(tmp_path / "store", fsync=False)
    store.save("s1", _meta("s1"), {USERS: [{"id": 1, "name": "in store"}]}, JsonlSerializer())
    return store, tmp_path / "store" / "s1" / "metadata.json"


def _point_part_at(meta_path: Path, path: str, data: bytes) -> None:
    """Edit the manifest as someone who can write the store would: a part path and the
    matching size and SHA-256."""
    doc = json.loads(meta_path.read_text())
    part = doc["artifacts"][0]["parts"][0]
    part.update(path=path, size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    meta_path.write_text(json.dumps(doc))


def _load_all(store: LocalSnapshotStore) -> list[dict[str, object]]:
    _, tables = store.load("s1", JsonlSerializer())
    return [dict(r) for r in tables[USERS]]


# -- M3: containment --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "backslash", "dot"])
def test_a_part_path_outside_the_snapshot_is_rejected(tmp_path: Path, kind: str) -> None:
    store, meta_path = _saved(tmp_path)
    good = (tmp_path / "store" / "s1" / PART).read_bytes()
    outside = tmp_path / "outside" / "evil.jsonl"
    outside.parent.mkdir()
    outside.write_bytes(good.replace(b"in store", b"outside!"))
    path = {
        "dotdot": "../../outside/evil.jsonl",
        "absolute": str(outside),
        "backslash": "..\\..\\outside\\evil.jsonl",
        "dot": "./" + PART,
    }[kind]
    _point_part_at(meta_path, path, outside.read_bytes())
    with pytest.raises(SnapshotError, match="leaves the snapshot"):
        _load_all(store)
    assert store.list() == []  # an unreadable manifest is skipped, never half-trusted


def test_a_symbolic_link_out_of_the_snapshot_is_not_followed(tmp_path: Path) -> None:
    store, meta_path = _saved(tmp_path)
    part = tmp_path / "store" / "s1" / PART
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(part.read_bytes().replace(b"in store", b"outside!"))
    part.unlink()
    part.symlink_to(outside)
    _point_part_at(meta_path, PART, outside.read_bytes())
    with pytest.raises(SnapshotError, match="outside the snapshot"):
        _load_all(store)


def test_a_fifo_part_fails_at_once_instead_of_hanging(tmp_path: Path) -> None:
    store, meta_path = _saved(tmp_path)
    part = tmp_path / "store" / "s1" / PART
    part.unlink()
    os.mkfifo(part)
    _point_part_at(meta_path, PART, b"")
    t0 = time.monotonic()
    with pytest.raises(SnapshotError):
        _load_all(store)
    assert time.monotonic() - t0 < 5


def test_layout_2_requires_the_sha256(tmp_path: Path) -> None:
    store, meta_path = _saved(tmp_path)
    doc = json.loads(meta_path.read_text())
    for bad in (None, "", "00", "Z" * 64):
        doc["artifacts"][0]["parts"][0]["sha256"] = bad
        meta_path.write_text(json.dumps(doc))
        with pytest.raises(SnapshotError, match="no valid sha256"):
            _load_all(store)
    doc["artifacts"][0]["parts"][0].pop("sha256")
    meta_path.write_text(json.dumps(doc))
    with pytest.raises(SnapshotError, match="no valid sha256"):
        _load_all(store)


def test_part_file_is_contained_too(tmp_path: Path) -> None:
    store, _ = _saved(tmp_path)
    assert store.part_file("s1", PART).read_bytes()
    with pytest.raises(SnapshotError):
        store.part_file("s1", "../../etc/passwd")


# -- L6: permissions --------------------------------------------------------------------------


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_snapshot_files_are_0600_and_folders_0700(tmp_path: Path, umask022: None) -> None:
    _saved(tmp_path)
    snap = tmp_path / "store" / "s1"
    files = [p for p in snap.rglob("*") if p.is_file()]
    dirs = [p for p in snap.rglob("*") if p.is_dir()] + [snap, tmp_path / "store"]
    assert len(files) == 2
    assert {str(p.relative_to(snap)): _mode(p) for p in files} == {
        "metadata.json": 0o600,
        PART: 0o600,
    }
    assert {_mode(d) for d in dirs} == {0o700}


def test_dead_letter_files_are_0600(tmp_path: Path, umask022: None) -> None:
    store = LocalDeadLetterStore(tmp_path / "dlq", fsync=False)
    change = ChangeEvent(USERS, ChangeAction.INSERT, "1", new_values={"id": 1, "ssn": "x"})
    store.write("p1", change, ErrorInfo("boom", "ValueError"))
    store.write("p1", change, ErrorInfo("boom", "ValueError"))
    (path,) = (tmp_path / "dlq").iterdir()
    assert _mode(path) == 0o600 and _mode(tmp_path / "dlq") == 0o700

    class Target:
        def on_insert(self, *a: object) -> None:
            pass

    # the rewrite after a partial replay keeps the mode
    store.replay("p1", Target())
    assert not path.exists() or _mode(path) == 0o600


# -- L7: stale staging, directory fsync -------------------------------------------------------


def test_stale_staging_folders_are_removed_when_a_store_opens(tmp_path: Path) -> None:
    base = tmp_path / "store"
    for name in (".tmp-snap-crashed", ".tmp-del-s0-1-2", ".tmp-snap-writing"):
        (base / name / "public.users").mkdir(parents=True)
        (base / name / "public.users" / "part-00000.jsonl").write_bytes(b"x")
    old = time.time() - 2 * local_mod.STALE_TEMP_AFTER
    for name in (".tmp-snap-crashed", ".tmp-del-s0-1-2"):
        for p in [base / name, *(base / name).rglob("*")]:
            os.utime(p, (old, old))
    LocalSnapshotStore(base, fsync=False)
    assert sorted(p.name for p in base.iterdir()) == [".tmp-snap-writing"]


def test_a_directory_fsync_failure_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError):
        local_mod._fsync_dir(tmp_path / "missing")
    local_mod._fsync_dir(tmp_path)  # a real directory: fine


def test_a_failed_publish_fsync_fails_the_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalSnapshotStore(tmp_path / "store", fsync=True)
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(local_mod.os, "fsync", fsync)
    with pytest.raises(SnapshotError, match="fsync"):
        store.save("s1", _meta("s1"), {USERS: [{"id": 1}]}, JsonlSerializer())
    shutil.rmtree(tmp_path / "store")
