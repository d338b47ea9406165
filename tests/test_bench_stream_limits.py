"""The live figure of ``benchmarks/pg_source.py``: the busy span takes the writer's own time
out (idle gaps between a change's arrival and the next commit do not count)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from stream_limits import busy_seconds


def test_busy_span_skips_the_gaps_where_every_commit_had_arrived() -> None:
    # three transactions of 10 changes, committed at t=0, 10, 20, each arriving 1 s later
    commits = [(0.0, 10), (10.0, 20), (20.0, 30)]
    arrivals = [(1.0, 10), (11.0, 20), (21.0, 30)]
    assert busy_seconds(commits, arrivals) == 3.0


def test_busy_span_merges_overlapping_backlogs() -> None:
    # the consumer falls behind: the second commit comes before the first arrived
    commits = [(0.0, 10), (1.0, 20), (5.0, 30)]
    arrivals = [(2.0, 10), (3.5, 20), (6.0, 30)]
    assert busy_seconds(commits, arrivals) == 3.5 + 1.0


def test_busy_span_matches_an_arrival_to_the_commit_it_completes() -> None:
    # arrivals reported per applied batch, not per transaction: the span of a commit ends
    # with the first arrival that covers its last change
    commits = [(0.0, 10), (10.0, 20)]
    arrivals = [(0.5, 4), (2.0, 10), (10.5, 15), (12.0, 20)]
    assert busy_seconds(commits, arrivals) == 2.0 + 2.0


def test_an_arrival_reported_before_the_commit_time_counts_nothing() -> None:
    # the stream can deliver before the writer's clock reads the commit time
    commits = [(1.0, 10)]
    arrivals = [(0.9, 10)]
    assert busy_seconds(commits, arrivals) == 0.0
