"""The status page at ``/`` and the facts behind it, on a real server runtime (a TestSource,
memory targets, a local snapshot store, a memory dead-letter store): the page, its CSP and
headers; the GetStatus fields it reads; the operator metrics (conformant names)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.errors import ConfigError
from laredo.events import ChangeError, DeadLetterWritten
from laredo.testing import free_port
from laredo.types import ChangeAction, ChangeEvent, ErrorInfo
from laredo_server.config import load_string
from laredo_server.dead_letter_backlog import DeadLetterBacklog
from laredo_server.latest_snapshot import LatestSnapshot
from laredo_server.metrics import PrometheusObserver
from laredo_server.serve import runtime_from_config
from laredo_server.status_page import PAGE_PATHS

from .test_metric_names import lint_name
from .testkit import USERS, Harness, wait_for


def get(h: Harness, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{h.rt.listeners.health_port}{path}", method=method
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def status(h: Harness, token: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(
        f"http://127.0.0.1:{h.rt.listeners.health_port}/laredo.v1.LaredoOAMService/GetStatus",
        data=b"{}",
        headers=headers,
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_the_page_is_served_with_a_csp_that_admits_only_its_own_code(harness: Harness) -> None:
    code, headers, body = get(harness, "/")
    assert code == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    html = body.decode()
    assert "<title>Laredo status</title>" in html
    csp = headers["Content-Security-Policy"]
    for tag in ("script", "style"):
        blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html, re.DOTALL)
        assert len(blocks) == 1
        digest = base64.b64encode(hashlib.sha256(blocks[0].encode()).digest()).decode()
        assert f"{tag}-src 'sha256-{digest}'" in csp
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp and "unsafe" not in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    # self-contained: nothing loaded from elsewhere
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "GetStatus" in html and "sessionStorage" in html and "Bearer " in html
    for path in PAGE_PATHS:
        assert get(harness, path + "/" if path else "/")[0] == 200
    head = get(harness, "/", "HEAD")
    assert head[0] == 200 and head[2] == b"" and int(head[1]["Content-Length"]) == len(body)
    assert get(harness, "/nope")[0] == 404
    assert get(harness, "/static/status.html")[0] == 404


def test_the_page_needs_the_token_exactly_when_get_status_does(tmp_path: Path) -> None:
    for protect, without in ((False, 200), (True, 401)):
        h = Harness(tmp_path / str(protect), token="s3cret", protect_reads=protect).start()
        try:
            assert get(h, "/")[0] == 200  # the page itself holds no data
            assert status(h)[0] == without
            assert status(h, "s3cret")[0] == 200
            assert status(h, "wrong")[0] == 401  # a wrong token is refused, reads open or not
        finally:
            h.stop()


def test_get_status_counts_changes_errors_and_dead_letters(harness: Harness) -> None:
    h = harness
    err = ErrorInfo("boom", "ValueError")
    change = ChangeEvent(USERS, ChangeAction.INSERT, 1, new_values={"id": 99})
    h.dls.write("users", change, err, position="1")
    h.dls.write("users", change, err, position="1")
    # the runtime's one event stream: the metrics count, the status reads their counters
    h.rt.engine.observer.on_event(ChangeError("users", USERS, ChangeAction.INSERT, err))
    for i in range(30, 35):
        h.source.insert(USERS, {"id": i, "name": "n", "email": f"n{i}@x", "team": 1})

    def users() -> dict[str, Any]:
        return next(p for p in status(h)[1]["pipelines"] if p["pipeline_id"] == "users")

    wait_for(lambda: users().get("changes_applied") == "5")
    u = users()
    assert u["change_errors"] == "1" and u["dead_letters"] == "2"
    orders = next(p for p in status(h)[1]["pipelines"] if p["pipeline_id"] == "orders")
    assert "changes_applied" not in orders and "dead_letters" not in orders  # zero
    src = status(h)[1]["sources"][0]
    assert src["wal_retained_bytes"] == "-1"  # a TestSource has no slot
    st = status(h)[1]
    assert "last_reload" not in st  # not started from a configuration file


def test_snapshot_facts_come_from_events_and_from_the_store(harness: Harness) -> None:
    h = harness
    assert h.rt.latest_snapshot.read() is None
    sid = h.rt.engine.create_snapshot()
    snap = status(h)[1]["snapshot_status"]
    assert snap["store_configured"] and snap["last_snapshot_id"] == sid
    assert int(snap["last_snapshot_size_bytes"]) > 0 and int(snap["last_snapshot_at"]) > 0
    # a server started later reads the latest snapshot from the store
    fresh = LatestSnapshot(lambda: h.rt.engine)
    latest = fresh.read()
    assert latest is not None and latest.snapshot_id == sid
    assert latest.size_bytes == int(snap["last_snapshot_size_bytes"])


def test_operator_metrics_are_exported_with_conformant_names(harness: Harness) -> None:
    h = harness
    change = ChangeEvent(USERS, ChangeAction.INSERT, 1, new_values={"id": 99})
    h.dls.write("users", change, ErrorInfo("boom", "ValueError"), position="1")
    h.rt.engine.observer.on_event(
        DeadLetterWritten("users", change, ErrorInfo("boom", "ValueError"))
    )
    h.rt.engine.create_snapshot()
    text = get(h, "/metrics")[2].decode()
    assert re.search(r'^laredo_dead_letter_backlog\{pipeline="users",[^}]*\} 1$', text, re.M)
    assert re.search(r'^laredo_dead_letter_backlog\{pipeline="orders",[^}]*\} 0$', text, re.M)
    age = float(re.findall(r"^laredo_snapshot_age_seconds (\S+)$", text, re.M)[0])
    assert 0 <= age < 30
    assert "laredo_snapshot_last_success_timestamp_seconds " in text
    # no schedule configured: the family is declared, with no sample
    assert "# TYPE laredo_snapshot_schedule_seconds gauge" in text
    assert not re.search(r"^laredo_snapshot_schedule_seconds", text, re.M)
    for name, kind, help_, _labels, _v in h.rt.scrape_metrics.collect():
        assert lint_name(name, kind, help_) == [], name


def _engine_storing_dead_letters(store: Any) -> laredo.Engine:
    """An engine (not started) with one pipeline, ``u``, and ``store`` for its dead letters."""
    src = laredo.testing.TestSource()
    src.add_table(USERS, laredo.testing.columns("id"), [])
    return laredo.Engine(
        sources={"s": src},
        pipelines=[laredo.Pipeline("s", USERS, laredo.target("indexed-memory"), id="u")],
        dead_letter_store=store,
    )


def test_dead_letter_backlog_is_cached_and_refreshed_by_a_write_event(tmp_path: Path) -> None:
    store = laredo.dead_letter_store("memory")
    eng = _engine_storing_dead_letters(store)
    metrics = PrometheusObserver()
    backlog = DeadLetterBacklog(lambda: eng)
    stream = laredo.CompositeObserver(backlog, metrics)
    change = ChangeEvent(USERS, ChangeAction.INSERT, 1, new_values={"id": 1})
    err = ErrorInfo("boom", "ValueError")
    assert backlog.read() == {}
    store.write("u", change, err)
    assert backlog.read() == {}  # cached
    stream.on_event(DeadLetterWritten("u", change, err))
    assert backlog.read() == {"u": 1}
    assert metrics.pipeline_counts("u").dead_letters_written == 1


def test_dead_letter_backlog_counts_without_reading_entries(tmp_path: Path) -> None:
    """The backlog asks the store's ``count``: an entry nobody could decode is still counted."""
    store = laredo.dead_letter_store("local", path=str(tmp_path))
    eng = _engine_storing_dead_letters(store)
    store.write(
        "u", ChangeEvent(USERS, ChangeAction.INSERT, 1, new_values={"id": 1}), ErrorInfo("x")
    )
    with open(store.path_for("u"), "ab") as f:
        f.write(b"written by a newer version\n")
    assert DeadLetterBacklog(lambda: eng).read() == {"u": 2}


