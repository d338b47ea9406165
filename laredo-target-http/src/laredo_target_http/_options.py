"""Options of the ``http-sync`` target (validated by pydantic; unknown keys are rejected)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float:
    """Seconds from a number (seconds), a ``timedelta`` or text like ``"200ms"``, ``"1.5s"``,
    ``"1m"``, ``"1h"`` (a bare number in text is seconds)."""
    if isinstance(value, bool):
        raise ValueError("a duration must be a number of seconds or text such as '200ms'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        m = _DURATION.match(value)
        if m is None:
            raise ValueError(
                f"invalid duration {value!r}: write a number of seconds or a number with a unit "
                f"ms, s, m or h (e.g. '200ms', '1s')"
            )
        seconds = float(m.group(1)) * _UNIT_SECONDS[(m.group(2) or "s").lower()]
    else:
        raise ValueError("a duration must be a number of seconds or text such as '200ms'")
    if not seconds >= 0:  # also rejects NaN
        raise ValueError("a duration must not be negative")
    return seconds


def has_credentials(url: str) -> bool:
    """True when ``url`` carries ``user[:password]@`` (never allowed: use ``auth_header``)."""
    try:
        parts = urlsplit(url)
        return parts.username is not None or parts.password is not None
    except ValueError:
        return "@" in url


class HttpSyncOptions(BaseModel):
    """``http-sync`` target options.

    ``flush_interval`` is a duration (seconds as a number, or ``"200ms"``, ``"1s"``, ``"1m"``);
    0 turns the time-based flush off (changes are then sent when ``batch_size`` is reached, on
    truncate, on ``flush()`` and on close).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(description="receiver URL prefix, e.g. http://host:8080/sync")
    batch_size: int = Field(100, ge=1, le=1_000_000)
    flush_interval: float = Field(1.0, description="seconds; 0 disables the timed flush")
    timeout_ms: int = Field(30_000, gt=0)
    retry_count: int = Field(3, ge=0, description="extra attempts after the first one")
    retry_backoff_ms: int = Field(100, ge=0, description="first backoff; doubles per retry")
    retry_backoff_max_ms: int = Field(5_000, ge=0)
    retry_after_max_ms: int = Field(60_000, ge=0, description="cap on a server's Retry-After")
    auth_header: SecretStr | None = Field(None, description="sent as the Authorization header")
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("flush_interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if has_credentials(value):
            # Reported by the target without echoing the value (error messages show inputs).
            return value
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment:
            raise ValueError("must not have a query string or fragment")
        try:
            _ = parts.port
        except ValueError as exc:
            raise ValueError(f"has an invalid port: {exc}") from None
        return value.rstrip("/")

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k, v in value.items() if not k or any(c in k + v for c in "\r\n\0")]
        bad += [k for k in value if any(c in k for c in " :\t")]
        if bad:
            raise ValueError(
                f"invalid header name or value for {sorted(set(bad))}: names must be non-empty "
                f"without spaces or ':', and nothing may contain line breaks"
            )
        return value
