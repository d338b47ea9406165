"""Fuzz tests (issue 21): every decoder that reads bytes from the network or a store, driven by
hypothesis. Each test raises only the decoder's documented error and is bounded in time.

Budget: ``LAREDO_FUZZ_EXAMPLES`` examples per test (default 100, derandomized, so the normal
test run stays short and repeatable); ``./dev fuzz`` runs 20 000 with a random seed. Every input
that ever crashed a decoder is kept as an ``@example`` next to its test.
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("LAREDO_FUZZ_EXAMPLES", "100"))

settings.register_profile(
    "laredo-fuzz",
    max_examples=EXAMPLES,
    deadline=timedelta(seconds=2),  # one input: a decoder that takes longer is a finding
    derandomize="LAREDO_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None if "LAREDO_FUZZ_EXAMPLES" not in os.environ else settings.default.database,
)
"""Test modules here decorate with ``@settings.get_profile("laredo-fuzz")``."""
