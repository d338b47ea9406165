from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import laredo
import laredo.units
import pytest
from laredo.deprecation import collect_deprecations
from laredo.plugins import PluginManager
from laredo_target_http import HttpSyncOptions, HttpSyncTarget, parse_duration, parse_retry_after


@pytest.fixture
def registry() -> Any:
    pm = PluginManager(autoload=False)
    import laredo_target_http._plugin as plugin

    pm.register(plugin, provider="laredo-target-http")
    return pm.registry("target")


def test_entry_point_is_registered() -> None:
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="laredo")}
    assert eps["http-sync"] == "laredo_target_http._plugin"


def test_build_by_name_with_defaults(registry: Any) -> None:
    t = registry.build("http-sync", base_url="http://127.0.0.1:9/sync/")
    assert isinstance(t, HttpSyncTarget)
    assert t.base_url == "http://127.0.0.1:9/sync"
    o = t.options
    assert (o.batch_size, o.flush_interval, o.timeout, o.retry_count) == (100, 1.0, 30.0, 3)
    assert (o.retry_backoff, o.retry_backoff_max, o.retry_after_max) == (0.1, 5.0, 60.0)
    assert (o.headers, o.auth_header) == ({}, None)
    assert isinstance(t, laredo.DurablePositionTarget)
    assert isinstance(t, laredo.BatchTarget)
    assert isinstance(t, laredo.PositionedTarget)
    assert t.is_durable() and t.durable_position() is None


def test_build_through_the_public_builder() -> None:
    t = laredo.target("http-sync", base_url="https://example.invalid", flush_interval="250ms")
    assert t.flush_interval == 0.25


def test_bad_options_list_every_problem(registry: Any) -> None:
    with pytest.raises(laredo.ConfigError) as info:
        registry.build(
            "http-sync",
            base_url="ftp://x",
            batch_size=0,
            flush_interval="soon",
            timeout=0,
            retry_count=-1,
            headers={"Bad Name": "v"},
            batchsize=10,
        )
    problems = info.value.problems
    assert len(problems) == 7, problems
    text = "\n".join(problems)
    for key in ("base_url", "batch_size", "flush_interval", "timeout", "retry_count"):
        assert f"{key}:" in text
    assert "headers" in text and "batchsize: unknown option" in text
    assert "'200ms'" in text  # the duration error shows how to write one


def test_missing_base_url(registry: Any) -> None:
    with pytest.raises(laredo.ConfigError, match="base_url: Field required"):
        registry.build("http-sync")


def test_credentials_are_never_echoed(registry: Any) -> None:
    with pytest.raises(laredo.ConfigError) as info:
        registry.build("http-sync", base_url="http://bob:hunter2@127.0.0.1:9")
    assert "hunter2" not in str(info.value)
    assert "auth_header" in str(info.value)
    with pytest.raises(laredo.ConfigError) as info:
        registry.build("http-sync", base_url="http://127.0.0.1:9", auth_header="Bearer x\nEvil: 1")
    assert "Evil" not in str(info.value)


def test_direct_construction_validates_too() -> None:
    with pytest.raises(laredo.ConfigError, match="batch_size"):
        HttpSyncTarget("http://127.0.0.1:9", batch_size=-5)
    with pytest.raises(TypeError):
        HttpSyncTarget("http://127.0.0.1:9", 5)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (0, 0.0),
        (2, 2.0),
        (0.5, 0.5),
        ("200ms", 0.2),
        ("1s", 1.0),
        ("1.5s", 1.5),
        ("1m", 60.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("3", 3.0),
        (" 10 MS ", 0.01),
        (timedelta(milliseconds=300), 0.3),
    ],
)
def test_durations(text: Any, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "fast", "-1s", "1 s s", True, None, float("nan"), -2])
def test_bad_durations(bad: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_durations_are_core_units_and_the_ms_spellings_are_deprecated() -> None:
    assert parse_duration is laredo.units.parse_duration
    t = HttpSyncTarget("http://127.0.0.1:9", timeout="2s", retry_backoff="250ms")
    assert (t.options.timeout, t.options.retry_backoff) == (2.0, 0.25)
    with collect_deprecations() as warned:
        for _ in range(2):
            t = HttpSyncTarget(
                "http://127.0.0.1:9",
                timeout_ms=1500,
                retry_backoff_ms="20",
                retry_backoff_max_ms="1s",
                retry_after_max_ms=timedelta(seconds=3),
            )
    o = t.options
    assert (o.timeout, o.retry_backoff, o.retry_backoff_max, o.retry_after_max) == (
        1.5,
        0.02,
        1.0,
        3.0,
    )
    assert o.timeout_ms is None and "timeout_ms" not in o.model_dump()
    assert len(warned) == 4, warned  # once per deprecated option, not once per target
    assert "option timeout_ms is deprecated" in warned[0] and "write timeout = 1.5s" in warned[0]
    with pytest.raises(laredo.ConfigError) as info:
        HttpSyncTarget("http://127.0.0.1:9", timeout_ms=1000, timeout=1, retry_backoff_ms=2.0)
    text = str(info.value)
    assert "timeout_ms: Value error, give timeout or the deprecated timeout_ms, not both" in text
    assert "retry_backoff_ms: Value error, expected integer milliseconds" in text


def test_takes_its_validated_options_model(registry: Any) -> None:
    assert registry.get("http-sync").takes_options
    opts = HttpSyncOptions(base_url="http://127.0.0.1:9", batch_size=7)
    t = HttpSyncTarget(options=opts)
    assert t.options is opts and HttpSyncTarget.from_options(opts).batch_size == 7
    with pytest.raises(TypeError):
        HttpSyncTarget("http://127.0.0.1:9", options=opts)


def test_retry_after_parsing() -> None:
    now = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(later, now=now.timestamp()) == pytest.approx(30)
    assert parse_retry_after("7") == 7
    assert parse_retry_after("-3") == 0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
