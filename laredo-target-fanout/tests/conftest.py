from __future__ import annotations

from collections.abc import Iterator

import pytest
from laredo_target_fanout.testing import Rig


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    try:
        yield r
    finally:
        r.stop()
