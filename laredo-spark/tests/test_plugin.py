"""The plugin entry point stays light: loading plugins never imports pyspark."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def test_loading_plugins_does_not_import_pyspark() -> None:
    code = (
        "import sys, laredo; laredo.get_plugin_manager().load();"
        "import laredo_spark._plugin;"
        "print('pyspark' in sys.modules, 'laredo_spark' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_spark_baseline_config_errors_are_clear(tmp_path: Any) -> None:
    """Checked before any Spark session or database connection is used."""
    import laredo
    from laredo.errors import ConfigError
    from laredo.snapshots.local import LocalSnapshotStore
    from laredo_spark import spark_baseline

    store = LocalSnapshotStore(tmp_path)
    pipe = laredo.Pipeline("pg", "public.t", object())
    cfg = {"connection": "postgresql://x@127.0.0.1:1/x", "slot_mode": "stateful"}
    with pytest.raises(ConfigError, match="needs a 'postgresql' source"):
        spark_baseline(None, {"type": "kinesis"}, [pipe], snapshot_store=store)
    for bad in (0, -2, 1.5):
        with pytest.raises(ConfigError, match=r"partitions must be an integer >= 1"):
            spark_baseline(None, cfg, [pipe], snapshot_store=store, partitions=bad)
    with pytest.raises(ConfigError, match=r"cannot take parts written by Spark tasks"):
        spark_baseline(None, cfg, [pipe], snapshot_store=object())
