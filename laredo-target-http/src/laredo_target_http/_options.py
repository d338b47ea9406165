"""Options of the ``http-sync`` target (validated by pydantic; unknown keys are rejected).

Durations use :mod:`laredo.units` (a number of seconds or text such as ``"200ms"``, ``"30s"``,
``"1m"``). The 0.1 spellings ``timeout_ms``, ``retry_backoff_ms``, ``retry_backoff_max_ms`` and
``retry_after_max_ms`` are still accepted for one release (integer milliseconds, or duration
text), each reported through :func:`laredo.deprecation.deprecated_option` naming the new key
(a note of ``laredo config validate``, logged by ``laredo serve``; a ``DeprecationWarning`` in
Python code); giving an old and a new spelling together is an error.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any
from urllib.parse import urlsplit

from laredo.deprecation import deprecated_option
from laredo.units import Duration, WrittenText, parse_duration
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = ["DEPRECATED_OPTIONS", "HttpSyncOptions", "has_credentials"]

DEPRECATED_OPTIONS: dict[str, str] = {
    "timeout_ms": "timeout",
    "retry_backoff_ms": "retry_backoff",
    "retry_backoff_max_ms": "retry_backoff_max",
    "retry_after_max_ms": "retry_after_max",
}
"""Deprecated option name -> the option that replaces it (a duration in seconds)."""

_INTEGER = re.compile(r"\s*\d+\s*")


class _Both:
    """Marks a deprecated option given together with its replacement (shows as the value)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def _milliseconds(value: Any) -> Any:
    """A deprecated ``*_ms`` value in seconds: integer milliseconds (also as text), or a
    duration with a unit (``"2s"``). A float is refused: it is ambiguous, because a HOCON
    duration (``timeout_ms = 2s``) arrives as seconds."""
    if value is None or isinstance(value, _Both):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return parse_duration(value / 1000.0)
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value) / 1000.0
    if isinstance(value, str | timedelta):
        return parse_duration(value)
    raise ValueError(
        "expected integer milliseconds or a duration such as '2s' (HOCON durations are no "
        "longer converted to milliseconds: use the new option)"
    )


_Millis = Annotated[float | None, BeforeValidator(_milliseconds)]


def has_credentials(url: str) -> bool:
    """True when ``url`` carries ``user[:password]@`` (never allowed: use ``auth_header``)."""
    try:
        parts = urlsplit(url)
        return parts.username is not None or parts.password is not None
    except ValueError:
        return "@" in url


class HttpSyncOptions(BaseModel):
    """``http-sync`` target options.

    ``flush_interval`` 0 turns the time-based flush off (changes are then sent when
    ``batch_size`` is reached, on truncate, on ``flush()`` and on close).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(description="receiver URL prefix, e.g. http://host:8080/sync")
    batch_size: int = Field(100, ge=1, le=1_000_000)
    flush_interval: Duration = Field(1.0, description="0 disables the timed flush")
    timeout: Duration = Field(30.0, gt=0, description="connect and per-read socket timeout")
    retry_count: int = Field(3, ge=0, description="extra attempts after the first one")
    retry_backoff: Duration = Field(0.1, ge=0, description="first backoff; doubles per retry")
    retry_backoff_max: Duration = Field(5.0, ge=0, description="cap of the backoff")
    retry_after_max: Duration = Field(60.0, ge=0, description="cap on a server's Retry-After")
    auth_header: SecretStr | None = Field(None, description="sent as the Authorization header")
    headers: dict[str, WrittenText] = Field(
        default_factory=dict, description="extra request headers, values as written"
    )

    # Deprecated spellings (see the module docstring); validation moves them to the new names.
    timeout_ms: _Millis = Field(None, gt=0, exclude=True, repr=False, description="deprecated")
    retry_backoff_ms: _Millis = Field(
        None, ge=0, exclude=True, repr=False, description="deprecated"
    )
    retry_backoff_max_ms: _Millis = Field(
        None, ge=0, exclude=True, repr=False, description="deprecated"
    )
    retry_after_max_ms: _Millis = Field(
        None, ge=0, exclude=True, repr=False, description="deprecated"
    )

    @model_validator(mode="before")
    @classmethod
    def _mark_both_spellings(cls, data: Any) -> Any:
        if isinstance(data, dict):
            both = {
                old: _Both(data[old])
                for old, new in DEPRECATED_OPTIONS.items()
                if {old, new} <= data.keys()
            }
            if both:
                data = {**data, **both}
        return data

    @field_validator(*DEPRECATED_OPTIONS, mode="before")
    @classmethod
    def _not_both(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, _Both):
            old = str(info.field_name)
            raise ValueError(f"give {DEPRECATED_OPTIONS[old]} or the deprecated {old}, not both")
        return value

    @model_validator(mode="after")
    def _apply_deprecated(self) -> HttpSyncOptions:
        for old, new in DEPRECATED_OPTIONS.items():
            seconds = self.__dict__[old]
            if seconds is None:
                continue
            deprecated_option(
                f"http-sync target: option {old} is deprecated and will be removed; write "
                f"{new} = {seconds:g}s instead"
            )
            # frozen model: set the replacement once, while validating
            object.__setattr__(self, new, seconds)
            object.__setattr__(self, old, None)
        return self

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
