"""One rule for what is secret and how it is masked, used by every package.

* A **secret key** is an option or config key whose value is a credential as a whole:
  its name contains ``password``, ``passwd``, ``passphrase``, ``secret``, ``token``, ``auth``
  (``auth_header``, ``authorization``), ``credential``, ``api_key``/``apikey``,
  ``access_key``, ``private_key``, ``session_key``, ``cookie`` or ``signature``. Its value is
  never printed: :data:`MASK` stands in for it.
* Any other **text** may embed a password: ``scheme://user:PASSWORD@host``, a libpq
  ``password=...`` pair or a ``?password=`` / ``&password=`` query parameter.
  :func:`mask_text` replaces those passwords and keeps the rest (host, database, user), so a
  connection string stays useful in an error message.

Config dumps use :func:`mask_secrets`; error messages that echo a value use
:func:`show_value`; reprs of connection strings use :func:`mask_text`.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MASK", "is_secret_key", "mask_secrets", "mask_text", "show_value"]

MASK = "***"

_SECRET_KEY = re.compile(
    r"pass(?:word|wd|phrase)|secret|token|auth|credential|api_?key|access_?key|"
    r"private_?key|session_?key|cookie|signature",
    re.IGNORECASE,
)
_URI_PASSWORD = re.compile(r"(?P<pre>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s]*:)(?P<pw>[^@/?#\s]*)@")
_QUERY_PASSWORD = re.compile(r"(?P<pre>[?&]password=)(?P<pw>[^&\s]*)", re.IGNORECASE)
_KV_PASSWORD = re.compile(
    r"(?P<pre>(?<![?&\w])password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE
)


def is_secret_key(key: object) -> bool:
    """True when a key's whole value is a credential (see the module docstring)."""
    return bool(key) and _SECRET_KEY.search(str(key)) is not None


def mask_text(text: str) -> str:
    """``text`` with every embedded password replaced by :data:`MASK`."""
    text = _URI_PASSWORD.sub(lambda m: f"{m.group('pre')}{MASK}@", text)
    text = _QUERY_PASSWORD.sub(lambda m: f"{m.group('pre')}{MASK}", text)
    return _KV_PASSWORD.sub(lambda m: f"{m.group('pre')}{MASK}", text)


def mask_secrets(value: Any, key: str = "") -> Any:
    """A copy of a config tree that is safe to print: values of secret keys become
    :data:`MASK` (booleans and ``None`` stay, they reveal nothing), passwords embedded in any
    other string are masked. pydantic ``SecretStr`` values are masked wherever they are."""
    if isinstance(value, dict):
        return {k: mask_secrets(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_secrets(v, key) for v in value]
    if value is None or isinstance(value, bool):
        return value
    if is_secret_key(key) or type(value).__name__ in ("SecretStr", "SecretBytes"):
        return MASK
    if isinstance(value, str):
        return mask_text(value)
    return value


def show_value(key: object, value: Any, limit: int = 60) -> str | None:
    """The ``repr`` of ``value`` for an error message about ``key``, masked and shortened;
    ``None`` when the value must not be shown at all (a secret key)."""
    if is_secret_key(key):
        return None
    shown = repr(mask_secrets(value))
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."
