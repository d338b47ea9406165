"""``laredo spark baseline --config FILE [--partitions N] [--master URL] [--chunk-rows N]``.

``--chunk-rows N`` reads resumable key-range chunks of ``N`` rows whatever the source's
``baseline`` mode (``0``: one pass).

Registered into the ``laredo`` CLI when it is a typer app; also runnable as
``python -m laredo_spark.cli baseline --config FILE``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from laredo.errors import MissingDependencyError

logger = logging.getLogger(__name__)

_CHUNK_ROWS = (
    "resumable key-range chunks of N rows (overrides the source's baseline mode; 0: one pass)"
)


def _load(path: str) -> tuple[dict[str, Any], Any]:
    """The config tree of ``path`` and laredo-server's ``LoadedConfig`` of it: HOCON through
    laredo-server's loader (includes, conf.d, environment overrides; the runner validates it
    with the server's models), or plain JSON (and ``None``) when laredo-server is not
    installed."""
    try:
        from laredo_server.config import load_config  # noqa: PLC0415 - lazy: optional (laredo-spark[cli])
    except ImportError:
        try:
            with open(path, encoding="utf-8") as f:
                data: dict[str, Any] = json.load(f)
        except ValueError:
            raise MissingDependencyError(
                "laredo-spark[cli]", "reading HOCON configuration files"
            ) from None
        return data, None
    loaded = load_config(path, validate=False)
    return dict(loaded.tree), loaded


def baseline(
    config: str,
    partitions: int | None = None,
    master: str | None = None,
    chunk_rows: int | None = None,
) -> int:
    from .runner import run_spark  # noqa: PLC0415 - lazy: pyspark; `laredo --help` must not start it

    # progress (partitions written, ETA; rows per pipeline) and the keys left to `laredo serve`
    # go to stderr even when the CLI framework configured no logging
    log = logging.getLogger("laredo_spark")
    handler: logging.Handler | None = None
    if not logging.getLogger().handlers and not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        log.addHandler(handler)
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)
    try:
        tree, loaded = _load(config)
        results = run_spark(
            tree, loaded=loaded, partitions=partitions, master=master, chunk_rows=chunk_rows
        )
    finally:
        if handler is not None:
            log.removeHandler(handler)
    for r in results:
        total = sum(r.row_counts.values())
        chunks = getattr(r, "chunks", None)
        read = "" if chunks is None else f", chunks read {chunks[0]} of {chunks[1]}"
        print(
            f"snapshot {r.snapshot_id}: {total} rows at {r.position} in {r.seconds:.1f}s "
            f"({', '.join(f'{k}={v}' for k, v in r.row_counts.items())}{read})"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="laredo spark")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("baseline", help="parallel consistent baseline into a snapshot")
    b.add_argument("--config", required=True)
    b.add_argument("--partitions", type=int)
    b.add_argument("--master")
    b.add_argument("--chunk-rows", type=int, help=_CHUNK_ROWS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    return baseline(args.config, args.partitions, args.master, args.chunk_rows)


def register(app: Any) -> None:
    """Add ``spark baseline`` to a typer app; other CLI frameworks are left alone."""
    try:
        import typer  # noqa: PLC0415 - lazy: optional; only the `laredo` CLI (laredo-server) brings it
    except ImportError:
        return
    if not isinstance(app, typer.Typer):
        return
    spark_app = typer.Typer(help="Run pipelines on Spark (laredo-spark).")

    @spark_app.command("baseline")
    def _baseline(
        config: str = typer.Option(..., "--config", help="HOCON config file"),
        partitions: int | None = typer.Option(None, "--partitions"),
        master: str | None = typer.Option(None, "--master"),
        chunk_rows: int | None = typer.Option(None, "--chunk-rows", help=_CHUNK_ROWS),
    ) -> None:
        raise typer.Exit(baseline(config, partitions, master, chunk_rows))

    app.add_typer(spark_app, name="spark")


if __name__ == "__main__":
    sys.exit(main())
