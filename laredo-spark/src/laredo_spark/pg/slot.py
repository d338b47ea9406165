"""A logical replication slot created with an exported snapshot, held open for the tasks.

Every connection is opened by the PostgreSQL source's own code
(:func:`laredo_source_pg.connect`): its ``connection_provider``, password files and TLS
settings apply here as they do to the local baseline."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from laredo.errors import LaredoError, MissingDependencyError, SourceError
from laredo.secrets import mask_text

try:  # the laredo-spark[postgresql] extra
    import psycopg
    from laredo_source_pg.catalog import connect
    from laredo_source_pg.lsn import format_lsn, parse_lsn
    from psycopg import sql
except ImportError:  # pragma: no cover - depends on the installed extras
    HAVE_PSYCOPG = False
else:
    HAVE_PSYCOPG = True

logger = logging.getLogger(__name__)

__all__ = ["ExportedSnapshot", "drop_slot", "require_psycopg"]


def require_psycopg() -> Any:
    """The psycopg module, or ``MissingDependencyError`` naming the extra."""
    if not HAVE_PSYCOPG:
        raise MissingDependencyError("laredo-spark[postgresql]", "PostgreSQL baselines")
    return psycopg


class ExportedSnapshot:
    """A logical replication slot created with an exported snapshot, kept importable.

    ``with ExportedSnapshot(options, "slot") as snap:`` (``options``: the source's
    ``PostgresSourceOptions``) creates the slot (dropping an inactive slot
    of that name first when ``replace=True``) and holds the replication connection open until
    the block ends; ``snap.snapshot_name`` is what ``SET TRANSACTION SNAPSHOT`` takes and
    ``snap.consistent_point`` (an LSN int) is where the slot's stream starts. The slot itself
    outlives the block unless ``temporary=True``.
    """

    def __init__(
        self, options: Any, slot_name: str, *, temporary: bool = False, replace: bool = True
    ) -> None:
        self.options = options
        self.slot_name = slot_name
        self.temporary = temporary
        self.replace = replace
        self.snapshot_name = ""
        self.consistent_point = 0
        self.created = False
        self._repl: Any = None

    @property
    def position(self) -> str:
        """The consistent point as text (``X/XXXXXXXX``)."""
        return format_lsn(self.consistent_point)

    def __enter__(self) -> ExportedSnapshot:
        pg = require_psycopg()
        if self.replace:
            self._drop_existing()
        try:
            self._repl = connect(self.options, replication=True)
            temp = sql.SQL(" TEMPORARY") if self.temporary else sql.SQL("")
            row = self._repl.execute(
                sql.SQL("CREATE_REPLICATION_SLOT {}{} LOGICAL pgoutput EXPORT_SNAPSHOT").format(
                    sql.Identifier(self.slot_name), temp
                )
            ).fetchone()
        except (pg.Error, LaredoError) as exc:
            self.close()
            raise SourceError(
                f"cannot create replication slot {self.slot_name!r} with an exported snapshot: "
                f"{mask_text(str(exc)).strip()}"
            ) from None
        assert row is not None
        self.created = True
        self.consistent_point = parse_lsn(str(row[1]))
        self.snapshot_name = str(row[2])
        logger.info(
            "created slot %s at %s, exported snapshot %s",
            self.slot_name,
            self.position,
            self.snapshot_name,
        )
        return self

    def _drop_existing(self) -> None:
        require_psycopg()
        with connect(self.options) as conn:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (self.slot_name,)
            ).fetchone()
            if row is None:
                return
            if row[0]:
                raise SourceError(
                    f"replication slot {self.slot_name!r} is in use by another consumer; stop it "
                    "before a Spark baseline re-creates the slot"
                )
            conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot_name,))
            logger.info("dropped existing replication slot %s for a new baseline", self.slot_name)

    def close(self) -> None:
        repl, self._repl = self._repl, None
        if repl is not None:
            with contextlib.suppress(Exception):
                repl.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


def drop_slot(options: Any, slot_name: str) -> None:
    """Drop a replication slot if it exists and is inactive (best effort, logged)."""
    require_psycopg()
    try:
        with connect(options) as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s AND NOT active",
                (slot_name,),
            )
        logger.info("dropped replication slot %s of the failed baseline", slot_name)
    except Exception as exc:
        logger.warning("could not drop replication slot %s: %s", slot_name, exc)
