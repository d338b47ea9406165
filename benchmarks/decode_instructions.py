"""Instructions per change of the stream reader's decode (framing + ``PgOutputDecoder.feed``,
batch path), for callgrind: load-independent, unlike the wall-clock benchmarks (issue 35).

Capture the ``pg_source.py`` stream workload once (an embedded PostgreSQL, the messages saved
to a file), then decode it ``--reps`` times as the reader thread does: each message inside an
XLogData frame, passed whole with its offset (``feed(data.tobytes(), 25)``; ``--copy`` passes
``bytes(data[25:])`` as the reader did before). Under callgrind, run ``--reps 1`` and
``--reps 3``: the difference divided by twice the change count is the decode's instructions
per change (imports, start-up and the capture cancel out)::

    .venv/bin/python benchmarks/decode_instructions.py --capture /tmp/msgs.pkl --changes 45000
    for r in 1 3; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$r \\
        .venv/bin/python benchmarks/decode_instructions.py --messages /tmp/msgs.pkl --reps $r; done
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path
from typing import Any

from laredo.types import TableIdentifier
from laredo_source_pg.pgoutput import PgOutputDecoder
from psycopg import pq
from psycopg.adapt import Transformer

sys.path.insert(0, str(Path(__file__).parent))

CHG = TableIdentifier("public", "chg")


def decode(msgs: list[bytes], reps: int, copy: bool) -> int:
    """Decode the frames ``reps`` times; returns the ops decoded."""
    header = b"w" + bytes(24)
    frames = [memoryview(header + m) for m in msgs]
    tx = Transformer()

    def loader_for(oid: int) -> Any:
        return tx.get_loader(oid, pq.Format.TEXT).load

    d = PgOutputDecoder(loader_for, lambda s, n: CHG if n == "chg" else None, batches=True)
    feed = d.feed
    n = 0
    for _ in range(reps):
        d.reset_session()
        for data in frames:
            if data[0] == 119:
                done = feed(bytes(data[25:])) if copy else feed(data.tobytes(), 25)
                if done is not None:
                    n += len(done.items)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--capture", type=Path, help="capture the workload to this file and exit")
    ap.add_argument("--changes", type=int, default=45_000)
    ap.add_argument("--messages", type=Path, help="the captured messages")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--copy", action="store_true", help="feed bytes(data[25:]) (the old way)")
    args = ap.parse_args()
    if args.capture:
        from hot_path import capture
        from laredo_source_pg.embedded import EmbeddedPostgres

        with EmbeddedPostgres() as pg:
            pg.execute("CREATE DATABASE bench")
            args.capture.write_bytes(pickle.dumps(capture(pg, args.changes)))
        return
    if args.messages is None:
        ap.error("--messages FILE (from --capture FILE) is required")
    msgs: list[bytes] = pickle.loads(args.messages.read_bytes())
    changes = sum(1 for m in msgs if m[0] in (73, 85, 68))
    t0 = time.process_time()
    ops = decode(msgs, args.reps, args.copy)
    cpu = time.process_time() - t0
    per = cpu / changes / args.reps * 1e6
    print(f"{ops:,} ops, {changes:,} changes x {args.reps}: {per:.3f} us CPU per change")


if __name__ == "__main__":
    main()
