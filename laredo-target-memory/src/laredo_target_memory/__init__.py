"""In-memory targets for Laredo."""

from __future__ import annotations