PAGE_CONFIG = """
sources {{ src {{ type = quicktest }} }}
tables = [ {{ source = src, schema = public, table = users,
             targets = [ {{ type = indexed-memory }} ] }} ]
grpc {{ port = {grpc} }}
health {{
  port = {health}
  {extra}
}}
"""


@pytest.mark.parametrize("switch", ["", "status_page = true", "status_page = false"])
def test_health_status_page_switches_the_page(quicktest_plugin: None, switch: str) -> None:
    loaded = load_string(
        PAGE_CONFIG.format(grpc=free_port(), health=free_port(), extra=switch), env={}
    )
    assert loaded.model is not None
    rt = runtime_from_config(loaded.model)
    rt.start()
    try:
        base = f"http://127.0.0.1:{rt.listeners.health_port}"

        def code(path: str) -> int:
            try:
                with urllib.request.urlopen(base + path, timeout=10) as r:
                    return int(r.status)
            except urllib.error.HTTPError as e:
                return int(e.code)

        served = switch != "status_page = false"
        for path in ("/", *(p for p in PAGE_PATHS if p)):
            assert code(path) == (200 if served else 404), path
        assert code("/health/live") == 200 and code("/metrics") == 200  # probes stay
        assert status_code(base) == 200  # and GetStatus, which the page would read
    finally:
        rt.stop(grace=10)


