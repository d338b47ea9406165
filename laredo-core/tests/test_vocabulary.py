"""The one vocabulary of core: durations and sizes, secrets, retry markers."""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import Any

import laredo
import pydantic
import pytest
from laredo.errors import ConfigError, retry_class
from laredo.secrets import MASK, is_secret_key, mask_secrets, mask_text, show_value
from laredo.units import Duration, OptionalDuration, Size, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("200ms", 0.2),
        ("30s", 30),
        ("10m", 600),
        ("1h30m", 5400),
        ("1h 30m", 5400),
        ("10 minutes", 600),
        ("2d", 172800),
        ("1w", 604800),
        ("1.5h", 5400),
        ("250us", 0.00025),
        ("7", 7),
        (3, 3),
        (0.5, 0.5),
        (timedelta(minutes=2), 120),
    ],
)
def test_one_duration_grammar(text: Any, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "d", "1x", "-1h", "1h 30", "5 fortnights", True, -3, [1]])
def test_bad_durations_name_the_expected_form(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"snapshot\.schedule: .*(duration|negative)"):
        parse_duration(bad, "snapshot.schedule")


def test_relativedelta_from_hocon_is_a_duration_but_months_are_refused() -> None:
    from dateutil.relativedelta import relativedelta

    assert parse_duration(relativedelta(hours=1, minutes=30)) == 5400
    with pytest.raises(ConfigError, match="no fixed length"):
        parse_duration(relativedelta(months=1))


@pytest.mark.parametrize(
    ("text", "size"),
    [("10MB", 10_000_000), ("1GiB", 1024**3), ("512k", 512_000), ("64 mib", 64 * 1024**2), (7, 7)],
)
def test_one_size_grammar(text: Any, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["ten", "1XB", -1, True, "1.5.5MB"])
def test_bad_sizes(bad: Any) -> None:
    with pytest.raises(ConfigError, match="size"):
        parse_size(bad)


def test_pydantic_field_types_use_the_grammar_and_report_the_key() -> None:
    class Opts(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")
        interval: Duration = 1.0
        linger: OptionalDuration = None
        limit: Size = 0

    o = Opts.model_validate({"interval": "1h30m", "linger": "5ms", "limit": "1MB"})
    assert (o.interval, o.linger, o.limit) == (5400.0, 0.005, 1_000_000)
    assert Opts.model_validate({"linger": None}).linger is None
    with pytest.raises(pydantic.ValidationError, match="interval"):
        Opts.model_validate({"interval": "soon"})


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "PGPASSWORD",
        "db_passwd",
        "client_secret",
        "token",
        "auth_header",
        "Authorization",
        "aws_access_key_id",
        "api_key",
        "apikey",
        "private_key",
        "credentials",
    ],
)
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["connection", "url", "table", "schema", "keep_count", "host"])
def test_keys_that_are_not_secret_as_a_whole(key: str) -> None:
    assert not is_secret_key(key)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgresql://app:s3cr3t@db:5432/app", "postgresql://app:***@db:5432/app"),
        ("host=db user=app password=s3cr3t dbname=app", "host=db user=app password=*** dbname=app"),
        ("host=db password='a b'", "host=db password=***"),
        (
            "postgresql://db/app?user=a&password=s3cr3t&x=1",
            "postgresql://db/app?user=a&password=***&x=1",
        ),
        ("postgresql://app@db/app", "postgresql://app@db/app"),
    ],
)
def test_passwords_embedded_in_text_are_masked(text: str, masked: str) -> None:
    assert mask_text(text) == masked
    assert "s3cr3t" not in mask_text(text)


def test_config_trees_are_masked_by_one_rule() -> None:
    tree = {
        "sources": {"pg": {"connection": "postgresql://a:pw@h/d", "password": "pw2", "ssl": True}},
        "targets": [{"headers": {"Authorization": "Bearer x"}, "url": "https://h/x"}],
    }
    out = mask_secrets(tree)
    assert out["sources"]["pg"] == {
        "connection": "postgresql://a:***@h/d",
        "password": MASK,
        "ssl": True,
    }
    assert out["targets"][0] == {"headers": {"Authorization": MASK}, "url": "https://h/x"}
    assert show_value("token", "abc") is None
    assert show_value("connection", "postgresql://a:pw@h/d") == "'postgresql://a:***@h/d'"


