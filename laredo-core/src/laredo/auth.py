"""Who may call a listener: the ``auth`` block and the fail-closed rule every RPC listener
follows (the server's gRPC and Connect ports, a fan-out replication port).

* :class:`AuthConfig` is ``auth { token | token_file, protect_reads, allow_unauthenticated }``;
  :class:`ListenerAuth` the same without ``protect_reads`` (a fan-out port, where every RPC
  reads rows) and :class:`TokenConfig` just ``token | token_file`` (what a client presents).
  A token that is empty or only whitespace (inline, or a token file mounted before it was
  filled) is a configuration error, never "no token".
* :func:`token_matches` checks a call's ``authorization: Bearer <token>`` in constant time.
* :func:`is_loopback` tells whether a bind address only accepts local connections.
* :func:`auth_problems` is the policy: a listener bound to anything but loopback needs a
  non-empty token or the explicit ``allow_unauthenticated = true``. Each problem names the key
  to set, prefixed with where the block sits (``grpc.auth``, ``targets[0].grpc.auth``).

The token itself is never part of a message: only key names and file paths are.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, SecretStr

from .errors import ConfigError

__all__ = [
    "AuthConfig",
    "ListenerAuth",
    "TokenConfig",
    "auth_problems",
    "is_loopback",
    "open_listener_warning",
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
                value = Path(self.token_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"{key}token_file: {self.token_file}: cannot read ({exc.strerror or exc})"
                ) from None
            if not value:
                raise ConfigError(
                    f"{key}token_file: {self.token_file} is empty; write the token into it"
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
    """``auth { token = ..., token_file = ..., protect_reads, allow_unauthenticated }`` of
    the server's admin listeners."""

    protect_reads: bool = False
    """Also require the token for read-only RPCs (status, queries, lists, streams)."""


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
    if isinstance(a, AuthConfig) and a.protect_reads and not a.configured:
        out.append(f"{key}.protect_reads: needs {key}.token or {key}.token_file")
    if a.allow_unauthenticated and a.configured:
        out.append(f"{key}.allow_unauthenticated: a token is configured too; remove one of them")
    if not is_loopback(host) and not a.configured and not a.allow_unauthenticated:
        out.append(
            f"{key}: {serves} listens on {host or 'every interface'!s}, not loopback, without a "
            f"token: set {key}.token (or {key}.token_file), or {key}.allow_unauthenticated = true "
            "to serve it to anyone who can reach the port"
        )
    return out


def open_listener_warning(*, key: str, host: str, port: int | None, serves: str) -> str:
    """The WARNING logged at every start of a listener running with
    ``allow_unauthenticated`` on a non-loopback address."""
    return (
        f"{serves} on {host}:{port} accepts calls WITHOUT authentication "
        f"({key}.allow_unauthenticated = true): anyone who can reach the port can call it; "
        f"set {key}.token or {key}.token_file"
    )


def token_matches(
    metadata: Mapping[str, str] | Iterable[tuple[str, str]] | None, token: str
) -> bool | None:
    """Whether ``authorization: Bearer <token>`` in ``metadata`` (pairs or a mapping) matches
    ``token`` (constant time); None when the call carries no authorization at all."""
    pairs = metadata.items() if isinstance(metadata, Mapping) else (metadata or ())
    for key, value in pairs:
        if str(key).lower() == "authorization":
            value = str(value)
            given = value.split(" ", 1)[1] if value.lower().startswith("bearer ") else value
            return hmac.compare_digest(given.strip().encode(), token.encode())
    return None
