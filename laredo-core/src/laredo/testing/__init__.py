"""Test helpers for Laredo and its plugins: a programmable source, a recording target and
conformance suites that plugin packages subclass."""

from __future__ import annotations

from .churn import Churn
from .recording import PerChangeTarget, RecordingTarget
from .serving import PG_CONNECTION_ENV, ServedLaredo, free_port, pg_serve_config
from .source import TestSource, columns
from .waiting import probing, wait_until

__all__ = [
    "PG_CONNECTION_ENV",
    "Churn",
    "PerChangeTarget",
    "RecordingTarget",
    "ServedLaredo",
    "TestSource",
    "columns",
    "free_port",
    "pg_serve_config",
    "probing",
    "wait_until",
]
