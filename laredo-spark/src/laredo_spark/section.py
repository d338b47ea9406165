"""The Spark runner's own configuration section, ``spark { master, partitions, conf }``.

Light (pydantic only, no pyspark): the plugin registers it as a configuration section, so
``laredo serve`` validates it in a shared file and leaves it alone, and the runner reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from laredo.units import as_written
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["SparkSection", "flatten_conf"]


def flatten_conf(conf: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Spark settings as Spark takes them: ``{"spark.executor.memory": "768m"}``.

    HOCON gives ``conf { spark.executor.memory = 4g }`` as nested objects, and a quoted key
    (``"spark.executor.memory" = 4g``) with its quotes kept: both become the dotted key.
    Values become the text written (:func:`laredo.units.as_written`: ``768m`` and ``30s``,
    which HOCON reads as durations, stay ``"768m"`` and ``"30s"``; booleans
    ``true``/``false``)."""
    out: dict[str, str] = {}
    for key, value in conf.items():
        name = str(key)
        if len(name) >= 2 and name[0] == name[-1] == '"':
            name = name[1:-1]
        full = f"{prefix}{name}"
        if isinstance(value, Mapping):
            out.update(flatten_conf(value, f"{full}."))
        elif value is None:
            continue
        else:
            out[full] = str(as_written(value))
    return out


class SparkSection(BaseModel):
    """The runner's own ``spark { master, partitions, conf }`` section."""

    model_config = ConfigDict(extra="forbid")

    master: str | None = Field(None, description="master URL (default local[*])")
    partitions: int | None = Field(None, ge=1, description="least ctid slices per table")
    conf: dict[str, str] = Field(default_factory=dict, description="Spark settings")

    @field_validator("conf", mode="before")
    @classmethod
    def _flatten(cls, value: Any) -> Any:
        return flatten_conf(value) if isinstance(value, Mapping) else value
