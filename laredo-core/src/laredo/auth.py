"""Who may call a listener: the ``auth`` block and the fail-closed rule every RPC listener
follows (the server's gRPC and Connect ports, a fan-out replication port).

* :class:`AuthConfig` is ``auth { token | token_file, read_token | read_token_file,
  protect_reads, allow_unauthenticated }``; :class:`ListenerAuth` the same without the read
  token and ``protect_reads`` (a fan-out port, where every RPC reads rows) and
  :class:`TokenConfig` just ``token | token_file`` (what a client presents).
  A token that is empty or only whitespace (inline, or a token file mounted before it was
  filled) is a configuration error, never "no token".
* :func:`token_matches` checks a call's ``authorization: Bearer <token>`` in constant time,
  :func:`refusal` turns that into the refusal of a one-token listener (a fan-out port);
  :class:`Access` is the whole per-call rule of the server's listeners: the admin token opens
  every RPC, the read token only read-only ones, a presented token that is neither is refused
  on every RPC (open or not), and reads need a token when ``protect_reads`` is in force. It
  is in force by default when a token is set and a listener serving RPCs is off loopback
  (:meth:`AuthConfig.reads_protected`).
* :func:`is_loopback` tells whether a bind address only accepts local connections.
* :func:`auth_problems` is the policy: a listener bound to anything but loopback needs a
  non-empty token or the explicit ``allow_unauthenticated = true``. Each problem names the key
  to set, prefixed with where the block sits (``grpc.auth``, ``targets[0].grpc.auth``).

The token itself is never part of a message: only key names and file paths are.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, SecretStr

from .errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = [
    "Access",
    "AuthConfig",
    "ListenerAuth",
    "Refusal",
    "TokenConfig",
    "auth_problems",
    "is_loopback",
    "open_listener_warning",
    "open_reads_warning",
    "presented_token",
    "refusal",
    "token_matches",
]


class TokenConfig(BaseModel):
    """``token | token_file``: a bearer token given inline or in a file (a listener's, or
    the one a client presents)."""

    model_config = ConfigDict(extra="forbid")

    token: SecretStr | None = None
    """The bearer token callers send (``authorization: Bearer <token>``)."""
    token_file: str | None = None
    """Read the token from this file (surrounding whitespace stripped) instead."""

    @property
    def configured(self) -> bool:
        """A token or a token file is given (its content is checked by :meth:`resolve`)."""
        return self.token is not None or bool(self.token_file)

    def resolve(self, key: str = "auth") -> str | None:
        """The token (None when none is configured). ``ConfigError`` naming ``key`` when it
        is empty or whitespace, or the token file cannot be read (``key`` "": top level)."""
        key = f"{key}." if key else ""
        if self.token is not None:
            value = self.token.get_secret_value().strip()
            if not value:
                raise ConfigError(
                    f"{key}token: is empty; set a non-empty token (or remove the key)"
                )
            return value
        if self.token_file:
            try:
                path = Path(self.token_file)
                value = path.read_text().strip()
                mode = path.stat().st_mode & 0o777
            except OSError as exc:
                raise ConfigError(
                    f"{key}token_file: {self.token_file}: cannot read ({exc.strerror or exc})"
                ) from None
            if not value:
                raise ConfigError(
                    f"{key}token_file: {self.token_file} is empty; write the token into it"
                )
            if mode & 0o077:
                logger.warning(
                    "%stoken_file: %s is readable by other users (mode %s); chmod 600 it",
                    key,
                    self.token_file,
                    oct(mode),
                )
            return value
        return None

    def token_problems(self, key: str = "auth") -> list[str]:
        """What is wrong with the token keys at ``key`` (both given, empty, unreadable)."""
        if self.token is not None and self.token_file:
            return [f"{key or 'token'}: give token or token_file, not both"]
        try:
            self.resolve(key)
        except ConfigError as exc:
            return [str(exc)]
        return []


class ListenerAuth(TokenConfig):
    """``auth { token | token_file, allow_unauthenticated }`` of a listener whose every RPC
    needs the token (a fan-out replication port)."""

    allow_unauthenticated: bool = False
    """Serve without a token on a non-loopback address (a WARNING at every start)."""


class AuthConfig(ListenerAuth):
    """``auth { token = ..., token_file = ..., read_token = ..., read_token_file = ...,
    protect_reads, allow_unauthenticated }`` of the server's admin listeners."""

    protect_reads: bool | None = None
    """Also require a token (admin or read) for read-only RPCs (status, queries, lists,
    streams). Unset: true when a token is set and a listener serving RPCs is off loopback,
    false otherwise. ``false`` off loopback serves every row to anyone who can reach the
    port (a WARNING at every start, and in GetStatus)."""
    read_token: SecretStr | None = None
    """A second token that opens the read-only RPCs only (the status page, dashboards,
    ``laredo status``/``query``); admin RPCs refuse it. Needs ``token``."""
    read_token_file: str | None = None
    """Read the read-only token from this file instead."""

    @property
    def read(self) -> TokenConfig:
        """The read-only token as a :class:`TokenConfig`."""
        return TokenConfig(token=self.read_token, token_file=self.read_token_file)

    def reads_protected(self, rpc_hosts: Iterable[str]) -> bool:
        """Whether read-only RPCs need a token on listeners bound to ``rpc_hosts``: the
        explicit ``protect_reads``, else true when a token is set and any host is off
        loopback."""
        if self.protect_reads is not None:
            return self.protect_reads
        return self.configured and any(not is_loopback(h) for h in rpc_hosts)


