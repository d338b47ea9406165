"""Confinement of a Delta table's data files to the table's root (local and object stores).

A Delta log names its data files; the protocol allows absolute URIs there (shallow clones), and
delta-rs reads whatever it is given. A forged log (anyone who can write ``_delta_log``) could
so make a reader load Parquet files outside the table: ``../other/x.parquet``,
``file:///etc/...``, ``s3://other-bucket/...``. Every read of a table's rows goes through
:func:`check_files` first: a file that does not resolve under the table's root is refused with
an :class:`~laredo.errors.LaredoError` naming the path and the table.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["check_files", "confined", "outside"]


def _split(uri: str) -> tuple[str, str, str]:
    """(scheme, bucket, normalized path) of a table or file location; local paths resolve
    symlinks (``file`` scheme, empty bucket)."""
    if "://" not in uri:
        return "file", "", os.path.realpath(uri)
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return "file", "", os.path.realpath(unquote(parts.path))
    path = posixpath.normpath("/" + unquote(parts.path).lstrip("/"))
    return scheme, parts.netloc.lower(), path


def _within(root: str, path: str, sep: str) -> bool:
    root = root.rstrip(sep) or sep
    return path == root or path.startswith(root if root.endswith(sep) else root + sep)


def outside(root_uri: str, file_path: str) -> str | None:
    """Why ``file_path`` (an ``add.path`` from the log: relative, or an absolute URI) is not
    inside the table at ``root_uri``; None when it is."""
    raw = unquote(file_path)
    if not raw or "\x00" in raw:
        return "an empty or NUL-holding path"
    r_scheme = _split(root_uri)[0]
    if "://" in raw:
        target = raw
    elif raw.startswith(("/", "\\")) or (len(raw) > 1 and raw[1] == ":"):
        if r_scheme != "file":
            return "an absolute path"
        target = "file://" + raw
    else:
        if any(seg == ".." for seg in raw.replace("\\", "/").split("/")):
            return "a relative path that climbs out with '..'"
        target = root_uri.rstrip("/") + "/" + raw
    _, r_bucket, r_path = _split(root_uri)
    t_scheme, t_bucket, t_path = _split(target)
    if (r_scheme, r_bucket) != (t_scheme, t_bucket):
        return "a file in another store or bucket"
    sep = os.sep if r_scheme == "file" else "/"
    if not _within(r_path, t_path, sep):
        return "a file outside the table's directory"
    return None


def confined(root_uri: str, paths: Iterable[str]) -> list[tuple[str, str]]:
    """The (path, reason) of every path in ``paths`` that is not inside the table."""
    out = []
    for p in paths:
        why = outside(root_uri, p)
        if why is not None:
            out.append((p, why))
    return out


def check_files(dt: Any, uri: str, error: type[Exception]) -> None:
    """Raise ``error`` when a data file of ``dt``'s loaded version is not inside the table at
    ``uri`` (the log's paths: forged logs point elsewhere)."""
    import pyarrow as pa  # noqa: PLC0415 - lazy: pyarrow, only when reading

    actions = pa.table(dt.get_add_actions(flatten=False))
    paths = [str(p) for p in actions.column("path").to_pylist()]
    bad = confined(dt.table_uri, paths)
    if bad:
        path, why = bad[0]
        raise error(
            f"uri = {uri!r}: version {dt.version()} of the Delta log names {path!r}, {why}; "
            f"refused ({len(bad)} such file(s)): a Delta log may only name files inside its "
            "table. Restore the log from a trusted copy or re-baseline into a fresh uri"
        )
