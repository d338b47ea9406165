"""The target's PositionCodec: the source's functions when bound, a generic fallback
otherwise (integers, else equality only: no source's format is guessed)."""

from __future__ import annotations

import laredo
from laredo.contracts import PipelineContext
from laredo.observers import NullObserver
from laredo.testing.source import columns
from laredo_target_fanout import FanOutSource, FanOutTarget
from laredo_target_fanout.positions import PositionCodec

T = laredo.Table("public", "users")


class Hex:
    """A source whose positions are ints written as hex text."""

    def position_to_string(self, position: int) -> str:
        return format(position, "x")

    def position_from_string(self, text: str) -> int:
        return int(text, 16)

    def compare_positions(self, a: int, b: int) -> int:
        return (a > b) - (a < b)


def test_unbound_understands_integers_and_otherwise_only_equality() -> None:
    c = PositionCodec()
    assert (c.to_string(None), c.to_string(12), c.from_string(""), c.from_string("12")) == (
        "",
        "12",
        None,
        12,
    )
    assert (c.compare(12, "13"), c.compare("13", 12), c.compare(5, 5)) == (-1, 1, 0)
    # no PostgreSQL (or any) text format is parsed: "0/10" is a string, equal only to itself
    assert c.from_string("0/10") == "0/10"
    assert c.compare("0/10", "0/10") == 0
    assert c.compare("0/10", "0/9") is None
    assert c.compare("0/10", 16) is None


def test_bound_to_the_pipeline_uses_the_source_functions() -> None:
    src = Hex()
    t = FanOutTarget()
    t.bind_pipeline(
        PipelineContext(
            pipeline_id="p",
            source_id="s",
            table=T,
            observer=NullObserver(),
            position_to_string=src.position_to_string,
            position_from_string=src.position_from_string,
            compare_positions=src.compare_positions,
        )
    )
    assert t.pipeline_id == "p"
    assert (t.codec.to_string(255), t.codec.from_string("ff"), t.codec.compare(1, 2)) == (
        "ff",
        255,
        -1,
    )
    assert t.codec.from_string("zz") is None  # the source refused it


def test_resume_by_position_uses_the_bound_format() -> None:
    t = FanOutTarget()
    t.bind_source(Hex())
    t.on_init(T, columns("id", "name"))
    try:
        t.set_change_position(0x10)
        t.on_baseline_complete(T)
        for i, pos in enumerate((0x11, 0x12)):
            t.apply_changes(
                T,
                [laredo.ChangeEvent(T, laredo.ChangeAction.INSERT, pos, new_values={"id": i})],
            )
        assert t.snapshots()[0].position == "10"
        _, hs, _ = t.open_session(
            "c",
            peer="p",
            last_sequence=0,
            journal_id="another",
            last_position="11",
            last_snapshot_id="",
            matcher=None,
            applied_at_position=1,
        )
        assert (hs.mode, hs.resume_from_sequence) == (laredo.SyncMode.DELTA, 1)
    finally:
        t.on_close(T)


def test_the_cascade_source_positions_are_sequences() -> None:
    s = FanOutSource("127.0.0.1:1")
    assert s.position_to_string(7) == "7" and s.position_from_string("7") == 7
    assert s.compare_positions(7, "8") == -1
    try:
        s.position_from_string("0/7")
    except ValueError as exc:
        assert "fanout source position" in str(exc)
    else:
        raise AssertionError("no error")
