"""The core source conformance suite, run against the Kinesis source (moto server)."""

from __future__ import annotations

from typing import Any

import pytest
from laredo.testing.source_conformance import SourceConformance
from laredo.types import TableIdentifier
from laredo_source_kinesis import KinesisSource, encode_record
from laredo_source_kinesis.testing import USERS, put, write_baseline

pytestmark = pytest.mark.integration


class TestKinesisSourceConformance(SourceConformance):
    @pytest.fixture
    def table(self) -> TableIdentifier:
        return USERS

    @pytest.fixture
    def source(
        self,
        moto_server: Any,
        s3_bucket: str,
        make_kinesis_stream: Any,
        make_source: Any,
        dynamodb_table_name: str,
    ) -> KinesisSource:
        write_baseline(moto_server.client("s3"), s3_bucket, "baseline/", {USERS: [{"id": 0}]})
        self.kinesis = moto_server.client("kinesis")
        self.counter = 0
        return make_source(  # type: ignore[no-any-return]
            make_kinesis_stream(shards=2),
            checkpoint_table=dynamodb_table_name,
            create_checkpoint_table=True,
        )

    def produce_changes(self, source: Any, table: TableIdentifier, n: int) -> None:
        for _ in range(n):
            self.counter += 1
            i = self.counter
            put(
                self.kinesis,
                source.stream_name,
                encode_record(table, "INSERT", new={"id": i}),
                "one-key",
            )
