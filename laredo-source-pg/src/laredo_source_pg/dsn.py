"""Connection-string helpers: masking passwords for logs, errors and reprs.

The masking rule is core's (:func:`laredo.secrets.mask_text`); this module keeps the names the
package has always exported.
"""

from __future__ import annotations

from laredo.secrets import mask_text

__all__ = ["mask_dsn", "mask_text"]


def mask_dsn(dsn: object) -> str:
    """A connection string safe to log: the password (if any) becomes ``***``."""
    return mask_text(str(dsn))
