"""Connection-string helpers: masking passwords for logs, errors and reprs."""

from __future__ import annotations

import re

__all__ = ["mask_dsn", "mask_text"]

_URI_PASSWORD = re.compile(r"(?P<pre>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s]*:)(?P<pw>[^@/?#\s]*)@")
_KV_PASSWORD = re.compile(
    r"(?P<pre>\bpassword\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|[^\s]+)", re.IGNORECASE
)
_QUERY_PASSWORD = re.compile(r"(?P<pre>[?&]password=)(?P<pw>[^&\s]*)", re.IGNORECASE)


def mask_text(text: str) -> str:
    """Replace every password in ``text`` (URI userinfo, ``password=``, ``?password=``)."""
    text = _URI_PASSWORD.sub(lambda m: f"{m.group('pre')}***@", text)
    text = _QUERY_PASSWORD.sub(lambda m: f"{m.group('pre')}***", text)
    return _KV_PASSWORD.sub(lambda m: f"{m.group('pre')}***", text)


def mask_dsn(dsn: object) -> str:
    """A connection string safe to log: the password (if any) becomes ``***``."""
    return mask_text(str(dsn))
