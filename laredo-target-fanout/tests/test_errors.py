"""Fan-out errors are laredo errors, marked for retry, with one mapping to gRPC statuses."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import grpc
import laredo
import pytest
from laredo.errors import retry_class
from laredo_target_fanout.client import GapError, ResyncRequired
from laredo_target_fanout.service import status_code
from laredo_target_fanout.sessions import ClientSession, Exhausted, Replaced, Unavailable
from laredo_target_fanout.target import Exhausted as ExhaustedFromTarget


@pytest.mark.parametrize("cls", [GapError, ResyncRequired, Unavailable, Exhausted])
def test_errors_are_transient_laredo_errors_that_pickle(cls: type[Exception]) -> None:
    err = cls("why")
    assert isinstance(err, laredo.LaredoError) and retry_class(err) == "transient"
    assert str(pickle.loads(pickle.dumps(err))) == "why"


def test_one_status_mapping() -> None:
    assert ExhaustedFromTarget is Exhausted
    assert status_code(Unavailable("x")) is grpc.StatusCode.UNAVAILABLE
    assert status_code(Exhausted("x")) is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert status_code(Replaced("x")) is grpc.StatusCode.ABORTED
    assert status_code(laredo.ConfigError("bad filter")) is grpc.StatusCode.INVALID_ARGUMENT


def test_close_codes_end_a_stream_with_their_error() -> None:
    s = ClientSession("c", "peer", laredo.SyncMode.DELTA, 0, 0, datetime.now(UTC))
    s.close_reason = "client buffer overflow"
    assert isinstance(s.close_error("overflow"), Exhausted)
    assert str(s.close_error("overflow")) == "client buffer overflow"
    assert isinstance(s.close_error("replaced"), Replaced)
    assert isinstance(s.close_error("closed"), Unavailable)
    assert s.close_error("resync") is None and s.close_error("drained") is None
