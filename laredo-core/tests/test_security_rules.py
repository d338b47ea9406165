"""The security rules core owns: linear-time masking and the secret shapes it covers (review
M1, M8), and the fail-closed listener policy of :mod:`laredo.auth` (H1, H3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from laredo.auth import Access, AuthConfig, Refusal, auth_problems, is_loopback, refusal
from laredo.errors import ConfigError
from laredo.secrets import (
    MASK,
    MAX_TEXT,
    is_secret_key,
    mask_secrets,
    mask_storage_options,
    mask_text,
    show_value,
)

# -- M1: masking is linear and bounded --------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize("unit", ["a", "a://", "a:", "?a=", "password=", "@", "a://b:", "ab1+."])
def test_one_megabyte_masks_quickly_whatever_it_repeats(unit: str) -> None:
    """Before the fix ``mask_text('a' * 100_000)`` took ~20 s (the scheme was rescanned from
    every position): one megabyte of any repeated shape now masks well inside the timeout."""
    text = unit * (1_000_000 // len(unit))
    out = mask_text(text)
    assert len(out) < MAX_TEXT + 100  # cut at the cap, the cut marked
    assert "more characters cut" in out


def test_text_under_the_cap_is_not_cut() -> None:
    text = "x" * 1000 + " postgresql://u:s3cr3t@db/app"
    assert mask_text(text) == "x" * 1000 + f" postgresql://u:{MASK}@db/app"


# -- M8: the secret shapes the rule covers ----------------------------------------------------


@pytest.mark.parametrize(
    "key", ["X-API-Key", "Api-Key", "Ocp-Apim-Subscription-Key", "private-key", "x-session-key"]
)
def test_hyphenated_key_header_names_are_secret(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["primary_key", "key", "lookup_key", "partition_key", "keys"])
def test_ordinary_key_options_stay_visible(key: str) -> None:
    assert not is_secret_key(key)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("host=db sslpassword=k3y user=a", f"host=db sslpassword={MASK} user=a"),
        ("https://h/p?token=k3y&page=2", f"https://h/p?token={MASK}&page=2"),
        ("https://h/p?a=1&api_key=k3y", f"https://h/p?a=1&api_key={MASK}"),
        ("https://h/p?sig=k3y#frag", f"https://h/p?sig={MASK}#frag"),
        ("https://h/p?access_token=k3y", f"https://h/p?access_token={MASK}"),
    ],
)
def test_sslpassword_and_url_query_tokens_are_masked(text: str, masked: str) -> None:
    assert mask_text(text) == masked


def test_every_header_value_is_masked_whatever_its_name() -> None:
    tree = {"targets": [{"type": "http", "headers": {"X-Tenant": "acme", "X-API-Key": "k3y"}}]}
    out = mask_secrets(tree)
    assert out["targets"][0]["headers"] == {"X-Tenant": MASK, "X-API-Key": MASK}
    assert "k3y" not in repr(out)


# -- H1, H3: the fail-closed policy -----------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.0.0.5", "db.internal", "[::]"])
def test_hosts_that_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_any_address_without_a_token_is_refused_naming_the_keys() -> None:
    problems = auth_problems(AuthConfig(), key="grpc.auth", host="0.0.0.0", serves="gRPC")
    assert len(problems) == 1
    for name in ("grpc.auth.token", "grpc.auth.token_file", "grpc.auth.allow_unauthenticated"):
        assert name in problems[0]


def test_loopback_without_a_token_is_fine() -> None:
    assert auth_problems(AuthConfig(), key="grpc.auth", host="127.0.0.1", serves="gRPC") == []


def test_allow_unauthenticated_opens_the_any_address() -> None:
    auth = AuthConfig(allow_unauthenticated=True)
    assert auth_problems(auth, key="grpc.auth", host="0.0.0.0", serves="gRPC") == []


@pytest.mark.parametrize("token", ["", "   ", "\n"])
def test_an_empty_token_is_an_error_not_no_token(token: str) -> None:
    auth = AuthConfig.model_validate({"token": token, "protect_reads": True})
    with pytest.raises(ConfigError, match=r"grpc\.auth\.token: is empty"):
        auth.resolve("grpc.auth")
    problems = auth_problems(auth, key="grpc.auth", host="127.0.0.1", serves="gRPC")
    assert problems == ["grpc.auth.token: is empty; set a non-empty token (or remove the key)"]


def test_an_empty_token_file_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text("  \n")
    auth = AuthConfig(token_file=str(f), protect_reads=True)
    with pytest.raises(ConfigError, match="is empty; write the token into it"):
        auth.resolve("grpc.auth")
    f.write_text("s3cr3t\n")
    assert auth.resolve("grpc.auth") == "s3cr3t"


def test_problems_never_contain_the_token() -> None:
    auth = AuthConfig.model_validate({"token": "s3cr3t", "allow_unauthenticated": True})
    problems = auth_problems(auth, key="grpc.auth", host="0.0.0.0", serves="gRPC")
    assert problems and not any("s3cr3t" in p for p in problems)


def test_the_auth_block_forbids_unknown_keys() -> None:
    with pytest.raises(ValueError, match="tokn"):
        AuthConfig.model_validate({"tokn": "x"})


# -- M10: a slot that can never advance is reported -------------------------------------------


def _stalled(snapshot: dict[str, object], durable: bool = False, resumable: bool = True) -> list:
    from laredo.config import EngineConfig
    from laredo.config.checks import stalled_slot_findings

    model = EngineConfig.model_validate(
        {
            "sources": {"pg": {"type": "postgresql"}},
            "tables": [{"source": "pg", "table": "users", "targets": [{"type": "m"}]}],
            "snapshot": snapshot,
        }
    )
    return stalled_slot_findings(
        model, resumable=lambda _sid: resumable, durable=lambda _i, _j: durable
    )


def test_a_stateful_slot_with_memory_targets_and_no_schedule_is_warned_naming_the_key() -> None:
    (found,) = _stalled({"store": "local"})
    assert found.severity.value == "warning" and found.code == "SLOT_NEVER_ADVANCES"
    assert found.where == "snapshot.schedule" and "snapshot.schedule" in found.fix
    assert "tables.0.targets.0" in found.message and "never" in found.message
    (shutdown_only,) = _stalled({"store": "local", "on_shutdown": True})
    assert "only at a clean shutdown" in shutdown_only.message


@pytest.mark.parametrize(
    ("snapshot", "durable", "resumable"),
    [
        ({"store": "local", "schedule": "15m"}, False, True),  # scheduled snapshots advance it
        ({}, False, True),  # no store: volatile targets acknowledge what they applied
        ({"store": "local"}, True, True),  # durable targets acknowledge what they hold
        ({"store": "local"}, False, False),  # an ephemeral slot: nothing is kept
        ({"store": "local", "enabled": False}, False, True),
    ],
)
def test_configurations_whose_slot_advances_are_not_warned(
    snapshot: dict[str, object], durable: bool, resumable: bool
) -> None:
    assert _stalled(snapshot, durable, resumable) == []


# -- H1 (round 4): reads need a token off loopback; a read-only token --------------------------

ADMIN = [("authorization", "Bearer adm1n")]
READ = [("authorization", "Bearer r3ad")]
WRONG = [("authorization", "Bearer nope")]


def test_reads_are_protected_by_default_off_loopback_with_a_token() -> None:
    token = AuthConfig.model_validate({"token": "adm1n"})
    assert token.reads_protected(["0.0.0.0"])
    assert token.reads_protected(["127.0.0.1", "10.0.0.5"])
    assert not token.reads_protected(["127.0.0.1", "localhost"])
    assert not AuthConfig(allow_unauthenticated=True).reads_protected(["0.0.0.0"])
    explicit = AuthConfig.model_validate({"token": "adm1n", "protect_reads": False})
    assert not explicit.reads_protected(["0.0.0.0"])


def test_access_a_wrong_token_is_refused_on_every_rpc_open_or_not() -> None:
    access = Access(admin_token="adm1n", read_token="r3ad", protect_reads=False)
    assert access.check(None, admin=False) is None  # reads open, no token presented
    for admin in (False, True):
        refusal = access.check(WRONG, admin=admin)
        assert refusal == Refusal("UNAUTHENTICATED", "invalid token")


def test_access_the_read_token_serves_reads_only() -> None:
    access = Access(admin_token="adm1n", read_token="r3ad", protect_reads=True)
    assert access.check(READ, admin=False) is None
    assert access.check(ADMIN, admin=False) is None
    assert access.check(ADMIN, admin=True) is None
    denied = access.check(READ, admin=True)
    assert denied is not None and denied.code == "PERMISSION_DENIED"
    missing = access.check(None, admin=False)
    assert missing is not None and missing.code == "UNAUTHENTICATED"
    assert "read token" in missing.message
    assert access.may_read(READ) and not access.may_read(None) and not access.may_read(WRONG)
    # no admin token configured: everything is open (loopback or allow_unauthenticated)
    assert Access().check(WRONG, admin=True) is None


def test_read_token_problems_name_the_key_and_never_the_token(tmp_path: Path) -> None:
    def problems(**kw: object) -> list[str]:
        auth = AuthConfig.model_validate(kw)
        return auth_problems(auth, key="grpc.auth", host="0.0.0.0", serves="gRPC")

    assert problems(token="adm1n", read_token="r3ad") == []
    no_admin = problems(read_token="r3ad", allow_unauthenticated=True)
    assert any("grpc.auth.read_token: needs grpc.auth.token" in p for p in no_admin)
    same = problems(token="adm1n", read_token="adm1n")
    assert same == ["grpc.auth.read_token: is the admin token; give the read token its own value"]
    assert problems(token="adm1n", read_token="  ") == [
        "grpc.auth.read_token: is empty; set a non-empty token (or remove the key)"
    ]
    f = tmp_path / "read"
    f.write_text("")
    (empty,) = problems(token="adm1n", read_token_file=str(f))
    assert empty.startswith("grpc.auth.read_token_file:") and "is empty" in empty
    both = problems(token="adm1n", read_token="r3ad", read_token_file=str(f))
    assert both == ["grpc.auth: give read_token or read_token_file, not both"]
    for p in no_admin + same:
        assert "adm1n" not in p and "r3ad" not in p


# -- N2: object-store credentials are masked by key pattern -----------------------------------

STORE_SECRETS = {
    "azure_storage_account_key": "AZ-ACCOUNT-KEY-SECRET==",
    "AZURE_STORAGE_ACCESS_KEY": "AZ-ACCESS==",
    "azure_storage_sas_key": "sv=2024&sig=SAS",
    "azure_storage_sas_token": "SASTOKEN",
    "azure_storage_client_secret": "CLIENTSECRET",
    "azure_storage_master_key": "MASTERKEY",
    "google_service_account_key": '{"private_key": "-----BEGIN PRIVATE KEY-----GKEY"}',
    "aws_secret_access_key": "AWSSECRET",
    "aws_session_token": "AWSSESSION",
    "AWS_SSE_CUSTOMER_KEY_BASE64": "SSECKEY",
    "azure_storage_connection_string": "AccountName=a;AccountKey=CONNKEY==",
}


@pytest.mark.parametrize("key", sorted(STORE_SECRETS))
def test_object_store_credential_names_are_secret_keys(key: str) -> None:
    assert is_secret_key(key)
    assert show_value(key, STORE_SECRETS[key]) is None


def test_storage_options_are_masked_wholesale_but_places_and_switches() -> None:
    opts = {
        **STORE_SECRETS,
        "google_service_account": "/run/secrets/sa.json",  # a path or the JSON itself
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://minio:p4ss@minio:9000",
        "AWS_ALLOW_HTTP": "true",
        "azure_storage_account_name": "acct",
    }
    for shown in (mask_storage_options(opts), mask_secrets({"storage_options": opts})):
        shown = shown.get("storage_options", shown)
        assert shown["AWS_REGION"] == "eu-west-1" and shown["AWS_ALLOW_HTTP"] == "true"
        assert shown["azure_storage_account_name"] == "acct"
        assert shown["AWS_ENDPOINT_URL"] == f"http://minio:{MASK}@minio:9000"
        masked = {k for k, v in shown.items() if v == MASK}
        assert masked == {*STORE_SECRETS, "google_service_account", "AWS_ACCESS_KEY_ID"}
    # ordinary keys ending in _key stay readable in config dumps
    assert mask_secrets({"partition_key": "$.id", "primary_key": ["id"]}) == {
        "partition_key": "$.id",
        "primary_key": ["id"],
    }


def test_text_masks_dict_reprs_json_and_azure_connection_strings() -> None:
    text = (
        f"no readable Delta table; check storage_options {dict(STORE_SECRETS, region='x')!r} "
        f"or {json.dumps(STORE_SECRETS)}"
    )
    out = mask_text(text)
    pieces = ["AZ-ACCOUNT", "AZ-ACCESS", "SAS", "CLIENTSECRET", "MASTERKEY", "GKEY"]
    pieces += ["AWSSECRET", "AWSSESSION", "SSECKEY", "CONNKEY"]
    for piece in pieces:
        assert piece not in out, (piece, out)
    assert "'region': 'x'" in out and "'azure_storage_account_key': '***'" in out
    assert mask_text("AccountName=a;AccountKey=abc+/==;EndpointSuffix=x") == (
        f"AccountName=a;AccountKey={MASK};EndpointSuffix=x"
    )


@pytest.mark.timeout(10)
@pytest.mark.parametrize("unit", ["'a': '", "'password': 'x", '"a":', "AccountKey="])
def test_the_new_text_rules_stay_linear(unit: str) -> None:
    out = mask_text(unit * (1_000_000 // len(unit)))
    assert "more characters cut" in out


def test_a_token_file_others_can_read_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """N12: a world-readable token file works, with a WARNING naming the key and the fix."""
    f = tmp_path / "token"
    f.write_text("s3cr3t\n")
    f.chmod(0o644)
    assert AuthConfig(token_file=str(f)).resolve("grpc.auth") == "s3cr3t"
    (record,) = [r for r in caplog.records if r.name == "laredo.auth"]
    assert "grpc.auth.token_file" in record.getMessage() and "chmod 600" in record.getMessage()
    assert "s3cr3t" not in record.getMessage()
    caplog.clear()
    f.chmod(0o600)
    AuthConfig(token_file=str(f)).resolve("grpc.auth")
    assert not [r for r in caplog.records if r.name == "laredo.auth"]


def test_refusal_of_a_one_token_listener() -> None:
    """A fan-out port's rule: no token configured opens every call; else the token or a
    refusal naming what is missing (never the token)."""
    assert refusal(None, None) is None and refusal(WRONG, None) is None
    assert refusal([("authorization", "Bearer adm1n")], "adm1n") is None
    assert refusal({"Authorization": "adm1n"}, "adm1n") is None
    missing = refusal([("x-other", "1")], "adm1n", hint="send the token")
    assert missing == Refusal("UNAUTHENTICATED", "send the token")
    wrong = refusal(WRONG, "adm1n", invalid="bad token")
    assert wrong == Refusal("UNAUTHENTICATED", "bad token")
    assert "adm1n" not in repr((missing, wrong))


def test_pydantic_secrets_are_masked_under_any_key() -> None:
    from pydantic import SecretBytes, SecretStr

    out = mask_secrets({"note": SecretStr("k3y"), "blob": [SecretBytes(b"k3y")]})
    assert out == {"note": MASK, "blob": [MASK]}
