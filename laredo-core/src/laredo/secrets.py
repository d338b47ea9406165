"""One rule for what is secret and how it is masked, used by every package.

* A **secret key** is an option or config key whose value is a credential as a whole:
  its name contains ``password``, ``passwd``, ``passphrase``, ``secret``, ``token``, ``auth``
  (``auth_header``, ``authorization``), ``credential``, ``api_key``/``apikey``/``api-key``,
  ``access_key``, ``private_key``, ``session_key``, ``subscription_key``, ``account_key``
  (``azure_storage_account_key``, ``google_service_account_key``), ``master_key``,
  ``shared_key``, ``sas_key``/``sas_token``, ``encryption_key``, ``customer_key``,
  ``connection_string``, ``cookie`` or ``signature`` (``_`` or ``-`` between the words), or it
  ends with ``-key`` (a header name such as ``Ocp-Apim-Subscription-Key``). Its value is never
  printed: :data:`MASK` stands in for it. Every value under a ``headers`` key is masked too,
  whatever the header's name, and so is every value under ``storage_options`` (object-store
  options: delta-rs/object_store and botocore names) except the few that name a place or a
  switch (:data:`PUBLIC_STORE_KEYS`: region, endpoint, bucket, account name, ``allow_http``...).
* Any other **text** may embed a password: ``scheme://user:PASSWORD@host``, a libpq
  ``password=...`` or ``sslpassword=...`` pair, a URL query parameter whose name is a secret
  key (``?password=``, ``&token=``, ``?api_key=``, ``&sig=``), an Azure connection string's
  ``AccountKey=``/``SharedAccessSignature=``, or a quoted pair of a dict's repr or JSON whose
  key is a secret key (``'azure_storage_account_key': '...'``). :func:`mask_text` replaces those
  values and keeps the rest (host, database, user), so a connection string stays useful in an
  error message. It runs in time linear in the length of the text, and masks at most
  :data:`MAX_TEXT` characters: longer text is cut there (the cut is marked).

Config dumps use :func:`mask_secrets`; error messages that echo a value use
:func:`show_value`; reprs of connection strings use :func:`mask_text`.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import SecretBytes, SecretStr

__all__ = [
    "MASK",
    "MAX_TEXT",
    "PUBLIC_STORE_KEYS",
    "is_secret_key",
    "mask_secrets",
    "mask_storage_options",
    "mask_text",
    "show_value",
]

MASK = "***"

MAX_TEXT = 256 * 1024
"""Longest text :func:`mask_text` returns; longer text is cut (a log line, an error)."""

_SECRET_KEY = re.compile(
    r"pass(?:word|wd|phrase)|secret|token|auth|credential|api[_-]?key|access[_-]?key|"
    r"private[_-]?key|session[_-]?key|subscription[_-]?key|account[_-]?key|master[_-]?key|"
    r"shared[_-]?key|sas[_-]?(?:key|token)|encryption[_-]?key|customer[_-]?key|"
    r"connection[_-]?string|cookie|signature|-key$",
    re.IGNORECASE,
)
_STORE_OPTIONS = ("storage_options", "storage-options", "store_options")
PUBLIC_STORE_KEYS = re.compile(
    r"region|endpoint|bucket|account[_-]?name|container[_-]?name|allow[_-]?http|"
    r"allow[_-]?invalid[_-]?certificates|use[_-]?emulator|virtual[_-]?hosted|"
    r"conditional[_-]?put|timeout|s3[_-]?express|profile|skip[_-]?signature|"
    r"use[_-]?fabric|disable[_-]?imds|unsigned|force[_-]?path[_-]?style",
    re.IGNORECASE,
)
"""``storage_options`` keys shown (masked as text); every other value there is masked."""
# Every pattern starts at a boundary its first part cannot continue (the lookbehinds), so no
# start position rescans a run another start already scanned: linear time.
_URI_PASSWORD = re.compile(
    r"(?<![a-zA-Z0-9+.-])(?P<pre>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s]*:)(?P<pw>[^@/?#\s]*)@"
)
_QUERY_PARAM = re.compile(r"(?P<pre>[?&](?P<key>[A-Za-z0-9_.~-]{1,64})=)(?P<pw>[^&#\s]*)")
_QUERY_SECRET = re.compile(r"^(?:sig|key|pwd|pass)$", re.IGNORECASE)
_CONN_STRING = re.compile(
    r"(?P<pre>(?<![\w])(?:AccountKey|SharedAccessKey|SharedAccessSignature)=)(?P<pw>[^;\s'\"]*)",
    re.IGNORECASE,
)
# a quoted key and value (a dict's repr, JSON): the value stops at its closing quote, so a
# start never scans past the next quote and the pattern stays linear
_QUOTED_PAIR = re.compile(
    r"(?P<pre>(?P<q>['\"])(?P<key>[A-Za-z0-9_.-]{1,64})(?P=q)\s*:\s*)"
    r"(?P<pw>'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")"
)
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
    text = _QUOTED_PAIR.sub(_quoted_value, text)
    text = _URI_PASSWORD.sub(lambda m: f"{m.group('pre')}{MASK}@", text)
    text = _QUERY_PARAM.sub(_query_value, text)
    text = _CONN_STRING.sub(lambda m: f"{m.group('pre')}{MASK}", text)
    return _KV_PASSWORD.sub(lambda m: f"{m.group('pre')}{MASK}", text)


def _quoted_value(m: re.Match[str]) -> str:
    if not is_secret_key(m.group("key")):
        return m.group(0)
    q = m.group("pw")[0]
    return f"{m.group('pre')}{q}{MASK}{q}"


def mask_secrets(value: Any, key: str = "") -> Any:
    """A copy of a config tree that is safe to print: values of secret keys become
    :data:`MASK` (booleans and ``None`` stay, they reveal nothing), passwords embedded in any
    other string are masked. pydantic ``SecretStr`` values are masked wherever they are."""
    if isinstance(value, dict):
        if key.lower() == "headers":  # any header may carry a credential
            return {k: v if v is None else MASK for k, v in value.items()}
        if key.lower() in _STORE_OPTIONS:
            return mask_storage_options(value)
        return {k: mask_secrets(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_secrets(v, key) for v in value]
    if value is None or isinstance(value, bool):
        return value
    if is_secret_key(key) or isinstance(value, SecretStr | SecretBytes):
        return MASK
    if isinstance(value, str):
        return mask_text(value)
    return value


def mask_storage_options(options: dict[Any, Any] | None) -> dict[Any, Any]:
    """Object-store options (delta-rs/object_store, botocore) as they may be printed: every
    value masked but those of :data:`PUBLIC_STORE_KEYS` (region, endpoint, ...), and those
    masked as text; booleans and ``None`` stay."""
    out: dict[Any, Any] = {}
    for k, v in (options or {}).items():
        if v is None or isinstance(v, bool):
            out[k] = v
        elif PUBLIC_STORE_KEYS.search(str(k)) and not is_secret_key(k):
            out[k] = mask_secrets(v)
        else:
            out[k] = MASK
    return out


def show_value(key: object, value: Any, limit: int = 60) -> str | None:
    """The ``repr`` of ``value`` for an error message about ``key``, masked and shortened;
    ``None`` when the value must not be shown at all (a secret key)."""
    if is_secret_key(key):
        return None
    shown = repr(mask_secrets(value))
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."