_LOCAL_NAMES = ("localhost", "localhost.", "ip6-localhost", "ip6-loopback")


def is_loopback(host: str) -> bool:
    """``host`` (a bind address) accepts only local connections: ``127.0.0.0/8``, ``::1`` or
    ``localhost``. Every other name and the any-address (``0.0.0.0``, ``::``, ``""``) is not."""
    h = host.strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if h in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def auth_problems(auth: ListenerAuth | None, *, key: str, host: str, serves: str) -> list[str]:
    """Why a listener on ``host`` protected by ``auth`` (found at ``key``) may not start;
    empty when it may. ``serves`` names the listener in messages (``"gRPC (grpc.host)"``)."""
    a = auth or ListenerAuth()
    out = a.token_problems(key)
    if isinstance(a, AuthConfig):
        out += _read_token_problems(a, key)
    if a.allow_unauthenticated and a.configured:
        out.append(f"{key}.allow_unauthenticated: a token is configured too; remove one of them")
    if not is_loopback(host) and not a.configured and not a.allow_unauthenticated:
        out.append(
            f"{key}: {serves} listens on {host or 'every interface'!s}, not loopback, without a "
            f"token: set {key}.token (or {key}.token_file), or {key}.allow_unauthenticated = true "
            "to serve it to anyone who can reach the port"
        )
    return out


def _read_token_problems(a: AuthConfig, key: str) -> list[str]:
    out = []
    if a.protect_reads and not a.configured:
        out.append(f"{key}.protect_reads: needs {key}.token or {key}.token_file")
    if not a.read.configured:
        return out
    if a.read_token is not None and a.read_token_file:
        return [*out, f"{key}: give read_token or read_token_file, not both"]
    if not a.configured:
        out.append(
            f"{key}.read_token: needs {key}.token or {key}.token_file (the admin token); "
            "without one every RPC is open and a read token protects nothing"
        )
    try:
        read = a.read.resolve("")
    except ConfigError as exc:  # "token: is empty" / "token_file: ...": name the read key
        return [*out, f"{key}.read_{exc}"]
    try:
        admin = a.resolve("")
    except ConfigError:
        return out  # reported by token_problems
    if read is not None and admin is not None and hmac.compare_digest(read, admin):
        out.append(f"{key}.read_token: is the admin token; give the read token its own value")
    return out


def open_listener_warning(*, key: str, host: str, port: int | None, serves: str) -> str:
    """The WARNING logged at every start of a listener running with
    ``allow_unauthenticated`` on a non-loopback address."""
    return (
        f"{serves} on {host}:{port} accepts calls WITHOUT authentication "
        f"({key}.allow_unauthenticated = true): anyone who can reach the port can call it; "
        f"set {key}.token or {key}.token_file"
    )


