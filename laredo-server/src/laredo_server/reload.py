"""Configuration hot reload for ``laredo serve``: ``SIGHUP``, ``laredo config reload`` and the
``ReloadConfig`` RPC all call :meth:`ConfigReloader.reload`.

It re-reads the configuration exactly as at start (the file with its includes, ``conf.d``,
the environment, ``--set``) and validates it. An invalid configuration is rejected with every
problem listed and the running one stays. Otherwise only the difference is applied, all or
nothing (:mod:`laredo.config.reload`): every new or changed pipeline is checked against the
live catalog before anything is torn down, and a step that fails later is undone. Added
pipelines baseline their table, removed ones are drained and stop, changed ones are rebuilt
alone, a changed source restarts alone, everything else is untouched. Sections that cannot
change while running (listeners, snapshots, dead letters, observability) are reported as
needing a restart. Each applied reload increments the
configuration generation (1 at start). Reloads run one at a time.

Every valid reload that is not a dry run re-reads the token files of the running
``grpc.auth`` (``token_file``, ``read_token_file``): a rotated token is in force for gRPC and
the Connect listener once the reload answers, and the old one is refused. An unreadable or
empty file rejects the reload naming the key (never the token); the running tokens stay.
(A changed ``grpc.auth`` block itself needs a restart, like every listener setting.)

The difference is computed against what actually runs: a pipeline that failed to be added by
an earlier reload whose undo failed too is added again by the next one; until then readiness
is false and names it (:meth:`ConfigReloader.configured_pipelines`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from laredo.auth import AuthConfig
from laredo.config import (
    ConfigChange,
    TableConfig,
    TargetConfig,
    apply_reload,
    describe,
    pipeline_id,
    plan_reload,
)
from laredo.errors import ConfigError

from .config import ServerConfig

if TYPE_CHECKING:  # a type only: the runtime does not import this module
    from .runtime import ServerRuntime

logger = logging.getLogger(__name__)

__all__ = ["ConfigReloader", "ReloadResult"]


@dataclass(frozen=True)
class ReloadResult:
    """The answer of one reload."""

    accepted: bool
    generation: int
    changes: tuple[ConfigChange, ...] = ()
    errors: tuple[str, ...] = ()
    message: str = ""
    dry_run: bool = field(default=False)


def _pid(table: TableConfig, target: TargetConfig) -> str:
    return pipeline_id(table, target)


class ConfigReloader:
    """Applies configuration changes to a running server (see the module docstring)."""

    def __init__(
        self,
        rt: ServerRuntime,
        model: ServerConfig,
        load: Callable[[], ServerConfig],
        timeout: float | None = None,
    ) -> None:
        self.rt = rt
        self.model = model
        self.load = load
        self.timeout = timeout
        self.generation = 1
        self.last: ReloadResult | None = None
        self.last_at: float | None = None
        self.missing_cause: str | None = None
        """Why the last reload left configured pipelines not running (None: it did not)."""
        self._lock = threading.Lock()
        self._auth: AuthConfig | None = model.grpc.auth if model.grpc is not None else None
        """The ``grpc.auth`` the listeners started with: its token files are re-read."""

    def reload(self, dry_run: bool = False) -> ReloadResult:
        """Re-read, validate and apply the configuration (see the module docstring). The
        result of one that is not a dry run stays in ``last`` (its time in ``last_at``)."""
        result = self._reload(dry_run)
        if not dry_run:
            self.last, self.last_at = result, time.time()
        return result

    def _reload(self, dry_run: bool) -> ReloadResult:
        with self._lock:
            try:
                new = self.load()
            except ConfigError as exc:
                logger.error(
                    "configuration reload rejected (generation %d keeps running): %s",
                    self.generation,
                    "; ".join(exc.problems),
                )
                return ReloadResult(
                    False,
                    self.generation,
                    errors=tuple(exc.problems),
                    message="invalid configuration; the running one stays",
                    dry_run=dry_run,
                )
            problems = () if dry_run else self._reread_tokens()
            if problems:
                return ReloadResult(
                    False,
                    self.generation,
                    errors=problems,
                    message="token file unusable; the running tokens and configuration stay",
                )
            running = {p.id for p in self.rt.engine.pipelines()}
            effective = self._effective(running)
            plan = plan_reload(effective, new)
            if dry_run or plan.empty:
                what = "dry run: nothing applied" if dry_run else "no changes"
                return ReloadResult(
                    True, self.generation, plan.changes, message=what, dry_run=dry_run
                )
            pending = [c for c in plan.changes if c.kind == "needs_restart"]
            try:
                with self.rt.reloading():
                    applied = apply_reload(self.rt.engine, new, plan, self.timeout, old=effective)
            except ConfigError as exc:
                logger.error(
                    "configuration reload rejected (generation %d keeps running, nothing "
                    "changed): %s",
                    self.generation,
                    "; ".join(exc.problems),
                )
                return ReloadResult(
                    False,
                    self.generation,
                    errors=tuple(exc.problems),
                    message="rejected; nothing changed (the running configuration stays)",
                )
            except Exception as exc:
                self.model = new  # what is missing is added again by the next reload
                self.generation += 1
                self.missing_cause = f"{type(exc).__name__}: {exc}"
                logger.error("configuration reload applied partly: %s", self.missing_cause)
                return ReloadResult(
                    False,
                    self.generation,
                    plan.changes,
                    errors=(self.missing_cause,),
                    message="applied partly; fix the cause and reload again",
                )
            self.model = new
            self.missing_cause = None
            if applied:
                self.generation += 1
            changes = (*applied, *pending)
            logger.info(
                "configuration reloaded (generation %d): %s", self.generation, describe(changes)
            )
            return ReloadResult(True, self.generation, changes, message=describe(changes))

    def _reread_tokens(self) -> tuple[str, ...]:
        """Re-read the token files of the running ``grpc.auth`` into the runtime; the
        problems (naming the key, never a token) when one cannot be used (the old ones stay)."""
        auth = self._auth
        if auth is None or not (auth.token_file or auth.read_token_file):
            return ()
        try:
            admin = auth.resolve("grpc.auth")
        except ConfigError as exc:
            problems = tuple(exc.problems)
        else:
            try:
                read = auth.read.resolve("")
            except ConfigError as exc:  # "token_file: ...": name the read key
                problems = tuple(f"grpc.auth.read_{p}" for p in exc.problems)
            else:
                rt = self.rt
                if (admin, read) != (rt.admin_token, rt.read_token):
                    rt.admin_token, rt.read_token = admin, read
                    logger.info("grpc.auth: token files re-read; the new tokens are in force")
                return ()
        logger.error("token files not re-read (the running tokens stay): %s", "; ".join(problems))
        return problems

    def configured_pipelines(self) -> dict[str, str]:
        """Pipeline id -> table of every pipeline the applied configuration names."""
        return {
            _pid(table, target): f"{table.schema_}.{table.table}"
            for table in self.model.tables
            for target in table.targets
        }

    def _effective(self, running: set[str]) -> ServerConfig:
        """The running configuration, less the pipelines and sources that are not running (a
        source stops with its last pipeline: the next reload starts it again)."""
        model = self.model
        tables = []
        for table in model.tables:
            targets = [t for t in table.targets if _pid(table, t) in running]
            if targets:
                tables.append(table.model_copy(update={"targets": targets}))
        stopped = {t.source for t in model.tables} - set(self.rt.engine.source_ids())
        if (
            not stopped
            and len(tables) == len(model.tables)
            and all(
                len(a.targets) == len(b.targets) for a, b in zip(tables, model.tables, strict=True)
            )
        ):
            return model
        sources = {k: v for k, v in model.sources.items() if k not in stopped}
        return model.model_copy(update={"tables": tables, "sources": sources})

    def reload_in_background(self) -> threading.Thread:
        """Start a reload in a thread (a signal handler must not block)."""
        thread = threading.Thread(target=self.reload, name="laredo-config-reload", daemon=True)
        thread.start()
        return thread
