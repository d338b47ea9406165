"""Options of the ``delta`` target and the ``delta`` archive source (pydantic; unknown keys
are rejected).

``storage_options`` go to delta-rs's object store unchanged (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_ALLOW_HTTP``, ...). They are secret as a whole: their repr and every
error message show them masked (:mod:`laredo.secrets`).
"""

from __future__ import annotations

from typing import Any

from laredo.secrets import mask_storage_options
from laredo.units import Duration
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["DeltaSourceOptions", "DeltaTargetOptions", "MaintenanceOptions", "masked"]


def masked(storage_options: dict[str, str] | None) -> dict[str, Any]:
    """``storage_options`` as they may be printed: every value masked but a region, endpoint,
    bucket or switch (:func:`laredo.secrets.mask_storage_options`)."""
    return mask_storage_options(dict(storage_options or {}))


def _check_uri(value: str) -> str:
    value = value.strip()
    if not value:
        raise ValueError("must be a local path or an s3:// (or other object store) URI")
    if "://" in value and "@" in value.split("://", 1)[1].split("/", 1)[0]:
        raise ValueError("must not contain credentials; put them in storage_options")
    return value


class MaintenanceOptions(BaseModel):
    """``maintenance { compact_every, vacuum_retention, compact_fraction, compact_min_rows }``:
    after every ``compact_every``-th commit the target compacts small files (a commit without
    data change, carrying the same position); with ``vacuum_retention`` set it then deletes
    files no version younger than that references (time travel to older versions stops
    working). Appended change rows are folded into the table (one overwrite commit, kind
    ``compaction``) once they reach ``compact_fraction`` of its rows and ``compact_min_rows``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compact_fraction: float = Field(
        default=0.5,
        gt=0,
        description="fold change rows into the table when they reach this fraction of it",
    )
    compact_min_rows: int = Field(
        default=10_000, ge=1, description="...and at least this many change rows"
    )

    compact_every: int = Field(
        default=0, ge=0, description="commits between compactions; 0 = never"
    )
    vacuum_retention: Duration | None = Field(
        default=None,
        ge=0,
        description="vacuum files older than this after compacting; unset = never",
    )


class DeltaTargetOptions(BaseModel):
    """``delta`` target options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str = Field(description="a local directory or s3://bucket/prefix of the Delta table")
    storage_options: dict[str, str] = Field(default_factory=dict, repr=False)
    flush_interval: Duration = Field(
        10.0, ge=0, description="commit the buffered changes this often; 0 = only on flush_rows"
    )
    flush_rows: int = Field(
        300_000,
        ge=1,
        description="commit once this many changes wait (up to 4x may be buffered: memory)",
    )
    maintenance: MaintenanceOptions = Field(MaintenanceOptions())
    key_fields: list[str] = Field(
        default_factory=list,
        description="columns that identify a row, for a table without a primary key (REPLICA "
        "IDENTITY FULL); default: the primary key",
    )

    _check = field_validator("uri")(classmethod(lambda cls, v: _check_uri(v)))

    def row_key_fields(self) -> list[str]:
        """The key rows are merged by (``laredo.preflight.KeysRows``): empty = primary key."""
        return list(self.key_fields)

    def fields_read(self) -> list[tuple[str, str]]:
        """``key_fields`` name columns (``laredo.preflight.ReadsFields``)."""
        return [(f"key_fields.{i}", f) for i, f in enumerate(self.key_fields)]

    def __repr__(self) -> str:
        return (
            f"DeltaTargetOptions(uri={self.uri!r}, storage_options="
            f"{masked(self.storage_options)!r}, flush_interval={self.flush_interval}, "
            f"flush_rows={self.flush_rows})"
        )


class DeltaSourceOptions(BaseModel):
    """``delta`` archive source options: a Delta table a ``delta`` target wrote."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str = Field(description="the Delta table (local path or object store URI)")
    storage_options: dict[str, str] = Field(default_factory=dict, repr=False)
    follow: bool = Field(True, description="keep polling for new versions after catching up")
    poll_interval: Duration = Field(1.0, gt=0, description="how often to look for new versions")
    as_of: str | None = Field(
        None, description="baseline at the last commit at or before this source position"
    )

    _check = field_validator("uri")(classmethod(lambda cls, v: _check_uri(v)))

    def __repr__(self) -> str:
        return (
            f"DeltaSourceOptions(uri={self.uri!r}, storage_options="
            f"{masked(self.storage_options)!r}, follow={self.follow}, "
            f"poll_interval={self.poll_interval}, as_of={self.as_of!r})"
        )
