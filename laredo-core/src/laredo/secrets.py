"""One rule for what is secret and how it is masked, used by every package.

* A **secret key** is an option or config key whose value is a credential as a whole:
  its name contains ``password``, ``passwd``, ``passphrase``, ``secret``, ``token``, ``auth``
  (``auth_header``, ``authorization``), ``credential``, ``api_key``/``apikey``/``api-key``,
  ``access_key``, ``private_key``, ``session_key``, ``subscription_key``, ``cookie`` or
  ``signature`` (``_`` or ``-`` between the words), or it ends with ``-key`` (a header name such
  as ``Ocp-Apim-Subscription-Key``). Its value is never printed: :data:`MASK` stands in for it.
  Every value under a ``headers`` key is masked too, whatever the header's name.
* Any other **text** may embed a password: ``scheme://user:PASSWORD@host``, a libpq
  ``password=...`` or ``sslpassword=...`` pair, or a URL query parameter whose name is a secret
  key (``?password=``, ``&token=``, ``?api_key=``, ``&sig=``). :func:`mask_text` replaces those
  values and keeps the rest (host, database, user), so a connection string stays useful in an
  error message. It runs in time linear in the length of the text, and masks at most
  :data:`MAX_TEXT` characters: longer text is cut there (the cut is marked).

Config dumps use :func:`mask_secrets`; error messages that echo a value use
:func:`show_value`; reprs of connection strings use :func:`mask_text`.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MASK", "MAX_TEXT", "is_secret_key", "mask_secrets", "mask_text", "show_value"]

MASK = "***"

MAX_TEXT = 256 * 1024
"""Longest text :func:`mask_text` returns; longer text is cut (a log line, an error)."""

_SECRET_KEY = re.compile(
    r"pass(?:word|wd|phrase)|secret|token|auth|credential|api[_-]?key|access[_-]?key|"
    r"private[_-]?key|session[_-]?key|subscription[_-]?key|cookie|signature|-key$",
    re.IGNORECASE,
)
# Every pattern starts at a boundary its first part cannot continue (the lookbehinds), so no
# start position rescans a run another start already scanned: linear time.
_URI_PASSWORD = re.compile(
    r"(?<![a-zA-Z0-9+.-])(?P<pre>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s]*:)(?P<pw>[^@/?#\s]*)@"
)
_QUERY_PARAM = re.compile(r"(?P<pre>[?&](?P<key>[A-Za-z0-9_.~-]{1,64})=)(?P<pw>[^&#\s]*)")
_QUERY_SECRET = re.compile(r"^(?:sig|key|pwd|pass)$", re.IGNORECASE)
_KV_PASSWORD = re.compile(
    r"(?P<pre>(?<![?&\w])(?:ssl)?password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|\S+)",
    re.IGNORECASE,
)


def is_secret_key(key: object) -> bool:
    """True when a key's whole value is a credential (see the module docstring)."""
    return bool(key) and _SECRET_KEY.search(str(key)) is not None


def _query_value(m: re.Match[str]) -> str:
    key = m.group("key")
    if is_secret_key(key) or _QUERY_SECRET.match(key):
        return f"{m.group('pre')}{MASK}"
    return m.group(0)


def mask_text(text: str) -> str:
    """``text`` with every embedded password replaced by :data:`MASK`, cut at
    :data:`MAX_TEXT` characters; linear in the length of ``text``."""
    if len(text) > MAX_TEXT:
        text = f"{text[:MAX_TEXT]}... [{len(text) - MAX_TEXT} more characters cut]"
    text = _URI_PASSWORD.sub(lambda m: f"{m.group('pre')}{MASK}@", text)
    text = _QUERY_PARAM.sub(_query_value, text)
    return _KV_PASSWORD.sub(lambda m: f"{m.group('pre')}{MASK}", text)


def mask_secrets(value: Any, key: str = "") -> Any:
    """A copy of a config tree that is safe to print: values of secret keys become
    :data:`MASK` (booleans and ``None`` stay, they reveal nothing), passwords embedded in any
    other string are masked. pydantic ``SecretStr`` values are masked wherever they are."""
    if isinstance(value, dict):
        if key.lower() == "headers":  # any header may carry a credential
            return {k: v if v is None else MASK for k, v in value.items()}
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
