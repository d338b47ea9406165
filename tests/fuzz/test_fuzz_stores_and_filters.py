"""The snapshot manifest reader raises only ``SnapshotError``, and the fan-out filter compiler
only ``ValueError`` (``ConfigError``: INVALID_ARGUMENT), on any input; both are bounded."""

from __future__ import annotations

import json
import tempfile
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import fuzz_strategies
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from laredo.errors import SnapshotError
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.types import SnapshotMetadata, TableIdentifier, TableSnapshotInfo
from laredo_target_fanout import _wire
from laredo_target_fanout._filters import compile_filters, normalize_filters
from laredo_target_fanout._proto import replication_pb2 as pb

pytestmark = pytest.mark.fuzz

USERS = TableIdentifier("public", "users")

# -- the snapshot manifest reader ---------------------------------------------------------------

_BASE = Path(tempfile.mkdtemp(prefix="laredo-fuzz-manifest-"))
_STORE = LocalSnapshotStore(_BASE, fsync=False)
_STORE.save(
    "good",
    SnapshotMetadata(
        "good", datetime(2026, 1, 1, tzinfo=UTC), {"pg": "1"}, (TableSnapshotInfo(USERS, 2),)
    ),
    {USERS: [{"id": 1}, {"id": 2, "d": Decimal("1.5")}]},
    JsonlSerializer(),
)
GOOD = json.loads((_BASE / "good" / "metadata.json").read_text())

json_values = fuzz_strategies.json_values(
    [
        "../../x",
        "/etc/passwd",
        "a\\b",
        "public.users/part-00000.jsonl",
        "0" * 64,
        "jsonl",
        "parquet",
    ]
)


def mutated_manifest() -> Any:
    """The manifest of a real snapshot with a few of its values replaced or removed."""
    return fuzz_strategies.mutated(GOOD, json_values).map(lambda d: json.dumps(d).encode())


@settings.get_profile("laredo-fuzz")
@given(mutated_manifest() | st.binary(max_size=100))
@example(b"[" * 100_000)
@example(
    json.dumps({**GOOD, "layout": 2, "artifacts": [{"parts": [{"path": "../../x"}]}]}).encode()
)
@example(json.dumps({**GOOD, "created_at": "9999-99-99"}).encode())
def test_manifest_reader_raises_only_snapshot_error(data: bytes) -> None:
    (_BASE / "fuzz").mkdir(exist_ok=True)
    (_BASE / "fuzz" / "metadata.json").write_bytes(data)
    t0 = time.monotonic()
    try:
        _STORE.describe("fuzz")
        _, tables = _STORE.load("fuzz", JsonlSerializer())
        for rows in tables.values():
            list(rows)
    except SnapshotError:
        pass
    assert time.monotonic() - t0 < 2


# -- the fan-out filter compiler -----------------------------------------------------------------

TYPED = [
    b'{"$type":"decimal","value":"1e100000000"}',
    b'{"$type":"decimal","value":"-1E-100000000"}',
    b'{"$type":"decimal","value":"sNaN"}',
    b'{"$type":"decimal","value":"1e150000"}',
    b'{"$type":"float","value":"NaN"}',
    b'{"$type":"uuid","value":5}',
    b"[" * 50_000,
    b"42",
    b"null",
    b"\xff",
]
typed_json = (
    st.sampled_from(TYPED)
    | st.binary(max_size=30)
    | st.builds(
        lambda v: json.dumps(v).encode(),
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=8)
        | st.lists(st.integers(), max_size=3),
    )
)


@st.composite
def predicate(draw: Any) -> Any:
    fp = pb.FieldPredicate(field=draw(st.sampled_from(["id", "name", ""]) | st.text(max_size=5)))
    op = draw(st.sampled_from(["equals", "prefix", "in", "none"]))
    if op == "equals":
        fp.equals.json = draw(typed_json)
    elif op == "prefix":
        fp.prefix = draw(st.text(max_size=5))
    elif op == "in":
        fp.SetInParent()
        getattr(fp, "in").values.extend(
            pb.TypedValue(json=j) for j in draw(st.lists(typed_json, max_size=3))
        )
    return fp


ROWS = [
    {"id": 42, "name": "ann"},
    {"id": Decimal("1e150000"), "name": None},
    {"id": Decimal("NaN"), "name": "x"},
    {"id": float("nan")},
    {"id": True},
    {"id": [1, 2]},
    {},
]


@settings.get_profile("laredo-fuzz")
@given(st.lists(predicate(), max_size=4))
def test_filter_compiler_raises_only_value_error(filters: list[Any]) -> None:
    t0 = time.monotonic()
    req = pb.SyncRequest.FromString(pb.SyncRequest(filters=filters).SerializeToString())
    try:
        matcher = compile_filters(normalize_filters(_wire.predicates_from_pb(req.filters)))
    except ValueError:
        return
    if matcher is not None:
        for row in ROWS:
            assert matcher(row) in (True, False)
    assert time.monotonic() - t0 < 1
