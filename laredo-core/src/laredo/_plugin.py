"""laredo-core's own plugin: built-in filters, transforms, stores, serializers and observers.

Registered through the ``laredo`` entry point of the ``laredo-core`` distribution, exactly as a
third-party plugin would be. Heavy optional dependencies (pyarrow) are imported only when a
Parquet serializer is used.
"""

from __future__ import annotations

import pydantic
from pydantic import ConfigDict

from .deadletter import LocalDeadLetterStore, LocalDeadLetterStoreOptions, MemoryDeadLetterStore
from .filters import (
    FieldEquals,
    FieldEqualsOptions,
    FieldPrefix,
    FieldPrefixOptions,
    FieldRegex,
    FieldRegexOptions,
)
from .hookspecs import hookimpl
from .observers import LoggingObserver, NullObserver
from .plugins import Registry
from .snapshots.jsonl import JsonlSerializer
from .snapshots.local import LocalSnapshotStore, LocalSnapshotStoreOptions
from .snapshots.parquet import ParquetSerializer, ParquetSerializerOptions
from .transforms import (
    AddTimestamp,
    AddTimestampOptions,
    DropFields,
    DropFieldsOptions,
    RenameFields,
    RenameFieldsOptions,
)


class NoOptions(pydantic.BaseModel):
    """For plugins that take no options: any key is reported as unknown."""

    model_config = ConfigDict(extra="forbid")


@hookimpl
def laredo_register_observers(registry: Registry) -> None:
    registry.add("null", NullObserver, description="does nothing")
    registry.add("logging", LoggingObserver, description="logs engine events")


@hookimpl
def laredo_register_filters(registry: Registry) -> None:
    registry.add(
        "field-equals", FieldEquals, options=FieldEqualsOptions, description="field == value"
    )
    registry.add(
        "field-prefix",
        FieldPrefix,
        options=FieldPrefixOptions,
        description="string field starts with prefix",
    )
    registry.add(
        "field-regex",
        FieldRegex,
        options=FieldRegexOptions,
        description="string field contains a match of pattern",
    )


@hookimpl
def laredo_register_transforms(registry: Registry) -> None:
    registry.add("drop-fields", DropFields, options=DropFieldsOptions, description="remove fields")
    registry.add(
        "rename-fields",
        RenameFields,
        options=RenameFieldsOptions,
        description="rename fields old -> new",
    )
    registry.add(
        "add-timestamp",
        AddTimestamp,
        options=AddTimestampOptions,
        description="add the processing time (UTC)",
    )


@hookimpl
def laredo_register_snapshot_stores(registry: Registry) -> None:
    registry.add(
        "local",
        LocalSnapshotStore,
        options=LocalSnapshotStoreOptions,
        description="snapshots in a local directory",
    )


@hookimpl
def laredo_register_serializers(registry: Registry) -> None:
    registry.add(
        "jsonl", JsonlSerializer, options=NoOptions, description="JSON lines, typed values"
    )
    registry.add(
        "parquet",
        ParquetSerializer,
        options=ParquetSerializerOptions,
        description="Parquet (needs laredo-core[parquet])",
    )


@hookimpl
def laredo_register_dead_letter_stores(registry: Registry) -> None:
    registry.add(
        "memory", MemoryDeadLetterStore, options=NoOptions, description="in-process dead letters"
    )
    registry.add(
        "local",
        LocalDeadLetterStore,
        options=LocalDeadLetterStoreOptions,
        description="one JSONL file per pipeline in a local directory",
    )
