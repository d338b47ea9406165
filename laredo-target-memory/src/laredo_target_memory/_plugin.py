"""laredo-target-memory's plugin registration."""

from __future__ import annotations
