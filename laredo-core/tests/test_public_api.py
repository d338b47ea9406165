"""The public names of ``laredo`` are pinned: adding or removing one is a deliberate API change
(update this list, the docs and the changelog together)."""

from __future__ import annotations

import laredo

PINNED = """
AddTimestamp BatchApplyError BatchTarget BufferOverflow BufferPolicy ChangeAction ChangeEvent
ChangeHandler ColumnDefinition CompositeObserver ConfigError DeadLetter DeadLetterError
DeadLetterReplayError DeadLetterStore DropFields DurablePositionTarget Engine EngineObserver
EngineStateError ErrorInfo ErrorPolicy FieldEquals FieldPrefix FieldRegex Index IndexDefinition
InvalidChangeError JsonlSerializer LagInfo LaredoError ListsKeys LocalDeadLetterStore
LocalSnapshotStore LoggingObserver MemoryDeadLetterStore MissingDependencyError NullObserver
Observer
OrderingGuarantee
Pipeline PipelineAware PipelineContext PipelineFilter PipelineInfo PipelineState
PipelineTransform PluginNotFoundError Position PositionedTarget ProgressTarget
ReBaselineRequired RecordingObserver RenameFields ReplayResult Resettable Row SchemaChangeAction
SchemaChangeEvent SchemaChangeResponse SnapshotDescriptor SnapshotError SnapshotMetadata
SnapshotNotFoundError SnapshotReplay SnapshotSerializer SnapshotStore SourceConfig SourceError
SourceRunInfo SourceState SyncMode SyncSource SyncTarget Table TableIdentifier TableProblem
TableSnapshotInfo TargetDoor TargetError Terminal TerminalError Transient TransientError
ValidationAction ValidationError ValidationFailed __version__ as_filter as_transform compiler
dead_letter_store events filter get_plugin_manager hookimpl observer retry_class serializer
snapshot_store source target transform
"""
PUBLIC = PINNED.split()


def test_the_public_names_are_pinned() -> None:
    assert list(laredo.__all__) == PUBLIC


def test_every_public_name_resolves_and_is_listed_once() -> None:
    assert len(set(PUBLIC)) == len(PUBLIC) and sorted(PUBLIC) == PUBLIC
    missing = [n for n in PUBLIC if not hasattr(laredo, n)]
    assert missing == []
