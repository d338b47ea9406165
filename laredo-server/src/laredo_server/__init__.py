"""Laredo server: HOCON configuration, gRPC OAM and Query services, health and metrics HTTP,
the Prometheus observer and the ``laredo`` command line."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
