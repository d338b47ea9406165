from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from laredo_server_testkit import Harness, QuickTestPlugin


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path).start()
    yield h
    h.stop()


@pytest.fixture
def quicktest_plugin() -> Iterator[None]:
    import laredo

    pm = laredo.get_plugin_manager()
    plugin = QuickTestPlugin()
    pm.register(plugin, name="quicktest-plugin")
    yield
    pm.unregister(plugin)
