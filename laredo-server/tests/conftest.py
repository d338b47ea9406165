from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import laredo
import pytest

from .testkit import Harness, QuickTestPlugin


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path).start()
    yield h
    h.stop()


@pytest.fixture
def quicktest_plugin() -> Iterator[None]:
    pm = laredo.get_plugin_manager()
    plugin = QuickTestPlugin()
    pm.register(plugin, name="quicktest-plugin")
    yield
    pm.unregister(plugin)
