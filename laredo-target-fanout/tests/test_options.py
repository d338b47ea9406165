"""Options: every duration in laredo.units' grammar; the plugin factory's wiring."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import laredo
import pytest
from laredo.deprecation import OptionDeprecationWarning, collect_deprecations
from laredo.testing.source import columns
from laredo_target_fanout import FanOutTarget, ReplicationFanoutOptions, ReplicationServer
from laredo_target_fanout.options import coerce_options

T = laredo.Table("public", "users")

DURATIONS = [
    ("journal", "max_age"),
    ("snapshot", "interval"),
    ("snapshot", "max_age"),
    ("grpc", "drain_timeout"),
    ("grpc", "linger"),
    ("client_buffer", "max_wait"),
    (None, "heartbeat_interval"),
]


@pytest.mark.parametrize(("section", "key"), DURATIONS)
@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h30m", 5400.0), ("2d", 172_800.0), ("200ms", 0.2), (timedelta(minutes=2), 120.0)],
)
def test_every_duration_option_takes_the_core_grammar(
    section: str | None, key: str, text: Any, seconds: float
) -> None:
    config: dict[str, Any] = {key: text} if section is None else {section: {key: text}}
    opts = coerce_options(ReplicationFanoutOptions, config)
    got = getattr(opts if section is None else getattr(opts, section), key)
    assert got == pytest.approx(seconds)


def test_bad_durations_and_a_zero_heartbeat_are_config_errors() -> None:
    with pytest.raises(laredo.ConfigError) as ei:
        FanOutTarget(journal={"max_age": "soon"}, heartbeat_interval=0, grpc={"linger": -1})
    text = str(ei.value)
    for key in ("journal.max_age", "heartbeat_interval", "grpc.linger"):
        assert key in text


def test_zero_snapshot_interval_and_age_mean_off_and_max_size_is_size() -> None:
    with pytest.warns(OptionDeprecationWarning, match="client_buffer.max_size"):
        opts = coerce_options(
            ReplicationFanoutOptions,
            {"snapshot": {"interval": 0, "max_age": "0s"}, "client_buffer": {"max_size": 7}},
        )
    assert (opts.snapshot.interval, opts.snapshot.max_age) == (None, None)
    assert opts.client_buffer.size == 7


def test_go_spellings_are_the_targets_own_with_one_warning_each() -> None:
    """Go Laredo's keys of this target, declared here (not in the server): values move to our
    keys, each spelling warns once naming ours; both spellings together is an error."""
    go = {
        "max_clients": 10,
        "grpc": {"port": 0},
        "snapshot": {"retention": {"keep_count": 2, "max_age": "1h"}},
    }
    with collect_deprecations() as notes:
        opts = coerce_options(ReplicationFanoutOptions, go)
    assert opts.grpc is not None and opts.grpc.max_clients == 10
    assert (opts.snapshot.keep_count, opts.snapshot.max_age) == (2, 3600.0)
    assert notes == [
        "max_clients is Go Laredo's spelling; write grpc { max_clients = ... }",
        "snapshot.retention.keep_count is Go Laredo's spelling; write snapshot.keep_count",
        "snapshot.retention.max_age is Go Laredo's spelling; write snapshot.max_age",
    ]
    with collect_deprecations() as notes:
        coerce_options(
            ReplicationFanoutOptions, {"grpc": {"port": 0}, "snapshot": {"keep_count": 2}}
        )
    assert notes == []  # our spelling: nothing to say
    with pytest.raises(laredo.ConfigError, match=r"give keep_count or retention\.keep_count"):
        coerce_options(
            ReplicationFanoutOptions,
            {"snapshot": {"keep_count": 5, "retention": {"keep_count": 2}}},
        )
    with pytest.raises(laredo.ConfigError, match=r"archive: .*archive \{ uri"):
        coerce_options(ReplicationFanoutOptions, {"archive": {"store": "local"}})


def test_the_plugin_serves_on_grpc_and_not_without_it() -> None:
    served = laredo.target("replication-fanout", grpc={"port": 0, "drain_timeout": 0})
    unserved = laredo.target("replication-fanout", grpc=None)
    try:
        for t in (served, unserved):
            t.on_init(T, columns("id", "name"))
        assert served.port > 0 and unserved.port == 0
        assert unserved.grpc_options.max_batch == 1000  # the stream defaults still apply
    finally:
        for t in (served, unserved):
            t.on_close(T)
    assert served.port == 0  # detached


def test_a_target_is_served_only_through_a_server() -> None:
    plain = FanOutTarget(grpc={"port": 0}, serve=False)
    opts = coerce_options(ReplicationFanoutOptions, {"grpc": {"port": 0, "drain_timeout": 0}})
    served = FanOutTarget(opts, server=ReplicationServer.serving(opts.grpc))
    try:
        for t in (plain, served):
            t.on_init(T, columns("id", "name"))
        assert plain.port == 0 and served.port > 0
    finally:
        for t in (plain, served):
            t.on_close(T)
    with pytest.raises(laredo.ConfigError, match="serve=True needs server"):
        FanOutTarget(serve=True)
    with pytest.raises(laredo.ConfigError, match="grpc options were given but nothing serves"):
        FanOutTarget(grpc={"port": 0})  # never silently unserved
    with pytest.raises(laredo.ConfigError, match="not both"):
        FanOutTarget(opts, journal={"max_entries": 5})
