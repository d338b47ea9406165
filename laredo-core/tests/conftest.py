from __future__ import annotations

import laredo
import pytest


@pytest.fixture
def obs() -> laredo.RecordingObserver:
    return laredo.RecordingObserver()
