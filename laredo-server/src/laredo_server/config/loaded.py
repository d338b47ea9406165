""":class:`LoadedConfig`: the merged configuration tree, the files it came from, and where in
them a key is written."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .models import ServerConfig

__all__ = ["LoadedConfig"]

_COMMENT = re.compile(r"(^|\s)(#|//).*$")


def _key_pattern(name: str) -> re.Pattern[str]:
    return re.compile(r'(^|[{,\s])"?' + re.escape(name) + r'"?\s*[=:{]')


@dataclass
class LoadedConfig:
    """The merged, overridden, normalised tree plus where its files came from."""

    tree: dict[str, Any]
    files: list[Path] = field(default_factory=list)
    applied_env: list[str] = field(default_factory=list)
    applied_sets: list[str] = field(default_factory=list)
    texts: dict[Path, list[str]] = field(default_factory=dict)
    """The lines of every file read (the main file, its includes, conf.d), for :meth:`locate`."""
    model: ServerConfig | None = None
    notes: list[str] = field(default_factory=list)
    """Deprecation notes: each Go Laredo spelling accepted (keys, environment forms), naming
    ours (:mod:`.gocompat`)."""

    def locate(self, path: Sequence[Any]) -> str:
        """Best-effort ``file:line`` of a key path (pyhocon keeps no positions)."""
        names = [str(p) for p in path if not isinstance(p, int) and not str(p).isdigit()]
        if not names:
            return ""
        pat = _key_pattern(names[-1])
        hits: list[tuple[Path, int]] = []
        for f, lines in self.texts.items():
            for i, line in enumerate(lines, 1):
                if pat.search(_COMMENT.sub("", line)):
                    hits.append((f, i))
        if not hits:
            return ""
        if len(hits) > 1 and len(names) > 1:
            ppat = _key_pattern(names[-2])
            narrowed = []
            for f, i in hits:
                before = self.texts[f][:i]
                if any(ppat.search(_COMMENT.sub("", x)) for x in before):
                    narrowed.append((f, i))
            hits = narrowed or hits
        f, i = hits[0]
        more = f" (+{len(hits) - 1} more)" if len(hits) > 1 else ""
        return f"{f}:{i}{more}"

    def with_location(self, path: Sequence[Any], message: str) -> str:
        """``key.path: message [file:line]`` (the location when it can be found)."""
        key = ".".join(str(p) for p in path)
        where = self.locate(path)
        return f"{key}: {message}" + (f" [{where}]" if where else "")
