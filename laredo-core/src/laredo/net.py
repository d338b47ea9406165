"""``free_port``: the one way any package (the quickstart, embedded PostgreSQL, the Spark
standalone cluster, tests) picks a TCP port to give a process it starts."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (it may be taken again before it is used: give it
    to a process at once; configs cannot ask for "any free port" where 0 turns a listener
    off)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
