"""What ``laredo serve`` says at startup: the preflight findings, then where everything
listens and the command to try next.

:func:`log_preflight` runs the same checks as ``laredo check`` (read-only; each bounded by its
plugin's timeouts) and logs every finding, errors at ERROR level; the server starts anyway, so
a problem fixed while it runs (a publication, a grant) is picked up by its retries.
:func:`listening_line` is the last line of the startup log.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from laredo.config import run_checks
from laredo.preflight import CheckReport, Severity
from laredo.types import PipelineState

from . import __version__
from .addresses import cli_address, is_any_host
from .config import ServerConfig, reads_protected
from .runtime import Listeners

logger = logging.getLogger(__name__)

__all__ = ["listening_line", "log_preflight", "next_command"]

_LEVELS = {Severity.ERROR: logging.ERROR, Severity.WARNING: logging.WARNING}


def log_preflight(model: ServerConfig) -> CheckReport | None:
    """Run the configured plugins' preflight checks and log each finding; None when the
    checks themselves could not run (logged as a warning)."""
    try:
        report = run_checks(model)
    except Exception:
        logger.warning("preflight checks could not run", exc_info=True)
        return None
    for f in report.findings:
        logger.log(
            _LEVELS.get(f.severity, logging.INFO),
            "check %s %s: %s%s",
            f.code,
            f.where,
            f.message,
            f"; fix: {f.fix}" if f.fix else "",
        )
    if report.errors:
        logger.error(
            "preflight: %d problem(s) above will keep pipelines from working until fixed "
            "(laredo check --config FILE lists them again)",
            len(report.errors),
        )
    elif report.checked:
        logger.info(
            "preflight passed: %s%s",
            ", ".join(report.checked),
            f" ({len(report.warnings)} warning(s))" if report.warnings else "",
        )
    return report


def next_command(model: ServerConfig, listeners: Listeners) -> str:
    """The command to try first against this server."""
    g = model.grpc
    if g is not None and listeners.grpc_port:
        address = cli_address(g.host, listeners.grpc_port)
        flags = f" --address {address}" if address else ""
        if g.tls is not None:
            flags += " --tls --tls-ca CA_FILE"
            if g.tls.client_ca_file:
                flags += " --tls-cert CERT_FILE --tls-key KEY_FILE"
        if reads_protected(model):
            return f"LAREDO_TOKEN=... laredo{flags} status"
        return f"laredo{flags} status"
    if listeners.health_port:
        host = model.health.host
        host = "127.0.0.1" if is_any_host(host) else host
        return f"curl -s http://{host}:{listeners.health_port}/health/ready"
    return "none: no listener is configured (grpc.port = 0, health.enabled = false)"


def listening_line(
    model: ServerConfig, listeners: Listeners, states: Sequence[PipelineState]
) -> str:
    """``laredo X serving N pipeline(s) (k streaming, ...); gRPC ... on ...; HTTP ... on ...;
    next: ...`` for pipelines in ``states``."""
    g = model.grpc
    if g is not None and listeners.grpc_port:
        grpc = f"gRPC (OAM, Query) on {g.host}:{listeners.grpc_port}"
    else:
        grpc = "gRPC off (grpc.port = 0)"
    if listeners.health_port:
        http = f"HTTP (health, metrics, JSON) on http://{model.health.host}:{listeners.health_port}"
    else:
        http = "HTTP off (health.enabled = false)"
    counts = Counter(s.value.lower() for s in states)
    detail = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    return (
        f"laredo {__version__} serving {len(states)} pipeline(s)"
        f"{f' ({detail})' if detail else ''}; {grpc}; {http}; "
        f"next: {next_command(model, listeners)}"
    )
