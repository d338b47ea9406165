"""Short, clear errors out of Spark's long ones.

A failing Spark task reaches the driver as a Py4J / captured Spark exception whose text holds
the worker's whole Python traceback and JVM stack. :func:`task_failure` finds the Laredo error
the task raised (its class and one-line message) and gives it back as that class, with the
context of the job; :func:`short_error` keeps ``foreachBatch`` errors short (a long Py4J
message can crash Spark's stream thread with a StackOverflowError).
"""

from __future__ import annotations

import re

from laredo import errors as laredo_errors
from laredo.errors import LaredoError

__all__ = ["short_error", "task_failure"]

# "laredo.errors.SourceError: message" (one line) in a worker traceback
_RAISED = re.compile(r"^laredo[\w.]*\.(\w+): (.+)$", re.MULTILINE)
_SIMPLE = {"SourceError", "SnapshotError", "TargetError", "LaredoError"}


def short_error(where: str, exc: BaseException) -> RuntimeError:
    """A ``RuntimeError`` naming ``where`` and the first 300 characters of ``exc``."""
    return RuntimeError(f"{where}: {type(exc).__name__}: {str(exc)[:300]}")


def task_failure(exc: BaseException, where: str, default: type[LaredoError]) -> LaredoError:
    """The Laredo error a Spark task raised inside ``exc`` (the last one in its text), as its
    own class when it is a plain Laredo error (else ``default``), prefixed by ``where``; or
    ``default`` with the first line of ``exc`` when no task raised a Laredo error."""
    if isinstance(exc, LaredoError):
        return exc
    text = str(exc)
    found = _RAISED.findall(text)
    if found:
        name, message = found[-1]
        cls = getattr(laredo_errors, name, None) if name in _SIMPLE else None
        if not (isinstance(cls, type) and issubclass(cls, LaredoError)):
            cls = default
        return cls(f"{where}: {message.strip()}")
    first = next((line.strip() for line in text.splitlines() if line.strip()), repr(exc))
    return default(f"{where}: {type(exc).__name__}: {first[:500]}")
