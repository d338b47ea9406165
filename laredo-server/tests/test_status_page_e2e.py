"""The status page in Debian's headless Chromium against ``laredo serve`` on real PostgreSQL,
and the metrics of the alert rules and the dashboard on that server's live ``/metrics``.

The browser is the system's ``/usr/bin/chromium`` driven by Playwright (no browser download):
``.ci/run`` installs it, so these tests skip on a developer machine without it and fail in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .opskit import TOKEN, OpsServer, http_status, ops_server, until
from .test_deploy import dashboard_metrics, rule_metrics


def _history_samples(server: OpsServer) -> int:
    """Samples of the server-side history of its busiest source (``/status/history``)."""
    req = urllib.request.Request(
        server.base + "/status/history", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        body = json.loads(r.read())
    return max((len(v) for v in body["sources"].values()), default=0)


pytestmark = [pytest.mark.e2e, pytest.mark.integration]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing: .ci/run installs it")
    pytest.skip(f"{what} not installed")


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package")
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        _missing("chromium (Debian package chromium)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def server(pg_database: Any, tmp_path: Path) -> Iterator[OpsServer]:
    with ops_server(pg_database, tmp_path) as s:
        yield s


def cell(page: Any, row: str, field: str) -> Any:
    return page.locator(f'{row} td[data-field="{field}"]')


def value(page: Any, row: str, field: str) -> float:
    raw = cell(page, row, field).get_attribute("data-value", timeout=5000)
    return float(raw or 0)


def state(page: Any, pipeline: str) -> str:
    loc = page.locator(f'tr[data-pipeline="{pipeline}"] td[data-field="state"] .badge')
    return str(loc.text_content(timeout=5000) or "")


def body(page: Any, name: str) -> str:
    """A ``data-`` attribute of the page's body (the page's CSP forbids Playwright's
    ``wait_for_function``, which evaluates strings)."""
    return str(page.locator("body").get_attribute(f"data-{name}") or "")


def polls(page: Any) -> int:
    return int(body(page, "polls") or 0)


def next_poll(page: Any) -> None:
    """Wait for the page's next refresh."""
    n = polls(page)
    until(lambda: polls(page) > n, 15, "the page to refresh")


def page_state(page: Any, want: str) -> None:
    until(lambda: body(page, "state") == want, 15, f"the page in state {want}")