def status_code(base: str) -> int:
    req = urllib.request.Request(
        base + "/laredo.v1.LaredoOAMService/GetStatus",
        data=b"{}",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return int(r.status)


def test_a_misspelt_status_page_key_names_the_key(quicktest_plugin: None) -> None:
    text = PAGE_CONFIG.format(grpc=free_port(), health=free_port(), extra="statuspage = false")
    with pytest.raises(ConfigError) as ei:
        load_string(text, env={})
    assert any(p.startswith("health.statuspage: unknown key") for p in ei.value.problems)
    with pytest.raises(ConfigError) as ei:
        load_string(text.replace("statuspage = false", 'status_page = "nope"'), env={})
    assert any(p.startswith("health.status_page:") for p in ei.value.problems), ei.value.problems


@pytest.mark.parametrize(
    ("query", "want"),
    [
        ("", 2000),
        ("interval=5000", 5000),
        ("interval=abc", 2000),
        ("interval=Infinity", 2000),
        ("interval=1", 500),
        ("interval=1e9", 60000),
    ],
)
def test_the_pages_poll_interval_is_clamped_whatever_the_link_says(query: str, want: int) -> None:
    """N9: a crafted ``?interval=`` (NaN, Infinity) made the page poll back-to-back; the page's
    own lines run under node with that query."""
    import shutil
    import subprocess
    from importlib import resources

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    html = resources.files("laredo_server").joinpath("static/status.html").read_text()
    lines = [ln for ln in html.splitlines() if "const asked" in ln or "const INTERVAL" in ln]
    assert len(lines) == 2, lines
    script = f"const params = new URLSearchParams({query!r});\n" + "\n".join(lines)
    out = subprocess.run(
        [node, "-e", script + "\nconsole.log(INTERVAL)"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert int(out.stdout.strip()) == want


def _history_server(tmp_path: Path, **rt_kw: Any) -> Any:
    """A runtime with one table into two targets (two pipelines of one source)."""
    from laredo_server.config import Built
    from laredo_server.runtime import ServerRuntime
    from laredo_server.serve import attach_frontends
    from laredo_target_memory import IndexedTarget

    from .testkit import make_source

    src = make_source()

    def factory(observers: Any, store_override: Any) -> Built:
        eng = laredo.Engine(
            sources={"src": src},
            pipelines=[
                laredo.Pipeline("src", USERS, IndexedTarget(), id="users-a"),
                laredo.Pipeline("src", USERS, IndexedTarget(), id="users-b"),
            ],
            observers=list(observers),
        )
        return Built(eng, None, None, None)

    rt = attach_frontends(ServerRuntime(factory, **rt_kw), grpc_port=None, history_interval=60)
    rt.start()
    assert rt.engine.await_ready(10)
    return rt, src


def _history_of(rt: Any) -> Any:
    from laredo_server.status_history import StatusHistory

    return next(
        f.history for f in rt._frontends if isinstance(getattr(f, "history", None), StatusHistory)
    )


def test_history_counts_each_change_once_per_source_and_stays_bounded(tmp_path: Path) -> None:
    from laredo_server.status_history import StatusHistory

    rt, src = _history_server(tmp_path)
    try:
        history = StatusHistory(rt, interval=10.0, window=50.0)  # five samples kept
        history.sample(1000.0)
        for i in range(30):
            src.insert(USERS, {"id": 500 + i, "name": "n", "email": f"e{i}", "team": 1})
        assert wait_for(
            lambda: all(
                rt.metrics.pipeline_counts(p).changes_applied == 30 for p in ("users-a", "users-b")
            ),
            10,
        )
        history.sample(1010.0)
        out = history.export()
        assert out["time_zone"] == "UTC" and out["window_seconds"] == 50.0
        (_s0, s1) = out["sources"]["src"]
        assert s1[0] == 1010.0 and s1[1] == 3.0  # 30 changes in 10 s, not 60 (two targets)
        for pid in ("users-a", "users-b"):
            assert out["pipelines"][pid][-1][:2] == [1010.0, 3.0]
            assert out["pipelines"][pid][-1][3] > 0  # the buffer's capacity
        for n in range(2, 20):
            history.sample(1000.0 + 10 * n)
        out = history.export()
        assert [p[0] for p in out["sources"]["src"]] == [1150.0, 1160.0, 1170.0, 1180.0, 1190.0]
        assert len(out["pipelines"]["users-a"]) == 5
        assert [p[0] for p in history.export(since=1170.0)["sources"]["src"]] == [1180.0, 1190.0]
    finally:
        rt.stop(grace=5)


def test_history_endpoint_needs_the_token_exactly_when_get_status_does(tmp_path: Path) -> None:
    for protect, without in ((False, 200), (True, 401)):
        rt, _ = _history_server(
            tmp_path / str(protect), admin_token="s3cret", protect_reads=protect
        )
        try:
            _history_of(rt).sample()
            url = f"http://127.0.0.1:{rt.listeners.health_port}/status/history"
            # a presented wrong token is refused whether reads are protected or not
            for token, want in ((None, without), ("s3cret", 200), ("wrong", 401)):
                req = urllib.request.Request(url)
                if token:
                    req.add_header("Authorization", f"Bearer {token}")
                try:
                    with urllib.request.urlopen(req, timeout=10) as r:
                        code, body = r.status, json.loads(r.read())
                except urllib.error.HTTPError as e:
                    code, body = e.code, json.loads(e.read())
                assert code == want, (protect, token, body)
                if code == 200:
                    assert set(body["pipelines"]) == {"users-a", "users-b"}
                    assert body["fanout"] == [] and body["time_zone"] == "UTC"
                else:
                    assert body["code"] == "unauthenticated"
        finally:
            rt.stop(grace=5)


def test_history_shows_fanout_clients_and_journal(tmp_path: Path) -> None:
    """A replication-fanout target with one real client connected: the status page's data
    names the client and the journal's entries and sequences."""
    from laredo_server.config import Built
    from laredo_server.runtime import ServerRuntime
    from laredo_server.serve import attach_frontends
    from laredo_target_fanout import FanOutClient

    from .testkit import make_source

    src = make_source()
    target = laredo.target("replication-fanout", grpc={"port": 0}, heartbeat_interval=0.5)

    def factory(observers: Any, store_override: Any) -> Built:
        eng = laredo.Engine(
            sources={"src": src},
            pipelines=[laredo.Pipeline("src", USERS, target, id="users-fanout")],
            observers=list(observers),
        )
        return Built(eng, None, None, None)

    rt = attach_frontends(ServerRuntime(factory), grpc_port=None, history_interval=60)
    rt.start()
    client = None
    try:
        assert rt.engine.await_ready(10)
        client = FanOutClient(target.address, USERS, client_id="dash-1").start()
        for i in range(5):
            src.insert(USERS, {"id": 700 + i, "name": "n", "email": f"f{i}", "team": 2})
        history = _history_of(rt)
        assert wait_for(
            lambda: (
                (f := history.export()["fanout"])
                and f[0]["clients"]
                and f[0]["journal_entries"] >= 5
            ),
            15,
        )
        (fan,) = history.export()["fanout"]
        assert fan["pipeline_id"] == "users-fanout"
        assert [c["client_id"] for c in fan["clients"]] == ["dash-1"]
        assert fan["current_sequence"] >= fan["oldest_sequence"] > 0
    finally:
        if client is not None:
            client.stop(save=False)
        rt.stop(grace=5)
