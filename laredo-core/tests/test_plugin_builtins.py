from __future__ import annotations

from pathlib import Path

import laredo
import pytest
from laredo.deadletter import LocalDeadLetterStore, MemoryDeadLetterStore
from laredo.plugins import PluginManager
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.snapshots.parquet import ParquetSerializer

EXPECTED = {
    "filter": {"field-equals", "field-prefix", "field-regex"},
    "transform": {"drop-fields", "rename-fields", "add-timestamp"},
    "snapshot_store": {"local"},
    "serializer": {"jsonl", "parquet"},
    "dead_letter_store": {"memory", "local"},
    "observer": {"null", "logging"},
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_core_registers_builtins_through_its_entry_point(kind: str) -> None:
    pm = PluginManager(autoload=True)
    reg = pm.registry(kind)
    assert EXPECTED[kind] <= set(reg.names())
    for name in EXPECTED[kind]:
        assert reg.get(name).provider.startswith("laredo-core")


def test_builders(tmp_path: Path) -> None:
    assert isinstance(laredo.serializer("jsonl"), JsonlSerializer)
    ser = laredo.serializer("parquet", compression="snappy", row_group_size=10)
    assert isinstance(ser, ParquetSerializer) and ser.compression == "snappy"
    store = laredo.snapshot_store("local", path=str(tmp_path), fsync=False)
    assert isinstance(store, LocalSnapshotStore) and store.base == tmp_path
    assert isinstance(laredo.dead_letter_store("memory"), MemoryDeadLetterStore)
    dl = laredo.dead_letter_store("local", path=str(tmp_path / "dl"))
    assert isinstance(dl, LocalDeadLetterStore)


@pytest.mark.parametrize(
    ("kind", "name", "config", "words"),
    [
        ("snapshot_store", "local", {}, "path"),
        ("snapshot_store", "local", {"path": "/x", "pth": 1}, "pth"),
        ("serializer", "parquet", {"compression": "zip"}, "compression"),
        ("serializer", "parquet", {"row_group_size": 0}, "row_group_size"),
        ("dead_letter_store", "local", {"dir": "/x"}, "dir"),
        ("dead_letter_store", "memory", {"x": 1}, "x"),
    ],
)
def test_bad_options_are_config_errors(kind: str, name: str, config: dict, words: str) -> None:
    with pytest.raises(laredo.ConfigError) as err:
        laredo.get_plugin_manager().registry(kind).build(name, **config)
    assert words in str(err.value)