def test_the_page_shows_streaming_lag_while_paused_errors_and_needs_the_token(
    server: OpsServer, browser: Any, tmp_path: Path
) -> None:
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = ctx.new_page()
    page.goto(server.base + "/?interval=500")

    # reads are protected: without the token the page shows nothing but the reason
    page_state(page, "unauthenticated")
    assert "token" in page.locator("#banner").inner_text().lower()
    assert page.locator("tr[data-pipeline]").count() == 0
    assert http_status(server.base + "/") == 200

    page.fill("#token", TOKEN)
    page.click("#tokenform button[type=submit]")
    page_state(page, "ok")
    assert page.evaluate("sessionStorage.getItem('laredo.token')") == TOKEN

    pipes = sorted(server.states())
    assert len(pipes) == 3
    until(
        lambda: (next_poll(page), all(state(page, p) == "STREAMING" for p in pipes))[1],
        60,
        "every pipeline STREAMING on the page",
    )
    src = 'tr[data-source="pg"]'
    assert value(page, src, "wal_retained") > 0

    # lag rises while the source is paused, and falls after resume (and the next snapshot)
    server.call("PauseSync", {"source_id": "pg"})
    base = value(page, src, "lag_bytes")
    for i in range(5):
        server.db.execute(
            "INSERT INTO accounts SELECT g, 'p' || g || '@x', g "
            f"FROM generate_series({100_000 * (i + 1)}, {100_000 * (i + 1) + 999}) g"
        )
    peak = until(
        lambda: (
            (next_poll(page), value(page, src, "lag_bytes"))[1] > base + 100_000
            and value(page, src, "lag_bytes")
        ),
        30,
        "lag to rise on the page while paused",
    )
    acc = 'tr[data-pipeline="pg:public.accounts:indexed-memory"]'
    until(lambda: state(page, "pg:public.accounts:indexed-memory") == "PAUSED", 15, "PAUSED")
    server.call("ResumeSync", {"source_id": "pg"})
    until(
        lambda: (next_poll(page), value(page, src, "lag_bytes"))[1] < peak / 4,
        60,
        f"lag to fall on the page after resume (peak {peak})",
    )
    # the burst after resume is in the accounts pipeline's changes/s chart
    line = page.locator(f'{acc} td[data-field="spark"] polyline')
    ys = [float(p.split(",")[1]) for p in (line.get_attribute("points") or "").split()]
    assert ys and min(ys) < 16, ys

    # a pipeline whose receiver refuses changes: dead letter, then ERROR
    server.fail_events()
    until(
        lambda: (next_poll(page), state(page, "events-http"))[1] == "ERROR",
        60,
        "the failing pipeline in ERROR on the page",
    )
    bad = 'tr[data-pipeline="events-http"]'
    until(lambda: (next_poll(page), value(page, bad, "dead_letters"))[1] >= 1, 30, "dead letters")
    assert cell(page, bad, "error").inner_text().strip()
    assert state(page, "pg:public.accounts:indexed-memory") == "STREAMING"
    assert page.locator("#snapshots dd[data-field=latest]").inner_text() not in ("", "none yet")

    # with many pipelines, a filter narrows the table
    page.fill("#filter", "error")
    assert page.locator("tr[data-pipeline]:visible").count() == 1
    assert page.locator('tr[data-pipeline="events-http"]').is_visible()
    page.fill("#filter", "")
    assert page.locator("tr[data-pipeline]:visible").count() == 3

    # the last configuration reload and what it changed
    reload = server.drop_orders()
    assert reload["accepted"] and reload["generation"] == "2", reload
    until(
        lambda: (
            (next_poll(page), page.locator("#config dd[data-field=generation]").inner_text())[1]
            == "2"
        ),
        30,
        "generation 2 on the page",
    )
    assert (
        "pipeline_removed pg:public.orders:indexed-memory" in page.locator("#changes").inner_text()
    )
    assert page.locator('tr[data-pipeline="pg:public.orders:indexed-memory"]').count() == 0

    # an incident view: a page opened now shows the server's last hour at once, changes/s per
    # source counted once, positions per pipeline, and says which time zone it uses
    until(lambda: _history_samples(server) > 10, 30, "more than 10 samples of server history")
    late = ctx.new_page()
    late.goto(server.base + "/?interval=500")
    late.fill("#token", TOKEN)
    late.click("#tokenform button[type=submit]")
    page_state(late, "ok")  # charts come only from the server's history, never the page's polls
    samples = late.locator("#total").get_attribute("data-samples")
    assert int(samples or 0) > 10, samples  # history from before the page was opened
    spark = late.locator(f'{acc} td[data-field="spark"] svg')
    assert int(spark.get_attribute("data-samples") or 0) > 10
    assert late.locator("#tz").inner_text() == "all times UTC"
    assert re.search(r"updated \d\d:\d\d:\d\dZ", late.locator("#summary").inner_text())
    applied = cell(late, acc, "applied").inner_text()
    durable = cell(late, acc, "durable").inner_text()
    assert re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", applied) and not re.search(r"/0", applied)
    assert re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", durable), durable
    assert value(late, acc, "durable_lag") >= 0
    assert late.locator("#nofanout").is_visible()  # no fan-out target in this configuration
    # a backfill of one table (issue 32): its progress on the page, done, ETA 0
    assert late.locator("#nobackfill").is_visible()
    server.db.execute("ANALYZE accounts")
    done = server.call(
        "BackfillTable",
        {"schema": "public", "table": "accounts", "chunk_rows": 1000, "wait_seconds": 60},
    )
    assert done["done"], done
    bf = 'tr[data-backfill="pg:public.accounts"]'

    def backfill_done() -> bool:  # a refresh sent while it ran may land after the answer
        next_poll(late)
        return late.locator(bf).count() == 1 and cell(late, bf, "state").inner_text() == "done"

    until(backfill_done, 30, "the backfill row, done")
    assert not late.locator("#nobackfill").is_visible()
    assert cell(late, bf, "rows_read").inner_text() == done["rows_read"]
    assert int(cell(late, bf, "rows_estimated").inner_text()) > 0
    assert cell(late, bf, "progress").inner_text().strip() == "100 %"
    assert cell(late, bf, "eta").inner_text() == "0s"
    server.db.execute("UPDATE accounts SET n = n + 1 WHERE id <= 200")
    until(
        lambda: (next_poll(late), value(late, src, "rate"))[1] > 0,
        30,
        "changes/s of the source on the page",
    )
    # each change once: at every sample, the source's rate is the sum of its tables' (one
    # pipeline per table here; two targets of one table are test_status_page.py's case)
    hist = server.get_json("/status/history")
    pipes = hist["pipelines"]
    for at, rate, *_ in hist["sources"]["pg"]:
        per_pipe = [r for p in pipes.values() for t, r, *_ in p if t == at]
        assert abs(rate - sum(per_pipe)) < 0.01 * max(1.0, rate), (at, rate, per_pipe)

    shot = tmp_path / "status-page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"status page screenshot: {shot}")

    # a new tab of the same session keeps nothing: the token lives in the tab only
    other = browser.new_context().new_page()
    other.goto(server.base + "/")
    page_state(other, "unauthenticated")
    ctx.close()


def _names(text: str) -> set[str]:
    return set(re.findall(r"^([a-z_][a-z0-9_]*)(?:\{| )", text, re.MULTILINE))


def test_every_metric_of_the_rules_and_dashboard_is_exported(server: OpsServer) -> None:
    """Run the engine until each event the rules and panels rely on happened once (a change
    applied, a snapshot, a dead letter, an ERROR), then read the live ``/metrics``."""
    until(lambda: "laredo_snapshot_last_size_bytes" in server.metrics(), 30, "a snapshot")
    server.db.execute("UPDATE accounts SET n = n + 1 WHERE id <= 10")
    server.fail_events()
    until(lambda: server.states().get("events-http") == "PIPELINE_STATE_ERROR", 60, "ERROR")
    wanted = rule_metrics() | dashboard_metrics()
    text = until(lambda: (t := server.metrics()) and wanted <= _names(t) and t, 30, "every metric")
    missing = wanted - _names(text)
    assert not missing, missing
    samples = dict(re.findall(r"^(laredo_source_wal_retained_bytes\{[^}]*\}) (\S+)$", text, re.M))
    assert samples and all(float(v) > 0 for v in samples.values()), samples
    # the PostgreSQL source's own counters (issue 29): no failover, no slot lost here
    for name in ("laredo_source_failovers_total", "laredo_source_slot_lost_total"):
        assert re.search(rf"^{name}\{{source=\"[^\"]+\"\}} 0(\.0)?$", text, re.M), name
    assert re.search(r'^laredo_dead_letter_backlog\{pipeline="events-http".*\} [1-9]', text, re.M)
    assert re.search(
        r'^laredo_pipeline_state\{pipeline="events-http".*state="ERROR"\} 1', text, re.M
    )
