"""Test helpers for Laredo and its plugins: a programmable source, a recording target and
conformance suites that plugin packages subclass."""

from __future__ import annotations

from .recording import PerChangeTarget, RecordingTarget
from .serving import ServedLaredo, free_port
from .source import TestSource, columns
from .waiting import wait_until

__all__ = [
    "PerChangeTarget",
    "RecordingTarget",
    "ServedLaredo",
    "TestSource",
    "columns",
    "free_port",
    "wait_until",
]
