"""AWS benchmarks against an in-process moto server: our figure beside a limit from the same run.

    .venv/bin/python benchmarks/aws.py [--rows 200000] [--records 20000] [--repeat 3]

Rows and records are typed (int, text, Decimal, datetime). Per measurement, medians of
``--repeat`` runs; ratio = ours / limit (throughput, higher is better, 1.00 = at the limit):

* ``snapshot save``: ``S3SnapshotStore.save`` (JSONL serializer, streaming multipart upload at
  8 MiB parts) vs. the same rows serialised into memory then uploaded with boto3's managed
  ``upload_fileobj`` (same part size): the cost of streaming and the store's bookkeeping.
* ``snapshot load``: ``S3SnapshotStore.load`` iterated to the end vs. ``get_object().read()``
  of the same object then ``JsonlSerializer.read`` over a ``BytesIO``.
* ``kinesis baseline``: ``KinesisSource.baseline_batches`` over one JSONL object vs. a bare
  ``get_object`` + ``loads_row`` per line.
* ``kinesis stream``: records/s from ``KinesisSource.stream`` (2 shards, parsing, positions,
  events) to a no-op handler vs. a bare loop over the same shards calling ``get_records`` and
  ``json.loads`` per record. moto's server dominates both; the ratio shows our overhead.

moto is a Python fake, so absolute figures say nothing about AWS; the ratios say how close
our code gets to what the same client stack can do here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import statistics
import threading
import time
from decimal import Decimal
from typing import Any

from laredo import serialization
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.types import SnapshotMetadata, SourceConfig, TableIdentifier, TableSnapshotInfo
from laredo_snapshot_s3 import S3SnapshotStore
from laredo_snapshot_s3.testing import moto_server_running, wait_stream_active
from laredo_source_kinesis import KinesisPosition, KinesisSource, dumps_record, encode_record

T = TableIdentifier("public", "bench")
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
PART = 8 * 1024 * 1024


def rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "name": f"name-{i}",
            "amount": Decimal(f"{i}.25"),
            "at": T0 + dt.timedelta(seconds=i),
        }
        for i in range(n)
    ]


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_snapshots(server: Any, n: int, repeat: int) -> list[tuple[str, float, float, str]]:
    s3 = server.client("s3")
    bucket = "laredo-bench-snap"
    s3.create_bucket(Bucket=bucket)
    data = rows(n)
    ser = JsonlSerializer()
    store = S3SnapshotStore(bucket, "snaps", endpoint_url=server.endpoint_url)
    meta = SnapshotMetadata("x", T0, {}, (TableSnapshotInfo(T, n),))
    from boto3.s3.transfer import TransferConfig

    cfg = TransferConfig(multipart_threshold=PART, multipart_chunksize=PART, use_threads=False)
    save_ours, save_limit, load_ours, load_limit = [], [], [], []
    for r in range(repeat):
        sid = f"s{r}"
        save_ours.append(n / timed(lambda sid=sid: store.save(sid, meta, {T: data}, ser)))

        def limit_save(r: int = r) -> None:
            buf = io.BytesIO()
            ser.write(TableSnapshotInfo(T, n), data, buf)
            buf.seek(0)
            s3.upload_fileobj(buf, bucket, f"raw/{r}.jsonl", Config=cfg)

        save_limit.append(n / timed(limit_save))

        def ours_load(sid: str = sid) -> None:
            _, tables = store.load(sid, ser)
            for _ in tables[T]:
                pass

        def limit_load(r: int = r) -> None:
            body = s3.get_object(Bucket=bucket, Key=f"raw/{r}.jsonl")["Body"].read()
            _, it = ser.read(io.BytesIO(body))
            for _ in it:
                pass

        load_ours.append(n / timed(ours_load))
        load_limit.append(n / timed(limit_load))
    med = statistics.median
    return [
        ("snapshot save (rows/s)", med(save_ours), med(save_limit), "upload_fileobj of bytes"),
        ("snapshot load (rows/s)", med(load_ours), med(load_limit), "GET + read(BytesIO)"),
    ]


class Nop:
    def __init__(self) -> None:
        self.n = 0

    def on_changes(self, events: Any, complete: bool = True) -> None:
        self.n += len(events)

    def on_change(self, event: Any) -> None:
        self.n += 1

    def on_heartbeat(self, position: Any) -> None:
        pass

    def on_schema_change(self, *a: Any) -> None:
        pass


def bench_kinesis(
    server: Any, n_rows: int, n_records: int, repeat: int
) -> list[tuple[str, float, float, str]]:
    s3, kinesis = server.client("s3"), server.client("kinesis")
    bucket = "laredo-bench-kinesis"
    s3.create_bucket(Bucket=bucket)
    data = rows(n_rows)
    body = "".join(serialization.dumps_row(r) + "\n" for r in data).encode()
    s3.put_object(Bucket=bucket, Key=f"b/{T}.jsonl", Body=body)
    stream = "laredo-bench-stream"
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    wait_stream_active(kinesis, stream)
    for start in range(0, n_records, 500):
        entries = [
            {
                "Data": dumps_record(encode_record(T, "INSERT", new=data[i % n_rows])),
                "PartitionKey": f"k{i % 64}",
            }
            for i in range(start, min(n_records, start + 500))
        ]
        kinesis.put_records(StreamName=stream, Records=entries)
    shards = [s["ShardId"] for s in kinesis.list_shards(StreamName=stream)["Shards"]]

    def source() -> KinesisSource:
        src = KinesisSource(
            stream,
            bucket,
            "b/",
            endpoint_url=server.endpoint_url,
            batch_size=10000,
            poll_interval=0.01,
            min_fetch_interval=0.0,
            shard_refresh_interval=30,
        )
        src.init(SourceConfig([T]))
        return src

    base_ours, base_limit, st_ours, st_limit = [], [], [], []
    for _ in range(repeat):
        src = source()
        base_ours.append(
            n_rows / timed(lambda src=src: src.baseline_batches([T], lambda t, b: None))
        )

        def limit_baseline() -> None:
            resp = s3.get_object(Bucket=bucket, Key=f"b/{T}.jsonl")
            for line in resp["Body"].iter_lines():
                serialization.loads_row(line)

        base_limit.append(n_rows / timed(limit_baseline))

        h = Nop()
        th = threading.Thread(target=src.stream, args=(KinesisPosition(), h), daemon=True)
        t0 = time.perf_counter()
        th.start()
        while h.n < n_records:
            time.sleep(0.002)
        st_ours.append(n_records / (time.perf_counter() - t0))
        src.stop_stream()
        th.join()

        def limit_stream() -> None:
            def read(shard: str) -> None:
                it = kinesis.get_shard_iterator(
                    StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
                while True:
                    resp = kinesis.get_records(ShardIterator=it, Limit=10000)
                    for rec in resp["Records"]:
                        json.loads(rec["Data"])
                    it = resp["NextShardIterator"]
                    if not resp["Records"]:
                        return

            threads = [threading.Thread(target=read, args=(s,)) for s in shards]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        st_limit.append(n_records / timed(limit_stream))
    med = statistics.median
    return [
        ("kinesis baseline (rows/s)", med(base_ours), med(base_limit), "GET + loads_row/line"),
        ("kinesis stream (records/s)", med(st_ours), med(st_limit), "bare get_records loop"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with moto_server_running() as server:
        results = bench_snapshots(server, args.rows, args.repeat)
        results += bench_kinesis(server, args.rows, args.records, args.repeat)
    print(f"{'measurement':30} {'ours':>12} {'limit':>12} {'ratio':>7}  limit is")
    for name, ours, limit, what in results:
        print(f"{name:30} {ours:12,.0f} {limit:12,.0f} {ours / limit:7.2f}  {what}")


if __name__ == "__main__":
    main()
