"""Connection providers (rotating passwords, tokens) and TLS with ``sslmode=verify-full``.

The provider is asked at every connect: a password rotated while the source streams is used
at the next reconnect. TLS is verified against a CA made for the test; a wrong CA or a host the
certificate does not name fails with an error that says what to fix.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.errors import ConfigError, TransientError
from laredo.plugins import registry
from laredo.testing.pki import make_pki
from laredo.testing.recording import RecordingTarget
from laredo.types import TableIdentifier
from laredo_source_pg.catalog import Connections, resolve_conninfo
from laredo_source_pg.credentials import FileProviderOptions, file_provider
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_source_pg.options import PostgresSourceOptions
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import wait_until

USERS = TableIdentifier("public", "users")


def opts(**kw: Any) -> PostgresSourceOptions:
    return PostgresSourceOptions.from_kwargs(**kw)


# -- options and resolution (no server) ---------------------------------------------------------


def test_provider_specs_are_validated_with_the_rest(tmp_path: Path) -> None:
    assert opts(connection="host=x", connection_provider={"type": "env", "variable": "PW"})
    assert opts(connection="host=x", connection_provider="os.path:basename")
    assert opts(connection_provider=lambda c: "host=y")  # connection may come from it
    with pytest.raises(ConfigError) as ei:
        opts(connection="host=x", connection_provider={"type": "env"})
    assert "connection_provider" in str(ei.value) and "variable" in str(ei.value)
    with pytest.raises(ConfigError, match="unknown connection provider type 'vault'"):
        opts(connection="host=x", connection_provider={"type": "vault"})
    with pytest.raises(ConfigError, match="cannot import 'no_such_module:f'"):
        opts(connection="host=x", connection_provider="no_such_module:f")
    with pytest.raises(ConfigError, match="unless connection_provider gives it"):
        opts()
    # in a configuration: the same problems, each at its key
    entry = registry("source")
    with pytest.raises(ConfigError) as ei:
        entry.validate(
            "postgresql",
            {"connection": "host=x", "connection_provider": {"type": "file", "pat": "/x"}},
        )
    assert "connection_provider" in "\n".join(ei.value.problems)


def test_resolution_merges_parameters_and_never_shows_secrets(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("s3cret-1\n")
    provider = file_provider(FileProviderOptions(path=str(pw)))
    got = resolve_conninfo("host=db user=app", provider, "t")
    assert "password=s3cret-1" in got and "host=db" in got
    pw.write_text("s3cret-2")  # rotated: read again at the next connect
    assert "password=s3cret-2" in resolve_conninfo("host=db user=app", provider, "t")
    whole = file_provider(FileProviderOptions(path=str(pw), field="connection"))
    assert resolve_conninfo("host=ignored", whole, "t") == "s3cret-2"

    def failing(_c: str) -> str:
        raise RuntimeError("vault said no for postgresql://u:hunter2@db/app")

    with pytest.raises(TransientError) as ei:
        resolve_conninfo("host=db", failing, "pg")
    assert "connection provider failed" in str(ei.value) and "hunter2" not in str(ei.value)
    pw.unlink()
    with pytest.raises(TransientError, match="cannot read"):
        resolve_conninfo("host=db", provider, "pg")
    with pytest.raises(TransientError, match="returned a int"):
        resolve_conninfo("host=db", lambda c: 1, "pg")  # type: ignore[arg-type, return-value]


def test_env_provider_reads_the_variable_at_every_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    src = opts(connection="host=db", connection_provider={"type": "env", "variable": "T_PW"})
    conns = Connections(src)
    monkeypatch.setenv("T_PW", "a")
    assert "password=a" in resolve_conninfo(conns.dsn, conns.provider, "t")
    monkeypatch.setenv("T_PW", "b")
    assert "password=b" in resolve_conninfo(conns.dsn, conns.provider, "t")
    monkeypatch.delenv("T_PW")
    with pytest.raises(TransientError, match="T_PW is not set"):
        resolve_conninfo(conns.dsn, conns.provider, "t")


# -- a password rotated between reconnects ------------------------------------------------------


@pytest.fixture
def password_cluster(pg_cluster: EmbeddedPostgres) -> Iterator[EmbeddedPostgres]:
    """A cluster of its own where the role ``app`` must give its password over TCP."""
    with EmbeddedPostgres() as pg:
        pg.execute("CREATE ROLE app LOGIN REPLICATION SUPERUSER PASSWORD 'first-pw'")
        pg.execute("CREATE DATABASE app OWNER app")
        pg.execute("CREATE TABLE users (id int PRIMARY KEY, name text)", "app")
        pg.execute("INSERT INTO users SELECT g, 'u' || g FROM generate_series(1, 3) g", "app")
        assert pg.data_dir is not None
        hba = pg.data_dir / "pg_hba.conf"
        hba.write_text(
            "local all all trust\n"
            "host all app 127.0.0.1/32 scram-sha-256\n"
            "host replication app 127.0.0.1/32 scram-sha-256\n"
            "host all all 127.0.0.1/32 trust\n"
            "host replication all 127.0.0.1/32 trust\n"
        )
        pg.execute("SELECT pg_reload_conf()")
        yield pg


class CountingProvider:
    """The built-in ``file`` provider, counting the connects that asked it."""

    def __init__(self, path: Path) -> None:
        self.inner = file_provider(FileProviderOptions(path=str(path)))
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, conninfo: str) -> Any:
        with self.lock:
            self.calls += 1
        return self.inner(conninfo)


@pytest.mark.integration
def test_the_provider_is_asked_again_at_each_reconnect_so_a_rotated_password_works(
    password_cluster: EmbeddedPostgres, tmp_path: Path
) -> None:
    pg = password_cluster
    pw = tmp_path / "pg-password"
    pw.write_text("first-pw\n")
    provider = CountingProvider(pw)
    dsn = f"host=127.0.0.1 port={pg.port} user=app dbname=app"
    with pytest.raises(TransientError, match="password authentication failed"):
        Connections(opts(connection=dsn + " password=wrong")).connect()
    src = PostgresSource(
        connection=dsn,
        connection_provider=provider,
        slot_mode="stateful",
        slot_name="rotating",
        reconnect={"initial_backoff": 0.05, "max_backoff": 0.2, "max_attempts": 50},
    )
    target = RecordingTarget(durable=True)
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", USERS, target)])
    eng.start()
    try:
        assert eng.await_ready(30)
        pg.execute("INSERT INTO users VALUES (10, 'before')", "app")
        wait_until(lambda: any(r.get("id") == 10 for r in target.rows()), 20, what="row 10")
        before = provider.calls
        # rotate: the database takes only the new password, the secret file holds it, and
        # every connection of the source is cut
        pw.write_text("second-pw\n")
        pg.execute("ALTER ROLE app PASSWORD 'second-pw'")
        pg.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE usename = 'app' AND pid <> pg_backend_pid()"
        )
        pg.execute("INSERT INTO users VALUES (11, 'after')", "app")
        wait_until(lambda: any(r.get("id") == 11 for r in target.rows()), 30, what="row 11")
        assert provider.calls > before  # reconnected, asking the provider again
        assert "first-pw" not in repr(src) and "second-pw" not in repr(src)
    finally:
        eng.stop()
        # the walsender may hold the slot a moment after the engine stopped
        wait_until(
            lambda: (
                not pg.execute(
                    "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'rotating' AND active"
                )
            ),
            30,
            "the slot 'rotating' released",
        )
        pg.execute("SELECT pg_drop_replication_slot('rotating')")


# -- TLS -------------------------------------------------------------------------------------


@pytest.fixture
def tls_cluster(
    pg_cluster: EmbeddedPostgres, tmp_path: Path
) -> Iterator[tuple[EmbeddedPostgres, Path]]:
    """A cluster with ``ssl = on`` and a certificate for 127.0.0.1 signed by a test CA; yields
    it and the CA's PEM file."""
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki", server_names=("127.0.0.1",))  # not for ``localhost``
    with EmbeddedPostgres() as pg:
        assert pg.data_dir is not None
        crt, kf = pg.data_dir / "server.crt", pg.data_dir / "server.key"
        shutil.copyfile(pki.server_cert, crt)
        shutil.copyfile(pki.server_key, kf)
        os.chmod(kf, 0o600)
        if os.geteuid() == 0:  # the server runs as postgres and must own its key
            for f in (crt, kf):
                shutil.chown(f, user="postgres", group="postgres")
        pg.execute("ALTER SYSTEM SET ssl = on")
        pg.execute("SELECT pg_reload_conf()")
        pg.execute("CREATE TABLE users (id int PRIMARY KEY, name text)")
        pg.execute("INSERT INTO users VALUES (1, 'a'), (2, 'b')")
        yield pg, pki.ca


