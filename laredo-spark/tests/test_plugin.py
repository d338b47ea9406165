"""The plugin entry point stays light: loading plugins never imports pyspark."""

from __future__ import annotations

import subprocess
import sys

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


def test_spark_baseline_config_errors_are_clear() -> None:
    from laredo.errors import ConfigError
    from laredo_spark.pg import _source_from

    with pytest.raises(ConfigError, match="needs a 'postgresql' source"):
        _source_from({"type": "kinesis"})
