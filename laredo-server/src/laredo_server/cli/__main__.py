"""``python -m laredo_server.cli``: the ``laredo`` command."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
