"""pytest plugin shipped with laredo-core (entry point ``pytest11``): shared fixtures."""

from __future__ import annotations
