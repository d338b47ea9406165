"""Test helpers for Laredo and its plugins: a programmable source, a recording target and
conformance suites that plugin packages subclass."""

from __future__ import annotations

from .recording import PerChangeTarget, RecordingTarget
from .source import TestSource, columns
from .waiting import wait_until

__all__ = ["PerChangeTarget", "RecordingTarget", "TestSource", "columns", "wait_until"]