@pytest.mark.integration
def test_verify_full_against_a_local_ca_and_clear_errors_when_it_does_not_verify(
    tls_cluster: tuple[EmbeddedPostgres, Path], tmp_path: Path
) -> None:
    pg, ca_file = tls_cluster
    base = pg.dsn("postgres")
    verified = f"{base} sslmode=verify-full sslrootcert={ca_file}"
    with Connections(opts(connection=verified)).connect() as conn:
        assert conn.execute(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ).fetchone() == (True,)
    # the whole source over TLS: baseline on the query connection, changes on the replication one
    src = PostgresSource(connection=verified, slot_name="tls_slot")
    target = RecordingTarget(durable=True)
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", USERS, target)])
    eng.start()
    try:
        assert eng.await_ready(30)
        pg.execute("INSERT INTO users VALUES (3, 'c')")
        wait_until(lambda: len(target.rows()) == 3, 20, what="the change over TLS")
        ssl_sessions = pg.execute(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
            "WHERE s.ssl AND a.application_name = 'laredo:tls_slot'"
        )
        assert ssl_sessions[0][0] >= 2  # query and replication connections
    finally:
        eng.stop()
    # a CA that did not sign the server's certificate
    (tmp_path / "other").mkdir()
    wrong = make_pki(tmp_path / "other", ca_name="someone else's CA").ca
    with pytest.raises(TransientError) as ei:
        Connections(opts(connection=f"{base} sslmode=verify-full sslrootcert={wrong}")).connect()
    msg = str(ei.value)
    assert "certificate verify failed" in msg
    assert f"not signed by a CA in sslrootcert={wrong}" in msg
    # the right CA, but a host name the certificate does not list
    with pytest.raises(TransientError) as ei:
        Connections(opts(connection=verified.replace("host=127.0.0.1", "host=localhost"))).connect()
    assert "does not match host name" in str(ei.value)
    assert "use that name, or sslmode=verify-ca" in str(ei.value)
