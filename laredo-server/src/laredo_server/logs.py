"""Server logging: one JSON object per line (``log_format = json``) or console lines, with
passwords in connection strings and URLs masked either way (:func:`laredo.secrets.mask_text`)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from laredo.secrets import mask_text

__all__ = ["JsonFormatter", "MaskingFormatter", "setup_logging"]


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...extra fields, "exc"}``, strings masked."""

    _STD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": mask_text(record.getMessage()),
        }
        for k, v in vars(record).items():
            if k not in self._STD and not k.startswith("_"):
                out[k] = v if isinstance(v, int | float | bool | type(None)) else mask_text(str(v))
        if record.exc_info:
            out["exc"] = mask_text(self.formatException(record.exc_info))
        return json.dumps(out)


class MaskingFormatter(logging.Formatter):
    """A plain formatter whose output is masked."""

    def format(self, record: logging.LogRecord) -> str:
        return mask_text(super().format(record))


def setup_logging(fmt: str = "console", level: str = "info") -> None:
    """Replace the root logger's handlers with one stderr handler in ``fmt`` (json or console)
    at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(MaskingFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
