"""HttpSyncTarget against a real HTTP server on 127.0.0.1 (see conftest.py)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import laredo
import pytest
from laredo import ChangeAction, ChangeEvent, ColumnDefinition
from laredo.errors import BatchApplyError
from laredo_target_http import HttpSyncError, HttpSyncTarget, decode_change, decode_row

T = laredo.Table("public", "users")
COLUMNS = [
    ColumnDefinition("id", "int4", 1, nullable=False, primary_key=True, primary_key_ordinal=1),
    ColumnDefinition("name", "text", 2),
    ColumnDefinition("price", "numeric", 3),
]


def ins(pos: Any, key: int, **extra: Any) -> ChangeEvent:
    return ChangeEvent(T, ChangeAction.INSERT, pos, new_values={"id": key, **extra}, xid=7)


def upd(pos: Any, key: int, **extra: Any) -> ChangeEvent:
    return ChangeEvent(
        T, ChangeAction.UPDATE, pos, new_values={"id": key, **extra}, old_values={"id": key}
    )


def dele(pos: Any, key: int) -> ChangeEvent:
    return ChangeEvent(T, ChangeAction.DELETE, pos, old_values={"id": key})


def trunc(pos: Any) -> ChangeEvent:
    return ChangeEvent(T, ChangeAction.TRUNCATE, pos)


@pytest.fixture
def make_target(receiver: Any) -> Iterator[Callable[..., HttpSyncTarget]]:
    made: list[HttpSyncTarget] = []

    def make(**options: Any) -> HttpSyncTarget:
        options.setdefault("base_url", receiver.url)
        options.setdefault("flush_interval", 0)
        options.setdefault("retry_backoff", "1ms")
        options.setdefault("timeout", 5)
        t = HttpSyncTarget(**options)
        t.on_init(T, COLUMNS)
        made.append(t)
        return t

    yield make
    for t in made:
        t.on_close(T)


def keys(changes: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(c["action"], (c["new"] or c["old"] or {}).get("id")) for c in changes]


# -- baseline ----------------------------------------------------------------------------------


def test_baseline_start_batches_complete(receiver: Any, make_target: Any) -> None:
    t = make_target(batch_size=2)
    rows = [{"id": i, "name": f"u{i}", "price": Decimal(f"{i}.10")} for i in range(3)]
    t.on_baseline_row(T, rows[0])
    t.on_baseline_row(T, rows[1])  # batch of 2 goes now
    assert [r.path for r in receiver.all_requests()] == ["/baseline/start", "/baseline/batch"]
    t.on_baseline_row(T, rows[2])
    t.on_baseline_complete(T)  # the last row, then complete
    reqs = receiver.all_requests()
    assert [r.path for r in reqs] == [
        "/baseline/start",
        "/baseline/batch",
        "/baseline/batch",
        "/baseline/complete",
    ]
    start = reqs[0].body
    assert start["table"] == "public.users"
    assert start["primary_key"] == ["id"]
    assert start["encoding"] == "laredo-json/1"
    assert [c["name"] for c in start["columns"]] == ["id", "name", "price"]
    assert start["columns"][0]["nullable"] is False and start["columns"][2]["type"] == "numeric"
    assert [len(r.body["rows"]) for r in reqs[1:3]] == [2, 1]
    got = [decode_row(row) for r in reqs[1:3] for row in r.body["rows"]]
    assert got == rows
    assert reqs[3].body == {"table": "public.users", "row_count": 3}


def test_baseline_rows_fast_path_and_empty_table(receiver: Any, make_target: Any) -> None:
    t = make_target(batch_size=4)
    t.on_baseline_rows(T, [{"id": i} for i in range(10)])
    t.on_baseline_complete(T)
    paths = [r.path for r in receiver.all_requests()]
    assert paths == ["/baseline/start"] + ["/baseline/batch"] * 3 + ["/baseline/complete"]
    assert receiver.all_requests("/baseline/complete")[0].body["row_count"] == 10

    empty = make_target()
    receiver.requests.clear()
    empty.on_baseline_complete(T)
    assert [r.path for r in receiver.all_requests()] == ["/baseline/start", "/baseline/complete"]
    assert receiver.all_requests()[1].body["row_count"] == 0


def test_resumed_pipeline_sends_no_baseline(receiver: Any, make_target: Any) -> None:
    t = make_target()
    t.apply(T, [ins(1, 1)])
    t.flush()
    assert [r.path for r in receiver.all_requests()] == ["/changes"]


def test_baseline_failure_leaves_no_rows_of_the_failed_call(
    receiver: Any, make_target: Any
) -> None:
    t = make_target(batch_size=2, retry_count=0)
    t.on_baseline_row(T, {"id": 1})  # start goes out, row buffered
    receiver.script(500)
    with pytest.raises(HttpSyncError):
        t.on_baseline_row(T, {"id": 2})
    t.on_baseline_row(T, {"id": 2})  # the engine retries the row: no duplicate
    t.on_baseline_complete(T)
    rows = [row["id"] for r in receiver.ok_requests("/baseline/batch") for row in r.body["rows"]]
    assert rows == [1, 2]


# -- change batching ---------------------------------------------------------------------------


def test_changes_flush_at_batch_size_and_rest_on_close(receiver: Any, make_target: Any) -> None:
    t = make_target(batch_size=3)
    t.apply(T, [ins(1, 1), ins(2, 2)])
    assert receiver.all_requests() == []
    t.apply(T, [upd(3, 1, name="x")])
    assert len(receiver.all_requests("/changes")) == 1
    t.apply(T, [dele(4, 2), ins(5, 3)])
    assert t.pending_changes() == 2
    t.on_close(T)
    batches = [r.body["changes"] for r in receiver.all_requests("/changes")]
    assert [keys(b) for b in batches] == [
        [("INSERT", 1), ("INSERT", 2), ("UPDATE", 1)],
        [("DELETE", 2), ("INSERT", 3)],
    ]
    assert t.pending_changes() == 0


def test_large_apply_is_split_into_batches(receiver: Any, make_target: Any) -> None:
    t = make_target(batch_size=100)
    t.apply(T, [ins(i, i) for i in range(1050)])  # complete: all sent, 100 per request
    assert [len(r.body["changes"]) for r in receiver.all_requests("/changes")] == [100] * 10 + [50]
    t.flush()
    assert [c["new"]["id"] for c in receiver.changes()] == list(range(1050))


def test_changes_flush_by_interval(receiver: Any, make_target: Any, wait_for: Any) -> None:
    t = make_target(batch_size=100, flush_interval="50ms")
    t.apply(T, [ins(1, 1), ins(2, 2)])
    wait_for(lambda: receiver.ok_requests("/changes"), what="the timed flush")
    assert keys(receiver.changes()) == [("INSERT", 1), ("INSERT", 2)]
    t.apply(T, [ins(3, 3)])  # the flusher wakes again for a new buffer
    wait_for(lambda: len(receiver.changes()) == 3, what="the second timed flush")
    # the receiver records the body before the target reads its reply and empties the buffer
    wait_for(lambda: t.pending_changes() == 0, what="the buffer emptied by the reply")


def test_truncate_is_sent_in_a_request_of_its_own(receiver: Any, make_target: Any) -> None:
    t = make_target(batch_size=10)
    t.apply(T, [ins(1, 1), ins(2, 2), trunc(3), ins(4, 4)])
    assert t.pending_changes() == 4  # fewer than batch_size complete changes: they wait
    t.flush()
    batches = [keys(r.body["changes"]) for r in receiver.all_requests("/changes")]
    assert batches == [[("INSERT", 1), ("INSERT", 2)], [("TRUNCATE", None)], [("INSERT", 4)]]
    assert t.pending_changes() == 0


def test_change_body_fields(receiver: Any, make_target: Any) -> None:
    t = make_target(position_formatter=lambda p: f"0/{p:X}")
    ts = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
    ev = ChangeEvent(
        T,
        ChangeAction.UPDATE,
        255,
        timestamp=ts,
        new_values={"id": 1, "price": Decimal("2.50")},
        old_values={"id": 1},
        xid=991,
        commit_timestamp=ts,
        unchanged_toast=frozenset({"bio", "avatar"}),
    )
    t.apply(T, [ev])
    t.flush()
    (req,) = receiver.all_requests("/changes")
    assert req.body["table"] == "public.users"
    (raw,) = req.body["changes"]
    assert raw == {
        "action": "UPDATE",
        "table": "public.users",
        "position": "0/FF",
        "xid": 991,
        "timestamp": "2024-03-01T10:00:00+00:00",
        "commit_timestamp": "2024-03-01T10:00:00+00:00",
        "new": {"id": 1, "price": {"$type": "decimal", "value": "2.50"}},
        "old": {"id": 1},
        "unchanged": ["avatar", "bio"],
    }
    change = decode_change(raw)
    assert change["new"] == {"id": 1, "price": Decimal("2.50")}
    assert change["timestamp"] == ts


def test_per_change_methods_use_the_set_position(receiver: Any, make_target: Any) -> None:
    t = make_target()
    t.set_change_position("0/10")
    t.on_insert(T, {"id": 1, "name": "a"})
    t.on_update(T, {"id": 1, "name": "b"}, {"id": 1})
    t.set_change_position("0/20")
    t.on_delete(T, {"id": 1})
    t.on_truncate(T)
    t.flush()  # 0/20 is written, but not known complete (partial)
    got = [(c["action"], c["position"], c["new"], c["old"]) for c in receiver.changes()]
    assert got == [
        ("INSERT", "0/10", {"id": 1, "name": "a"}, None),
        ("UPDATE", "0/10", {"id": 1, "name": "b"}, {"id": 1}),
        ("DELETE", "0/20", None, {"id": 1}),
        ("TRUNCATE", "0/20", None, None),
    ]
    assert t.durable_position() == "0/10"  # 0/20 may still get more changes
    t.set_change_position("0/30")  # e.g. a heartbeat: 0/20 is complete
    assert t.durable_position() == "0/20"


def test_unencodable_value_names_the_column(receiver: Any, make_target: Any) -> None:
    t = make_target()
    with pytest.raises(laredo.TargetError, match=r"public\.users.*INSERT.*'tags'.*set"):
        t.apply(T, [ins(1, 1), ins(2, 2, tags={"a"})])
    assert t.pending_changes() == 0


# -- retries, errors, timeouts -------------------------------------------------------------------


def test_retry_then_success(receiver: Any, make_target: Any) -> None:
    t = make_target(batch_size=2, retry_count=3)
    receiver.script(500, 502)
    t.apply(T, [ins(1, 1), ins(2, 2)])
    statuses = [r.status for r in receiver.all_requests("/changes")]
    assert statuses == [500, 502, 200]
    assert t.stats()["retries"] == 2
    t.set_change_position(3)
    assert t.durable_position() == 2


def test_retries_exhausted_then_recovery(receiver: Any, make_target: Any) -> None:
    t = make_target(batch_size=2, retry_count=2)
    t.apply(T, [ins(1, 1), ins(2, 2), ins(3, 3)])  # [1,2] and [3] delivered
    assert t.durable_position() == 3
    t.apply(T, [ins(4, 4)])  # one complete change waits for a second one
    receiver.script(503, 503, 503)
    with pytest.raises(HttpSyncError, match="after 3 attempt") as info:
        t.apply(T, [ins(5, 5)])
    assert info.value.transient and info.value.status == 503
    assert isinstance(info.value, laredo.TargetError)
    assert t.durable_position() == 3
    assert t.pending_changes() == 1  # change 4 (earlier call) stays; 5 was rolled back
    t.apply(T, [ins(5, 5)])  # the engine retries the call
    assert t.durable_position() == 5
    assert [c["new"]["id"] for c in receiver.changes()] == [1, 2, 3, 4, 5]


def test_partly_delivered_call_reports_how_far_it_got(receiver: Any, make_target: Any) -> None:
    t = make_target(batch_size=2, retry_count=0)
    receiver.script(200, 500)
    with pytest.raises(BatchApplyError) as info:
        t.apply(T, [ins(1, 1), ins(2, 2), ins(3, 3), ins(4, 4), ins(5, 5)])
    assert info.value.index == 2  # events[:2] were delivered; the engine resumes at #2
    assert isinstance(info.value.__cause__, HttpSyncError)
    assert t.pending_changes() == 0  # 3, 4 and 5 were taken back
    for ev in [ins(3, 3), ins(4, 4), ins(5, 5)]:  # what the engine then does
        t.set_change_position(ev.position)
        t.on_insert(T, ev.new_values or {})
    t.flush()
    assert [c["new"]["id"] for c in receiver.changes()] == [1, 2, 3, 4, 5]


def test_timeout_is_an_error_and_not_durable(receiver: Any, make_target: Any) -> None:
    t = make_target(timeout="100ms", retry_count=0)
    receiver.script(receiver.reply(200, delay=0.5))
    t.apply(T, [ins(1, 1)])
    with pytest.raises(HttpSyncError, match=r"\(timeout\)") as info:
        t.flush()
    assert info.value.transient
    assert t.durable_position() is None
    assert t.pending_changes() == 1


def test_connection_refused_is_retried_then_fails(receiver: Any, make_target: Any) -> None:
    t = make_target(retry_count=2)
    receiver.stop()
    t.apply(T, [ins(1, 1)])
    with pytest.raises(HttpSyncError, match="connection error"):
        t.flush()
    assert t.stats()["retries"] == 2
    receiver.start()  # same port again
    t.flush()
    assert keys(receiver.changes()) == [("INSERT", 1)]


@pytest.mark.parametrize("status", [400, 401, 404, 409, 422])
def test_non_retryable_4xx_is_terminal(receiver: Any, make_target: Any, status: int) -> None:
    t = make_target(retry_count=5)
    receiver.script(receiver.reply(status, headers={"Retry-After": "0"}))
    t.apply(T, [ins(1, 1)])
    with pytest.raises(HttpSyncError, match=f"rejected with HTTP {status}") as info:
        t.flush()
    assert not info.value.transient
    assert info.value.status == status
    assert len(receiver.all_requests()) == 1
    assert t.durable_position() is None


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_retryable_statuses(receiver: Any, make_target: Any, status: int) -> None:
    t = make_target(retry_count=1)
    receiver.script(status)
    t.apply(T, [ins(1, 1)])
    t.flush()
    assert [r.status for r in receiver.all_requests()] == [status, 200]


def test_retry_after_is_honoured(receiver: Any, make_target: Any) -> None:
    t = make_target(retry_count=1, retry_backoff="1ms")
    receiver.script(receiver.reply(429, headers={"Retry-After": "1"}))
    t.apply(T, [ins(1, 1)])
    t.flush()
    first, second = receiver.all_requests()
    assert (first.status, second.status) == (429, 200)
    # The backoff alone would be 1 ms; the server asked for 1 s.
    assert second.at - first.at >= 0.9


def test_retry_after_is_capped(receiver: Any, make_target: Any) -> None:
    t = make_target(retry_count=1, retry_backoff="1ms", retry_after_max="10ms")
    receiver.script(receiver.reply(503, headers={"Retry-After": "3600"}))
    t.apply(T, [ins(1, 1)])
    t.flush()  # would hang for an hour without the cap (pytest-timeout stops it)
    assert [r.status for r in receiver.all_requests()] == [503, 200]


def test_background_flush_error_surfaces_on_next_call(
    receiver: Any, make_target: Any, wait_for: Any
) -> None:
    t = make_target(flush_interval="20ms", retry_count=0)
    receiver.script(400, 400)
    t.apply(T, [ins(1, 1)])
    wait_for(lambda: receiver.all_requests("/changes"), what="the failed timed flush")
    wait_for(lambda: t._error is not None, what="the pending error")
    # The next call first re-sends the buffer; the receiver refuses again: the call fails.
    with pytest.raises(HttpSyncError, match="HTTP 400"):
        t.apply(T, [ins(2, 2)])
    t.apply(T, [ins(2, 2)])  # the engine retries: the failed batch goes again, once
    wait_for(lambda: len(receiver.changes()) == 2, what="both changes")
    assert [c["new"]["id"] for c in receiver.changes()] == [1, 2]


def test_a_receiver_that_keeps_refusing_fails_every_call(
    receiver: Any, make_target: Any, wait_for: Any
) -> None:
    t = make_target(flush_interval="10ms", retry_count=0, batch_size=1000)
    receiver.default = receiver.reply(422)
    t.apply(T, [ins(1, 1)])
    wait_for(lambda: t._error is not None, what="the timed flush to fail")
    for key in range(2, 5):
        with pytest.raises(HttpSyncError, match="HTTP 422") as info:
            t.apply(T, [ins(key, key)])
        assert "at position 1" in str(info.value)
        assert not info.value.transient
        wait_for(lambda: t._error is not None, what="the timed flush to fail again")
    assert t.pending_changes() == 1  # nothing piles up behind the refused batch


# -- headers and connection reuse ----------------------------------------------------------------


def test_auth_and_custom_headers_on_every_request(receiver: Any, make_target: Any) -> None:
    t = make_target(
        batch_size=1,
        auth_header="Bearer s3cret",
        headers={"X-Tenant": "acme", "authorization": "overridden"},
    )
    assert "s3cret" not in repr(t) and "s3cret" not in repr(t.options)
    t.on_baseline_row(T, {"id": 1})
    t.on_baseline_complete(T)
    t.apply(T, [ins(1, 1)])
    reqs = receiver.all_requests()
    assert len(reqs) == 4
    for r in reqs:
        hdrs = {k.lower(): v for k, v in r.headers.items()}
        assert hdrs["authorization"] == "Bearer s3cret"
        assert hdrs["x-tenant"] == "acme"
        assert hdrs["content-type"] == "application/json"
        assert hdrs["x-laredo-encoding"] == "laredo-json/1"


def test_https_with_a_trusted_certificate(tls_receiver: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", tls_receiver.cert_file)
    t = HttpSyncTarget(tls_receiver.url, flush_interval=0, auth_header="Bearer tls")
    try:
        t.apply(T, [ins(1, 1)])
        t.flush()
    finally:
        t.on_close(T)
    assert keys(tls_receiver.changes()) == [("INSERT", 1)]
    assert tls_receiver.all_requests()[0].headers["Authorization"] == "Bearer tls"


def test_https_with_an_untrusted_certificate_is_terminal(tls_receiver: Any) -> None:
    t = HttpSyncTarget(tls_receiver.url, flush_interval=0, retry_count=5, retry_backoff="1ms")
    try:
        t.apply(T, [ins(1, 1)])
        with pytest.raises(HttpSyncError, match=r"certificate verification failed.*SSL_CERT_FILE"):
            t.flush()
    finally:
        t.on_close(T)
    assert tls_receiver.all_requests() == []
    assert t.stats()["retries"] == 0


def test_one_kept_alive_connection(receiver: Any, make_target: Any) -> None:
    t = make_target(batch_size=1)
    t.apply(T, [ins(i, i) for i in range(5)])
    assert len({r.client for r in receiver.all_requests()}) == 1


def test_server_closing_an_idle_connection_costs_no_attempt(
    receiver: Any, make_target: Any, wait_for: Any
) -> None:
    t = make_target(batch_size=1, retry_count=0)
    t.apply(T, [ins(1, 1)])
    receiver.drop_connections()
    wait_for(lambda: not receiver._conns, what="the server to drop the connection")
    t.apply(T, [ins(2, 2)])  # retry_count=0, yet no error: reconnects once
    assert [c["new"]["id"] for c in receiver.changes()] == [1, 2]


# -- durability and ordering ---------------------------------------------------------------------


def test_durable_position_is_exact(receiver: Any, make_target: Any) -> None:
    t = make_target(batch_size=2)
    assert t.durable_position() is None
    t.apply(T, [ins(10, 1), ins(10, 2), ins(10, 3)], complete=False)  # a transaction at 10
    assert receiver.changes() == []  # whole transactions only: nothing is complete yet
    t.apply(T, [], complete=True)  # the engine: 10 ended
    assert len(receiver.changes()) == 3  # [10, 10] and [10]
    assert t.durable_position() == 10
    t.apply(T, [ins(20, 4), ins(20, 5)], complete=False)
    t.flush()  # everything delivered, but more changes of 20 could still come
    assert t.durable_position() == 10
    t.set_change_position(30)  # the engine moved on: 20 is complete (and was all delivered)
    assert t.durable_position() == 20
    receiver.script(500, 500)  # the batch [30, 40] needs three attempts
    t.apply(T, [ins(30, 6), ins(40, 7), ins(50, 8)], complete=False)
    assert t.durable_position() == 40  # 50 is still buffered


def test_transaction_split_by_a_batch_is_not_durable_halfway(
    receiver: Any, make_target: Any
) -> None:
    t = make_target(batch_size=2, retry_count=0)
    # A transaction of three changes at 10: the request [10, 10] goes, [10] fails. Position 10
    # is complete but not all delivered, so it is not durable yet.
    receiver.script(200, 500)  # [10, 10] is delivered, [10] is not
    with pytest.raises(BatchApplyError):
        t.apply(T, [ins(10, 1), ins(10, 2), ins(10, 3)], complete=True)
    assert len(receiver.changes()) == 2
    assert t.durable_position() is None
    t.apply(T, [ins(10, 3)], complete=True)  # the engine retries from the failed change
    assert t.durable_position() is None  # one complete change waits for batch_size (2)
    t.flush()
    assert t.durable_position() == 10


def test_durable_position_never_ahead_of_the_receiver(receiver: Any, make_target: Any) -> None:
    t = make_target(batch_size=2, retry_count=0)
    t.apply(T, [ins(1, 1), ins(2, 2)])
    assert t.durable_position() == 2
    receiver.script(500)
    t.apply(T, [ins(3, 3)])
    with pytest.raises(HttpSyncError):
        t.apply(T, [ins(4, 4)])  # batch [3, 4] failed
    assert t.durable_position() == 2
    with pytest.raises(HttpSyncError):
        receiver.script(500)
        t.flush()
    assert t.durable_position() == 2
    t.flush()
    assert t.durable_position() == 3  # 4 was rolled back with its failed call


def test_long_mixed_sequence_keeps_order(receiver: Any, make_target: Any, wait_for: Any) -> None:
    rng = random.Random(7)
    t = make_target(batch_size=7, flush_interval="5ms", retry_count=10)
    # Occasional 503s force retries of batches in the middle of the stream.
    receiver.script(*[receiver.reply(503 if rng.random() < 0.1 else 200) for _ in range(200)])
    expected: list[tuple[str, Any]] = []
    events: list[ChangeEvent] = []
    pos = 0
    for _ in range(1500):
        if rng.random() < 0.4:
            pos += 1  # a new transaction
        roll = rng.random()
        key = rng.randrange(50)
        if roll < 0.01:
            ev = trunc(pos)
        elif roll < 0.5:
            ev = ins(pos, key, name="n" * rng.randrange(5), price=Decimal(key) / 8)
        elif roll < 0.8:
            ev = upd(pos, key, name="u")
        else:
            ev = dele(pos, key)
        events.append(ev)
    i = 0
    while i < len(events):
        n = rng.randrange(1, 30)
        chunk = events[i : i + n]
        t.apply(T, chunk, complete=False)  # a chunk may end inside a transaction
        i += n
        expected.extend((str(e.action), e.position) for e in chunk)
        durable = t.durable_position()
        if durable is not None:
            # Every change at or before the durable position has been accepted.
            delivered = [(c["action"], int(c["position"])) for c in receiver.changes()]
            want = [(a, p) for a, p in expected if p <= durable]
            assert delivered[: len(want)] == want
    t.flush()
    got = [(c["action"], int(c["position"])) for c in receiver.changes()]
    assert got == expected
    decoded = [decode_change(c) for c in receiver.changes()]
    want_rows = [e.new_values for e in events]
    assert [d["new"] for d in decoded] == want_rows


def test_close_is_best_effort_and_leaves_the_rest_not_durable(
    receiver: Any, make_target: Any, caplog: Any
) -> None:
    t = make_target(batch_size=10, retry_count=1_000_000, retry_backoff=5)
    t.apply(T, [ins(1, 1)])
    t.flush()
    assert t.durable_position() == 1
    t.apply(T, [ins(2, 2), ins(3, 3)])
    receiver.stop()
    with caplog.at_level(logging.WARNING):
        t.on_close(T)  # one attempt per request at close (not a million), and no exception
    assert "2 change(s) could not be written at close" in caplog.text
    assert t.durable_position() == 1
    with pytest.raises(laredo.TargetError, match="closed"):
        t.apply(T, [ins(4, 4)])


def test_close_stops_a_flusher_stuck_in_retries(
    receiver: Any, make_target: Any, wait_for: Any
) -> None:
    t = make_target(flush_interval="10ms", retry_count=1_000_000, retry_backoff="50ms")
    receiver.script(*[503] * 1000)
    t.apply(T, [ins(1, 1)])
    wait_for(lambda: len(receiver.all_requests()) >= 2, what="the flusher retrying")
    t.on_close(T)  # returns: the flusher's retry loop ends once the target is closing
    assert t._flusher is not None and not t._flusher.is_alive()
    assert t.durable_position() is None


def test_replica_keys_a_table_without_primary_key_by_every_column() -> None:
    """The receiver follows ``laredo.types.row_key_columns``: no primary key, every column."""
    from laredo_target_http.replica import Replica

    replica = Replica()
    columns = [{"name": "day", "type": "int4"}, {"name": "note", "type": "text"}]
    replica.apply("/baseline/start", {"table": "public.log", "columns": columns, "primary_key": []})
    replica.apply("/baseline/batch", {"rows": [{"day": 1, "note": "a"}, {"day": 1, "note": "b"}]})
    replica.apply("/baseline/complete", {"row_count": 2})
    assert replica.key_columns == ["day", "note"] and len(replica) == 2
    replica.apply("/changes", {"changes": [{"action": "DELETE", "old": {"day": 1, "note": "a"}}]})
    assert replica.rows() == [{"day": 1, "note": "b"}]
    assert replica.get(1, "b") == {"day": 1, "note": "b"}


def test_a_huge_or_endless_error_body_is_cut_not_read_to_the_end(make_target: Any) -> None:
    """L1: a receiver announcing a 1 GB answer (and sending it slowly) is read only up to
    MAX_RESPONSE: the 400 is reported as it is, without holding the whole body in memory or
    waiting for it."""
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536)
                n = int(head.split(b"Content-Length: ", 1)[1].split(b"\r\n", 1)[0])
                body = head.split(b"\r\n\r\n", 1)[1]
                while len(body) < n:
                    body += conn.recv(65536)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 1000000000\r\n\r\n")
                conn.sendall(b"x" * (256 * 1024))  # then nothing more: a reader of it all waits
                stop.wait(20)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        t = make_target(base_url=f"http://127.0.0.1:{srv.getsockname()[1]}", timeout=15)
        t.apply_changes(T, [ins(1, 1)])
        with pytest.raises(HttpSyncError, match="rejected with HTTP 400") as info:
            t.flush()
        assert not info.value.transient
    finally:
        stop.set()
        srv.close()
