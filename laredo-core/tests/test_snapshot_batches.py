"""Layout-2 parts written from Arrow record batches, staged artifact records, batch reads."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

import pytest
from laredo.errors import SnapshotError
from laredo.serialization import dumps_row, encode_value
from laredo.snapshots.arrow import batches_rows
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.snapshots.manifest import TABLE, SnapshotArtifact
from laredo.snapshots.parquet import ParquetSerializer
from laredo.types import Row, SnapshotMetadata, TableIdentifier, TableSnapshotInfo

pa = pytest.importorskip("pyarrow")

USERS = TableIdentifier("public", "users")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def rows(lo: int, hi: int) -> list[Row]:
    return [
        {
            "id": i,
            "name": None if i % 7 == 0 else f"user {i}",
            "ok": i % 2 == 0,
            "day": date(2026, 1, 1 + i % 28),
            "score": Decimal(i) / 8,
            "ref": uuid.UUID(int=i),
            "doc": {"k": [i, "x"]},
        }
        for i in range(lo, hi)
    ]


ENCODED = {"score": "decimal", "ref": "uuid", "doc": "json"}


def batch(rs: list[Row], large: bool = False) -> Any:
    """Rows as a record batch in the encodings of ``ENCODED`` (like a Spark task holds them)."""
    text = pa.large_string() if large else pa.string()
    return pa.record_batch(
        [
            pa.array([r["id"] for r in rs], pa.int64()),
            pa.array([r["name"] for r in rs], text),
            pa.array([r["ok"] for r in rs], pa.bool_()),
            pa.array([r["day"] for r in rs], pa.date32()),
            pa.array([str(r["score"]) for r in rs], pa.string()),
            pa.array([str(r["ref"]) for r in rs], pa.string()),
            pa.array([dumps_value(r["doc"]) for r in rs], pa.string()),
        ],
        names=["id", "name", "ok", "day", "score", "ref", "doc"],
    )


def dumps_value(v: Any) -> str:
    import json

    return json.dumps(encode_value(v), separators=(",", ":"))


def info(n: int = 0) -> TableSnapshotInfo:
    return TableSnapshotInfo(USERS, n, position="0/9", pipeline_id="p")


def test_parquet_batches_are_the_row_format_and_read_back_exactly(tmp_path: Path) -> None:
    ser = ParquetSerializer(row_group_size=40)
    store = LocalSnapshotStore(tmp_path, fsync=False)
    data = [batch(rows(0, 25)), batch(rows(25, 50), large=True), batch(rows(50, 100))]
    part = store.write_part_batches(
        "b", USERS, "part-00000-a", info(), data, serializer=ser, encoded=ENCODED
    )
    assert (part.rows, part.format) == (100, "parquet")
    store.commit("b", SnapshotMetadata("b", T0, {"pg": "0/9"}, (info(),)), [art(part)])
    _, tables = store.load("b")
    assert list(tables[USERS]) == rows(0, 100)  # the row reader sees the same file format
    read = store.read_part_batches("b", USERS, part)
    assert read is not None
    encoded, batches = read
    got = list(batches)
    assert encoded == ENCODED
    assert [b.num_rows for b in got] == [40, 40, 20]  # row groups, not the writer's batches
    assert got[0].schema.field("name").type == pa.string()
    assert list(batches_rows(got, encoded)) == rows(0, 100)
    assert store.read_part_batches("b", USERS, store.manifest("b").artifacts[0].parts[0])


def art(*parts: Any) -> SnapshotArtifact:
    return SnapshotArtifact(TABLE, USERS, tuple(parts), "p", None, "0/9")


def test_row_column_batches_pass_through_jsonl_and_decode_for_parquet(tmp_path: Path) -> None:
    store = LocalSnapshotStore(tmp_path, fsync=False)
    ragged = [{"id": 1, "a": Decimal("1.50")}, {"id": 2, "b": [1, 2]}]
    lines = pa.record_batch([pa.array([dumps_row(r) for r in ragged] + [None])], names=["r"])
    parts = [
        store.write_part_batches(
            "r", USERS, f"part-{i}", info(), [lines], serializer=ser, encoded={"r": "row"}
        )
        for i, ser in enumerate([JsonlSerializer(), ParquetSerializer()])
    ]
    assert [p.rows for p in parts] == [2, 2]
    store.commit("r", SnapshotMetadata("r", T0, {}, (info(),)), [art(*parts)])
    _, tables = store.load("r")
    assert list(tables[USERS]) == ragged + ragged
    body = (tmp_path / "r" / parts[0].path).read_bytes().decode()
    assert body.splitlines()[1:] == [dumps_row(r) for r in ragged]  # written as given


class PlainSerializer:
    """A third-party serializer without ``write_batches``: it gets the decoded rows."""

    def __init__(self) -> None:
        self.inner = JsonlSerializer()

    def format_id(self) -> str:
        return "plain"

    def write(self, info: TableSnapshotInfo, rows: Any, out: IO[bytes]) -> int:
        return self.inner.write(info, list(rows), out)

    def read(self, inp: IO[bytes]) -> Any:
        return self.inner.read(inp)


def test_serializers_without_batch_support_get_rows(tmp_path: Path) -> None:
    store = LocalSnapshotStore(tmp_path, fsync=False)
    ser = PlainSerializer()
    part = store.write_part_batches(
        "p", USERS, "part-0", info(), [batch(rows(0, 5))], serializer=ser, encoded=ENCODED
    )
    assert part.format == "plain" and part.rows == 5
    store.commit("p", SnapshotMetadata("p", T0, {}, (info(),)), [art(part)])
    assert list(store.read_part("p", USERS, part, ser)) == rows(0, 5)
    with pytest.raises(SnapshotError, match="unknown column encodings"):
        store.write_part_batches(
            "p", USERS, "part-1", info(), [], serializer=ser, encoded={"x": "yaml"}
        )
    assert store.read_part_batches("p", USERS, part, ser) is None  # no batch reader


def test_staged_artifact_records_survive_until_commit_removes_them(tmp_path: Path) -> None:
    store = LocalSnapshotStore(tmp_path, fsync=False)
    ser = JsonlSerializer()
    other = TableIdentifier("public", "users~1")
    a = store.write_part("s", USERS, "part-0-x", info(), [{"id": 1}], serializer=ser)
    b = store.write_part("s", other, "part-0-y", info(), [{"id": 2}], serializer=ser)
    store.write_part("s", other, "part-0-z", info(), [{"id": 2}], serializer=ser)  # an attempt
    store.stage_artifact("s", "t0", art(a))
    store.stage_artifact("s", "t1", SnapshotArtifact(TABLE, other, (b,), "q"))
    assert store.list() == []
    staged = store.staged_artifacts("s")
    assert sorted(staged) == ["t0", "t1"] and staged["t1"].parts == (b,)
    infos = (info(), TableSnapshotInfo(other, 0, pipeline_id="q"))
    store.commit("s", SnapshotMetadata("s", T0, {}, infos), list(staged.values()))
    folder = tmp_path / "s"
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "metadata.json",
        a.path,
        b.path,
    ]
    assert not (folder / "_artifacts").exists()
    with pytest.raises(SnapshotError, match="invalid artifact record name"):
        store.stage_artifact("s2", "../x", art(a))


def test_check_writable_names_the_location(tmp_path: Path) -> None:
    LocalSnapshotStore(tmp_path / "ok", fsync=False).check_writable("w")
    assert not any((tmp_path / "ok").rglob("*.tmp"))  # the probe is removed
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(SnapshotError, match=r"cannot write part .* to .*file/snaps"):
        LocalSnapshotStore(blocker / "snaps", fsync=False).check_writable("w")


def test_parquet_batches_with_no_rows_and_mismatched_batches(tmp_path: Path) -> None:
    ser = ParquetSerializer()
    buf = io.BytesIO()
    empty = batch(rows(0, 0))
    assert ser.write_batches(info(), [empty], buf, ENCODED) == 0
    header, got = ser.read(io.BytesIO(buf.getvalue()))
    assert header.row_count == 0 and list(got) == []
    bad = pa.record_batch([pa.array([1])], names=["other"])
    with pytest.raises(SnapshotError, match="different columns"):
        ser.write_batches(info(), [batch(rows(0, 2)), bad], io.BytesIO(), ENCODED)


def test_replay_chains_the_parts_of_a_multi_part_snapshot(tmp_path: Path) -> None:
    from laredo.replay import SnapshotReplay
    from laredo.testing.recording import RecordingTarget

    store = LocalSnapshotStore(tmp_path, fsync=False)
    parts = [
        store.write_part_batches(
            "m",
            USERS,
            f"part-{i:05d}-1",
            info(),
            [batch(rows(i * 10, i * 10 + 10))],
            serializer=ser,
            encoded=ENCODED,
        )
        for i, ser in enumerate([ParquetSerializer(), JsonlSerializer(), ParquetSerializer()])
    ]
    store.commit("m", SnapshotMetadata("m", T0, {"pg": "0/9"}, (info(),)), [art(*parts)])
    target = RecordingTarget()
    result = SnapshotReplay(store).target(USERS, target).run("m")
    assert result.total_rows == 30
    assert target.rows() == rows(0, 30)  # every part, in manifest order, exact values
