"""The one error hierarchy of Laredo.

Every error pickles (the Spark runner ships them between processes). Whether retrying may help
is said by one of two marker mix-ins, :class:`Transient` or :class:`Terminal`, and read by one
function, :func:`retry_class`, which every retry policy (pipeline workers, source restarts)
calls. Plugins mark their own errors the same way::

    class ThrottledError(laredo.TargetError, laredo.Transient): ...
    class RejectedError(laredo.TargetError, laredo.Terminal): ...
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal


class Transient:
    """Marker mix-in: retrying may succeed (connection lost, timeout, throttling)."""


class Terminal:
    """Marker mix-in: retrying will not help (bad data, a 4xx answer, a missing key)."""


RetryClass = Literal["transient", "terminal", "unknown"]


def retry_class(exc: BaseException) -> RetryClass:
    """``"transient"``, ``"terminal"`` or ``"unknown"`` (an error without a marker: pipeline
    workers retry it, source streams do not restart on it)."""
    if isinstance(exc, Terminal):
        return "terminal"
    if isinstance(exc, Transient):
        return "transient"
    return "unknown"


class LaredoError(Exception):
    """Base of all Laredo errors. Do not raise it directly; raise a subclass."""

    @property
    def transient(self) -> bool:
        """``retry_class(self) == "transient"`` (kept for readers of the 0.1 attribute)."""
        return isinstance(self, Transient)

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, self.args)


class TransientError(LaredoError, Transient):
    """A failure that may succeed when retried (connection lost, timeout, throttling)."""


class TerminalError(LaredoError, Terminal):
    """A failure that will not go away by retrying."""


class ConfigError(LaredoError, ValueError):
    """Invalid configuration. ``problems`` lists every problem found, not just the first."""

    def __init__(self, problems: str | Sequence[str]) -> None:
        items = [problems] if isinstance(problems, str) else list(problems)
        self.problems: list[str] = items
        if len(items) == 1:
            msg = items[0]
        else:
            msg = f"{len(items)} configuration problems:\n" + "\n".join(f"  - {p}" for p in items)
        super().__init__(msg)

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.problems,))


class PluginNotFoundError(ConfigError):
    """A plugin name that no installed package registers."""


class MissingDependencyError(LaredoError, ImportError):
    """An optional dependency is not installed. The message is the ``pip install`` line."""

    def __init__(self, package: str, feature: str = "") -> None:
        self.package = package
        self.feature = feature
        what = f" for {feature}" if feature else ""
        super().__init__(f"missing dependency{what}: pip install {package}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.package, self.feature))


class EngineStateError(LaredoError):
    """An engine call that is not valid in the engine's current lifecycle state."""


class SourceError(LaredoError):
    """A source failed (connect, baseline, stream)."""


class ReBaselineRequired(SourceError):
    """Raised by ``SyncSource.stream`` to make the engine re-run the baseline of the source.

    The engine replaces every target's state (truncate, then baseline): no stale rows survive.
    """


class TargetError(LaredoError):
    """A target failed to apply a change."""


class InvalidChangeError(TargetError, Terminal):
    """A change that lacks what its action needs (an INSERT without values, a DELETE without
    its identity): no target can apply it."""


class BatchApplyError(TargetError):
    """Raised by ``apply_changes`` to say ``events[:index]`` were applied and ``events[index]``
    failed (chain the cause). The engine then retries change by change from ``index``."""

    def __init__(self, index: int, message: str = "") -> None:
        self.index = index
        super().__init__(message or f"batch apply failed at change #{index}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.index, str(self)))


class BufferOverflow(TargetError):
    """A pipeline's buffer was full under the ``error`` buffer policy."""


class DeadLetterError(LaredoError):
    """A dead-letter file could not be read or written."""


class DeadLetterReplayError(TargetError):
    """Replay stopped at an entry the target rejected; ``replayed`` entries were applied and
    removed, the rest are still stored."""

    def __init__(self, pipeline_id: str, replayed: int, message: str) -> None:
        self.pipeline_id = pipeline_id
        self.replayed = replayed
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.pipeline_id, self.replayed, str(self)))


class SnapshotError(LaredoError):
    """A snapshot could not be written, read or restored."""


class SnapshotNotFoundError(SnapshotError, LookupError):
    """No snapshot with that id (maps to gRPC NOT_FOUND)."""

    def __init__(self, snapshot_id: str, where: str = "") -> None:
        self.snapshot_id = snapshot_id
        self.where = where
        loc = f" in {where}" if where else ""
        super().__init__(f"snapshot {snapshot_id!r} not found{loc}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.snapshot_id, self.where))


class ValidationFailed(LaredoError):
    """Table validation failed at startup (see ``TableProblem`` items)."""

    def __init__(self, errors: Iterable[Any]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.errors,))


def grpc_status_name(exc: BaseException) -> str:
    """Map an error to a gRPC status code name (used by every gRPC service)."""
    if isinstance(exc, PluginNotFoundError | ConfigError | ValueError):
        return "INVALID_ARGUMENT"
    if isinstance(exc, KeyError | LookupError):
        return "NOT_FOUND"
    if isinstance(exc, EngineStateError):
        return "FAILED_PRECONDITION"
    if isinstance(exc, MissingDependencyError):
        return "UNIMPLEMENTED"
    if isinstance(exc, TimeoutError):
        return "DEADLINE_EXCEEDED"
    if retry_class(exc) == "transient":
        return "UNAVAILABLE"
    return "INTERNAL"


def aws_error_code(exc: BaseException) -> str:
    """The service's error code of an AWS SDK error (botocore's ``ClientError``:
    ``exc.response["Error"]["Code"]``, e.g. ``"NoSuchKey"``, ``"404"``), else ``""``. Duck-typed,
    so core needs no AWS SDK; every plugin talking to AWS reads codes through it."""
    resp = getattr(exc, "response", None)
    if not isinstance(resp, dict):
        return ""
    error = resp.get("Error")
    return str(error.get("Code", "")) if isinstance(error, dict) else ""
