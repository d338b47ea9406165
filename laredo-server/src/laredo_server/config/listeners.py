"""The fail-closed rule for the server's own listeners (gRPC, and the HTTP port while it serves
Connect), checked by ``laredo config validate``, ``laredo check`` and ``laredo serve`` alike.

* A listener that serves RPCs on anything but loopback needs ``grpc.auth.token`` (or
  ``token_file``) or the explicit ``grpc.auth.allow_unauthenticated = true``
  (:func:`laredo.auth.auth_problems`); an empty token is an error.
* When gRPC requires client certificates, the HTTP port serves Connect only behind the same
  check (``health.tls.client_ca_file``), or not at all (``health.connect = false``).
* ``grpc.max_workers`` exceeds ``grpc.max_streams``, so unary calls always find a thread.
* With a token and a listener serving RPCs off loopback, read-only RPCs need a token too
  (:func:`reads_protected`); ``grpc.auth.protect_reads = false`` there is a warning
  (:func:`open_listener_warnings`).
"""

from __future__ import annotations

from pathlib import Path

from laredo.auth import (
    AuthConfig,
    auth_problems,
    is_loopback,
    open_listener_warning,
    open_reads_warning,
)
from laredo.config import target_listener_claims

from .models import ServerConfig, TlsConfig

__all__ = [
    "claimed_open_warnings",
    "cleartext_token_warnings",
    "listener_problems",
    "open_listener_warnings",
    "reads_protected",
    "rpc_hosts",
]

_GRPC = "gRPC (OAM, Query)"
_CONNECT = "the HTTP port's Connect gateway (OAM, Query)"


def _tls_files(tls: TlsConfig | None, key: str) -> list[str]:
    if tls is None:
        return []
    return [
        f"{key}.{name}: {p}: file not found"
        for name in ("cert_file", "key_file", "client_ca_file")
        if (p := getattr(tls, name)) and not Path(p).is_file()
    ]


def _serves_connect(model: ServerConfig) -> bool:
    return model.health.enabled and model.health.connect


def rpc_hosts(model: ServerConfig) -> list[str]:
    """The bind addresses of the listeners that serve the OAM and Query RPCs."""
    out = []
    if model.grpc_enabled and model.grpc is not None:
        out.append(model.grpc.host)
    if _serves_connect(model):
        out.append(model.health.host)
    return out


def reads_protected(model: ServerConfig) -> bool:
    """Read-only RPCs need a token (admin or read): ``grpc.auth.protect_reads``, by default
    true when a token is set and an RPC listener is off loopback."""
    auth = model.grpc.auth if model.grpc is not None else AuthConfig()
    return auth.reads_protected(rpc_hosts(model))


def listener_problems(model: ServerConfig) -> list[str]:
    """Every reason the configured listeners may not start (empty: they may)."""
    out: list[str] = []
    g = model.grpc
    auth = g.auth if g is not None else AuthConfig()
    if g is not None:
        out += auth_problems(
            auth,
            key="grpc.auth",
            host=g.host if model.grpc_enabled else "127.0.0.1",
            serves=_GRPC,
        )
        out += _tls_files(g.tls, "grpc.tls")
        if g.max_workers <= g.max_streams:
            out.append(
                f"grpc.max_workers: {g.max_workers} must be more than grpc.max_streams "
                f"({g.max_streams}), so that admin calls always find a thread"
            )
    h = model.health
    out += _tls_files(h.tls, "health.tls")
    if not _serves_connect(model):
        return out
    if not is_loopback(h.host) and not auth.configured and not auth.allow_unauthenticated:
        out.append(
            f"health.connect: {_CONNECT} listens on {h.host or 'every interface'}, not "
            "loopback, without a token: set grpc.auth.token (or grpc.auth.token_file), "
            "health.connect = false to serve only probes and metrics there, or "
            "grpc.auth.allow_unauthenticated = true"
        )
    client_ca = g.tls.client_ca_file if g is not None and g.tls is not None else None
    if client_ca and (h.tls is None or not h.tls.client_ca_file):
        out.append(
            "health.connect: gRPC requires client certificates (grpc.tls.client_ca_file) but "
            "the HTTP port would serve the same RPCs without them: set health.tls { cert_file, "
            "key_file, client_ca_file }, or health.connect = false"
        )
    return out


def open_listener_warnings(model: ServerConfig) -> list[str]:
    """The warnings of listeners that serve RPCs to any address without a token
    (``grpc.auth.allow_unauthenticated``), or reads without one (``protect_reads = false``
    off loopback); logged at every start and shown by GetStatus."""
    g = model.grpc
    if g is None:
        return []
    if g.auth.configured:
        off = [h for h in rpc_hosts(model) if not is_loopback(h)]
        if off and not reads_protected(model):
            return [open_reads_warning(key="grpc.auth", hosts=off)]
        return []
    if not g.auth.allow_unauthenticated:
        return []
    out = []
    if model.grpc_enabled and not is_loopback(g.host):
        out.append(open_listener_warning(key="grpc.auth", host=g.host, port=g.port, serves=_GRPC))
    h = model.health
    if _serves_connect(model) and not is_loopback(h.host):
        out.append(
            open_listener_warning(key="grpc.auth", host=h.host, port=h.port, serves=_CONNECT)
        )
    return out


def cleartext_token_warnings(model: ServerConfig) -> list[str]:
    """Listeners off loopback where tokens travel without TLS (logged at every start: a
    TLS-terminating proxy or mesh in front makes them harmless, so they stay out of
    GetStatus)."""
    g = model.grpc
    if g is None or not g.auth.configured:
        return []
    out = []
    if model.grpc_enabled and not is_loopback(g.host) and g.tls is None:
        out.append(f"grpc ({g.host}:{g.port})")
    h = model.health
    if _serves_connect(model) and not is_loopback(h.host) and h.tls is None:
        out.append(f"health ({h.host}:{h.port}, Connect and the status page)")
    return [
        f"{where}: tokens and rows travel in clear (no {where.split(' ')[0]}.tls); use TLS, "
        "or a TLS-terminating proxy in front, on any network you do not trust"
        for where in out
    ]


def claimed_open_warnings(model: ServerConfig) -> list[str]:
    """The open-listener warnings of the listeners targets open (a fan-out port with
    ``grpc.auth.allow_unauthenticated``), once per address and naming the first target there.
    Those listeners log their own at start; these go into GetStatus and ``laredo status``."""
    seen: set[tuple[str, int]] = set()
    out = []
    for where, pid, claim in target_listener_claims(model):
        if claim.open_warning and (claim.host, claim.port) not in seen:
            seen.add((claim.host, claim.port))
            out.append(f"{where} (pipeline {pid!r}): {claim.open_warning}")
    return out