def test_retry_markers_are_one_spelling() -> None:
    class Throttled(laredo.TargetError, laredo.Transient):
        pass

    class Rejected(laredo.TargetError, laredo.Terminal):
        pass

    assert retry_class(Throttled()) == "transient" and Throttled().transient
    assert retry_class(Rejected()) == "terminal" and not Rejected().transient
    assert retry_class(laredo.TransientError("x")) == "transient"
    assert retry_class(laredo.TerminalError("x")) == "terminal"
    assert retry_class(laredo.InvalidChangeError("x")) == "terminal"
    assert retry_class(ValueError("x")) == "unknown"
    back = pickle.loads(pickle.dumps(laredo.TransientError("lost")))
    assert retry_class(back) == "transient" and str(back) == "lost"


def test_written_durations_are_seconds_that_keep_their_text() -> None:
    from laredo.units import WrittenDuration, WrittenText, as_written
    from pydantic import TypeAdapter

    d = WrittenDuration(46080.0, "768m")
    assert d == 46080.0 and parse_duration(d) == 46080.0  # a duration option gets seconds
    assert as_written(d) == "768m"  # a free-form map gets the text
    assert pickle.loads(pickle.dumps(d)).text == "768m"
    text = TypeAdapter(dict[str, WrittenText])
    assert text.validate_python({"a": d, "b": True, "c": 5, "d": "4g"}) == {
        "a": "768m",
        "b": "true",
        "c": "5",
        "d": "4g",
    }


def test_aws_error_code_reads_the_sdk_error_shape() -> None:
    from laredo.errors import aws_error_code

    class ClientError(Exception):
        def __init__(self, response: Any) -> None:
            self.response = response

    assert aws_error_code(ClientError({"Error": {"Code": "NoSuchKey"}})) == "NoSuchKey"
    assert aws_error_code(ClientError({"Error": None})) == ""
    assert aws_error_code(ClientError(None)) == ""
    assert aws_error_code(ValueError("x")) == ""


def test_row_key_is_the_primary_key_else_every_column() -> None:
    """One rule for the row key (REPLICA IDENTITY FULL without a primary key), used by the
    test source and the recording target alike."""
    from laredo.testing import RecordingTarget, TestSource, columns
    from laredo.types import ColumnDefinition, no_primary_key_problem, row_key, row_key_columns

    cols = [
        ColumnDefinition("tenant", primary_key=True, primary_key_ordinal=2, ordinal_position=1),
        ColumnDefinition("v", ordinal_position=2),
        ColumnDefinition("id", primary_key=True, primary_key_ordinal=1, ordinal_position=3),
    ]
    assert row_key_columns(cols) == ("id", "tenant")
    nokey = columns("day", "doc", pk=())
    assert row_key_columns(nokey) == ("day", "doc")
    assert row_key_columns([]) == ()
    assert row_key({"day": 1, "doc": {"b": [1], "a": 2}}, ("day", "doc")) == (
        1,
        (("a", 2), ("b", (1,))),
    )  # hashable even for JSON values
    t = laredo.Table("public", "log")
    rows = [{"day": 1, "doc": "x"}, {"day": 1, "doc": "y"}]
    src = TestSource()
    src.add_table(t, nokey, rows)
    assert sorted(src.rows(t), key=str) == rows  # rows sharing a first column stay apart
    target = RecordingTarget()
    target.on_init(t, nokey)
    for r in rows:
        target.on_baseline_row(t, r)
    target.on_delete(t, {"day": 1, "doc": "x"})
    assert target.rows() == [{"day": 1, "doc": "y"}]
    assert no_primary_key_problem(t, "indexed-memory", "lookup_fields") == (
        "table public.log: table has no primary key; set lookup_fields (the columns that "
        "identify a row) on the indexed-memory target, or add a primary key to the table"
    )