def open_reads_warning(*, key: str, hosts: Iterable[str]) -> str:
    """The WARNING logged at every start (and shown by GetStatus) when reads are explicitly
    open (``protect_reads = false``) on a listener off loopback that has a token."""
    where = ", ".join(sorted(set(hosts)))
    return (
        f"read-only RPCs (GetRow, ListRows, Subscribe, GetStatus, ...) on {where} answer "
        f"WITHOUT a token ({key}.protect_reads = false): anyone who can reach the port reads "
        f"every row; remove {key}.protect_reads, or give readers {key}.read_token"
    )


Code = Literal["UNAUTHENTICATED", "PERMISSION_DENIED"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a call may not go on: a gRPC status name and the message (never a token)."""

    code: Code
    message: str


ADMIN_HINT = (
    "this RPC needs the admin token: send metadata 'authorization: Bearer <token>' "
    "(laredo --token / LAREDO_TOKEN)"
)
READ_HINT = (
    "this read-only RPC needs a token (the admin or the read token): send metadata "
    "'authorization: Bearer <token>' (laredo --token / LAREDO_TOKEN)"
)


@dataclass(frozen=True, slots=True)
class Access:
    """Who may call what on the server's RPC listeners (the gRPC and Connect ports).

    * No admin token: every call is open (a loopback listener, or ``allow_unauthenticated``).
    * A presented token must be the admin or the read token, on every RPC, open or not.
    * Admin RPCs need the admin token; the read token is PERMISSION_DENIED there.
    * Read-only RPCs need one of the two tokens when ``protect_reads``.
    """

    admin_token: str | None = None
    read_token: str | None = None
    protect_reads: bool = False

    def check(
        self, metadata: Mapping[str, str] | Iterable[tuple[str, str]] | None, *, admin: bool
    ) -> Refusal | None:
        """None when a call with ``metadata`` may go on, else why not."""
        if not self.admin_token:
            return None
        given = presented_token(metadata)
        if given is None:
            if admin:
                return Refusal("UNAUTHENTICATED", ADMIN_HINT)
            return Refusal("UNAUTHENTICATED", READ_HINT) if self.protect_reads else None
        if _same(given, self.admin_token):
            return None
        if self.read_token and _same(given, self.read_token):
            if admin:
                return Refusal(
                    "PERMISSION_DENIED",
                    "the read token only serves read-only RPCs; this one needs the admin token",
                )
            return None
        return Refusal("UNAUTHENTICATED", "invalid token")

    def may_read(self, metadata: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> bool:
        """A read-only call with ``metadata`` would go on and carries a valid token (or no
        token is configured): it may see details (error text) too."""
        if not self.admin_token:
            return True
        return presented_token(metadata) is not None and self.check(metadata, admin=False) is None


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def presented_token(
    metadata: Mapping[str, str] | Iterable[tuple[str, str]] | None,
) -> str | None:
    """The bearer token of ``authorization`` in ``metadata`` (None: no such header)."""
    pairs = metadata.items() if isinstance(metadata, Mapping) else (metadata or ())
    for key, value in pairs:
        if str(key).lower() == "authorization":
            value = str(value)
            given = value.split(" ", 1)[1] if value.lower().startswith("bearer ") else value
            return given.strip()
    return None


def token_matches(
    metadata: Mapping[str, str] | Iterable[tuple[str, str]] | None, token: str
) -> bool | None:
    """Whether ``authorization: Bearer <token>`` in ``metadata`` (pairs or a mapping) matches
    ``token`` (constant time); None when the call carries no authorization at all."""
    given = presented_token(metadata)
    return None if given is None else _same(given, token)


def refusal(
    metadata: Mapping[str, str] | Iterable[tuple[str, str]] | None,
    token: str | None,
    *,
    hint: str = ADMIN_HINT,
    invalid: str = "invalid token",
) -> Refusal | None:
    """Why a call with ``metadata`` may not go on where every call needs ``token`` (None: no
    token configured, every call goes on): UNAUTHENTICATED with ``hint`` when it presents no
    token, with ``invalid`` when it presents another one (constant-time compare)."""
    if token is None:
        return None
    ok = token_matches(metadata, token)
    if ok:
        return None
    return Refusal("UNAUTHENTICATED", invalid if ok is False else hint)
