"""The streaming source keeps credentials out of Spark's options (round-4 review N8): options
are shown in ``explain``, the UI, event logs and the history server."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from laredo.errors import ConfigError
from laredo_spark import stream_options
from laredo_spark.streaming.reader import build_source

DSN = "postgresql://app:S3cretPW@db.internal/app"


def test_a_config_with_a_secret_goes_to_a_private_file_never_into_the_options() -> None:
    config = {"connection": DSN, "slot_name": "app", "aws_secret_access_key": "AWS-S3CRET"}
    opts = stream_options(tables=["public.users"], source_type="postgresql", source_config=config)
    text = json.dumps(opts)
    assert "S3cretPW" not in text and "AWS-S3CRET" not in text
    path = Path(opts["source.configFile"])
    assert json.loads(path.read_text()) == config
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # factory arguments the same way; the driver builds the source from the file
    args = {"password": "S3cretPW", "host": "db"}
    opts = stream_options(tables=["public.users"], factory="builtins:dict", factory_args=args)
    assert "S3cretPW" not in json.dumps(opts)
    assert build_source(opts) == args


def test_a_config_without_secrets_stays_inline_and_a_managed_file_is_named(tmp_path: Path) -> None:
    plain = {"connection": "postgresql://app@db.internal/app", "slot_name": "app"}
    opts = stream_options(tables=["public.users"], factory="builtins:dict", factory_args=plain)
    assert json.loads(opts["source.args"]) == plain and "source.argsFile" not in opts
    mounted = tmp_path / "args.json"
    mounted.write_text(json.dumps({"password": "from-a-mounted-secret"}))
    opts = stream_options(
        tables=["public.users"], factory="builtins:dict", factory_args_file=str(mounted)
    )
    assert opts["source.argsFile"] == str(mounted)
    assert build_source(opts) == {"password": "from-a-mounted-secret"}
    os.remove(mounted)
    with pytest.raises(ConfigError, match=r"source\.argsFile .*cannot read it"):
        build_source(opts)
    with pytest.raises(ConfigError, match="not both"):
        stream_options(
            tables=["t"], factory="builtins:dict", factory_args={}, factory_args_file="x"
        )


@pytest.mark.spark
def test_the_query_plan_carries_no_password(spark: Any) -> None:
    opts = stream_options(
        tables=["public.users"], source_type="postgresql", source_config={"connection": DSN}
    )
    df = spark.readStream.format("laredo").options(**opts).load()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain(True)
    plan = out.getvalue()
    assert "source.configFile" in plan, plan
    assert "S3cretPW" not in plan
