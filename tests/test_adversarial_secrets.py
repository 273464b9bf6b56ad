"""Secrets never reach the lake, the warehouse, messages or logs, on every path: W&B offline files (config,
summary, history, run name and tags), the W&B cloud, trainer_state.json, JSONL and console trainer logs, NDJSON
event files and the Axiom API. One rule (pipeline.secrets) for names and values, tested with what it must hide
and what it must keep."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import wandb

from pipeline import warehouse
from pipeline.ingest import ingest
from pipeline.secrets import NAME_PATTERN, REDACTED, is_secret_name, redact, redact_text
from pipeline.settings import Settings
from pipeline.sources import axiom, event_files, wandb_cloud
from pipeline.sources.axiom import RetryPolicy
from tests.axiom_emulator import AxiomEmulator
from tests.wandb_emulator import WandbEmulator
from tests.wandb_writer import QUIET, wait_until_written

# ------------------------------------------------------------------------------------------------ the rule

MUST_REDACT_NAMES = [
    "api_key",
    "apikey",
    "apiKey",
    "API_KEY",
    "WANDB_API_KEY",
    "wandb_api_key",
    "x-api-key",
    "openai_api_key",
    "access_key",
    "aws_secret_access_key",
    "secret",
    "secrets",
    "secret_key",
    "client_secret",
    "clientSecret",
    "token",
    "auth_token",
    "access_token",
    "accessToken",
    "refresh_token",
    "hf_token",
    "HF_TOKEN",
    "hub_token",
    "push_to_hub_token",
    "use_auth_token",
    "session_token",
    "github_token",
    "axiom_token",
    "x-auth-token",
    "bearer_token",
    "password",
    "passwd",
    "db_password",
    "passphrase",
    "credentials",
    "gcp_credentials",
    "credentials_json",
    "authorization",
    "Authorization",
    "auth_header",
    "auth",
    "basic_auth",
    "private_key",
    "private_key_pem",
    "wandb_key",
    "openai_key",
    "hf_key",
    "api_keys",
    "cookie",
    "sentry_dsn",
    "auth/token",
    "hub.hf_token",
    "headers.authorization",
    "headers.x-api-key",
    "credentials.user",
]
MUST_KEEP_NAMES = [
    "max_new_tokens",
    "tokenizer",
    "num_tokens",
    "key",
    "kl_key",
    "reward_key",
    "monkey",
    "author",
    "token_count",
    "tokens_per_second",
    "total_tokens",
    "keyword",
    "eos_token",
    "pad_token",
    "bos_token",
    "pad_token_id",
    "special_tokens",
    "time_per_token",
    "loss_per_token",
    "token_str",
    "tokens",
    "prompt_tokens",
    "completion_tokens",
    "git_commit",
    "sort_key",
    "cache_key",
    "primary_key",
    "public_key",
    "ssh_public_key",
    "hotkey",
    "keyboard",
    "authority",
    "author_email",
    "bypass_cache",
    "secret_name",
    "password_length",
    "credentials_path",
    "api_key_path",
    "token_type",
    "auth/latency_ms",
    "token/entropy",
    "tokens/mean",
    "timing_per_token_ms/gen",
    "perf/total_num_tokens",
    "val/num_eos_tokens",
    "max_num_batched_tokens",
    "num_input_tokens_seen",
    "prompt_key",
    "reward_fn_key",
    "image_key",
    "pass@1",
    "whiskey",
    "turkey",
    "keys",
    "token_id",
    "input_ids",
    "author/token_count",
    "actor/kl_loss",
    "response_length/mean",
]

OPENAI = "sk-proj-T3stK3yZq8Xw2Lm9Pn4Rv7Ys1Ab5Cd6Ef0Gh"
ANTHROPIC = "sk-ant-api03-Qq1Ww2Ee3Rr4Tt5Yy6Uu7Ii8Oo9Pp0AaSsDdFf-xyzAA"
HF = "hf_Qw3rTy8UiOp2AsDfGh5JkLzXcVbNm7Lk9J"
GITHUB = "ghp_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv1Wx2Y"
AWS = "AKIAIOSFODNN7EXAMPLE"
AXIOM_TOKEN = "xaat-3f2b8c1e-9d4a-4b6f-8e2d-7c1a5b9e0f3d"
SLACK = "xoxb-1234567890-abcdefghijKLM"
GOOGLE = "AIza" + "SyD3f4G5h6J7k8L9z0X1c2V3b4N5m6Q7w8E"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
WANDB_NEW = "wandb_v1_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe" * 2
WANDB_CLASSIC = "5e3b7a1c9d0f2e4a6b8c0d1e3f5a7b9c1d3e5f70"  # 40 hex: also what a git sha looks like
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo\n-----END RSA PRIVATE KEY-----"
BEARER = "Zm9vYmFyQmVhcmVyVG9rZW4xMjM0NTY3ODkw"

MUST_REDACT_VALUES = [  # (text, what must be gone, what must stay)
    (f"Bearer {BEARER}", BEARER, "Bearer "),
    (f"Authorization: Bearer {BEARER}", BEARER, "Authorization: Bearer "),
    ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "Authorization: Basic "),
    (PEM, "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo", ""),
    ("key material: " + PEM.split("\n-----END")[0], "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo", "key material: "),
    (OPENAI, OPENAI, ""),
    (ANTHROPIC, ANTHROPIC, ""),
    (HF, HF, ""),
    (GITHUB, GITHUB, ""),
    (AWS, AWS, ""),
    (AXIOM_TOKEN, AXIOM_TOKEN, ""),
    (SLACK, SLACK, ""),
    (GOOGLE, GOOGLE, ""),
    (JWT, JWT, ""),
    (WANDB_NEW, WANDB_NEW, ""),
    ("local-" + WANDB_CLASSIC, WANDB_CLASSIC, ""),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv", "11ABCDEFG0123456789", ""),
    (f"python train.py --api-key {OPENAI} --lr 1e-5", OPENAI, "python train.py --api-key "),
    ("python train.py --api-key abc123secret --lr 1e-5", "abc123secret", "--lr 1e-5"),
    (f"python train.py --wandb-api-key {WANDB_CLASSIC} --lr 1e-5", WANDB_CLASSIC, "--lr 1e-5"),
    (f"WANDB_API_KEY={WANDB_CLASSIC} python train.py", WANDB_CLASSIC, " python train.py"),
    (f"wandb login {WANDB_CLASSIC}", WANDB_CLASSIC, "wandb login "),
    ('request {"api_key": "abc123", "lr": 0.1}', "abc123", '"lr": 0.1'),
    ("{'password': 'hunter2', 'x': 1}", "hunter2", "'x': 1"),
    ("postgres://bob:hunter2@db:5432/x", "hunter2", "postgres://bob:"),
    ("https://api.example.com/v1?token=abcdef123&x=1", "abcdef123", "&x=1"),
    ("AccountName=x;AccountKey=abcDEF123==;EndpointSuffix=core", "abcDEF123", "EndpointSuffix=core"),
]
MUST_KEEP_VALUES = [
    "rollout_complete",
    "S1901M",
    "hello, 'world'",
    "A VIE - TRI\nF TRI - ADR",
    WANDB_CLASSIC,
    f"git commit {WANDB_CLASSIC}",
    "the bearer of bad news",
    "the secret ingredient is love",
    "max_new_tokens=512",
    "key: value",
    "tokenizer=qwen",
    "sk-learn-baseline-experiment-v2",
    "basic training",
    "reward_key=acc",
    "task-abcdefghijklmnopqrstuvwxyz",
    "https://example.com/path@x",
    "Authorization failed for user bob",
    "num_tokens: 1234",
    "token count 12",
    "diplomacy-grpo-sweep-lr1e-5",
    "rollout-000897-5b3f4c",
]


@pytest.mark.parametrize("name", MUST_REDACT_NAMES)
def test_credential_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", MUST_KEEP_NAMES)
def test_ordinary_names(name):
    assert not is_secret_name(name)


def test_arrow_duckdb_and_python_apply_one_name_rule():
    """One pattern, read alike by Python's re and by RE2 (Arrow, and DuckDB for an audit of an older lake)."""
    names = MUST_REDACT_NAMES + MUST_KEEP_NAMES
    expected = {n: is_secret_name(n) for n in names}
    re2 = pc.match_substring_regex(pa.array(names), NAME_PATTERN).to_pylist()
    assert dict(zip(names, re2, strict=True)) == expected
    sql = duckdb.execute("select n, regexp_matches(n, ?) from unnest(?) t(n)", [NAME_PATTERN, names]).fetchall()
    assert dict(sql) == expected


@pytest.mark.parametrize("text,gone,kept", MUST_REDACT_VALUES)
def test_credential_values_lose_only_the_credential(text, gone, kept):
    out = redact_text(text)
    assert gone not in out and REDACTED in out and kept in out


@pytest.mark.parametrize("text", MUST_KEEP_VALUES)
def test_ordinary_values_are_kept(text):
    assert redact_text(text) is text


def test_nested_values():
    config = {
        "lr": 1e-5,
        "hub": {"hf_token": HF, "model_id": "q"},
        "credentials": {"user": "bob", "pw": "x"},
        "cmd": ["train.py", "--hf-token", HF],
        "max_new_tokens": 512,
        "git_commit": WANDB_CLASSIC,
        "tokenizer": {"pad_token": "<|endoftext|>"},
        "note": f"Bearer {BEARER}",
    }
    out = redact(config)
    assert out == {
        "lr": 1e-5,
        "hub": {"hf_token": REDACTED, "model_id": "q"},
        "credentials": REDACTED,
        "cmd": ["train.py", "--hf-token", REDACTED],
        "max_new_tokens": 512,
        "git_commit": WANDB_CLASSIC,
        "tokenizer": {"pad_token": "<|endoftext|>"},
        "note": f"Bearer {REDACTED}",
    }
    assert config["hub"]["hf_token"] == HF  # a copy; and nothing copied when nothing changes:
    clean = {"a": [1, "x"], "b": {"c": 2.0}}
    assert redact(clean) is clean


def test_a_dict_hides_what_its_flattened_names_would():
    """{"stats": {"token": {"count": 5}}} is stats.token.count once flattened: no credential (a bare `token` is one
    only as the last part); a strong word hides all under it, as it would each flattened name."""
    nested = {"stats": {"token": {"count": 5}, "auth": "x"}, "credentials": {"user": "bob"}, "token": "t"}
    assert redact(nested) == {
        "stats": {"token": {"count": 5}, "auth": REDACTED},
        "credentials": REDACTED,
        "token": REDACTED,
    }
    flat = {"stats.token.count": False, "stats.auth": True, "credentials.user": True, "token": True}
    assert {name: is_secret_name(name) for name in flat} == flat


# ------------------------------------------------------------------------------------------------ every path

# Each must appear nowhere in the lake (any file, parsed or raw), the warehouse, or any message.
SECRETS = [
    OPENAI,
    ANTHROPIC,
    HF,
    GITHUB,
    AWS,
    AXIOM_TOKEN,
    GOOGLE,
    JWT,
    WANDB_NEW,
    WANDB_CLASSIC,
    BEARER,
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo",
    "hunter2-Pa55w0rd",
    "Pl41nS3cr3tValue",
    "987654321",
]
GIT_SHA = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"  # a 40-hex value that is not a credential: kept
ENTITY, PROJECT, RUN_ID = "testers", "secrets", "leaky01"

CONFIG = {
    "lr": 1e-5,
    "api_key": "Pl41nS3cr3tValue",
    "wandb_key": WANDB_CLASSIC,
    "auth_header": f"Bearer {BEARER}",
    "private_key_pem": PEM,
    "hub": {"hf_token": HF, "model_id": "qwen"},
    "db_password": "hunter2-Pa55w0rd",
    "launch_cmd": f"python train.py --api-key {OPENAI} --lr 1e-5",
    "git_commit": GIT_SHA,
    "max_new_tokens": 512,
    "tokenizer": "qwen",
    "pad_token": "<|endoftext|>",
    "total_tokens": 1000,
}
HISTORY = [
    {
        "loss": 1.0,
        "max_new_tokens": 512,
        "time_per_token": 0.25,
        "api_key": OPENAI,
        "auth/token": HF,
        "passwd": 987654321,
        "note": f"retrying with Authorization: Bearer {BEARER} now",
        "git_sha": GIT_SHA,
        "creds": {"password": "hunter2-Pa55w0rd", "user": "bob"},
        "msg": "hello, 'world'",
    },
    {
        "loss": 0.5,
        "max_new_tokens": 512,
        "cmd": f"WANDB_API_KEY={WANDB_CLASSIC} python train.py",
        "sample": [GITHUB, "ok"],
    },
]
SUMMARY = {"openai_key": ANTHROPIC, "final_note": f"uploaded with {GOOGLE}", "best_reward": 0.75}


def write_leaky_run(root: Path) -> Path:
    run = wandb.init(
        mode="offline",
        dir=str(root),
        id=RUN_ID,
        name=f"run Bearer {BEARER}",
        project=PROJECT,
        entity=ENTITY,
        config=CONFIG,
        tags=["ok-tag", HF],
        group=f"grp-{AWS}",
        settings=wandb.Settings(**QUIET),
    )
    for row in HISTORY:
        run.log(row)
    run.summary.update(SUMMARY)
    folder = Path(run.dir).parent
    run.finish()
    wait_until_written(folder)
    return folder


def write_trainer_logs(root: Path) -> None:
    state_dir = root / "hf-out"
    state_dir.mkdir(parents=True)
    (state_dir / "trainer_state.json").write_text(
        json.dumps(
            {
                "global_step": 2,
                "max_steps": 2,
                "train_batch_size": 4,
                "hub_token": HF,
                "push_to_hub_token": HF,
                "git_commit": GIT_SHA,
                "max_new_tokens": 512,
                "log_history": [{"loss": 1.0, "step": 1, "note": f"token={GITHUB}"}, {"loss": 0.5, "step": 2}],
            }
        )
    )
    jsonl = root / "jsonl-run" / "metrics.jsonl"
    jsonl.parent.mkdir()
    lines = [
        {
            "step": 1,
            "loss": 0.5,
            "openai_api_key": OPENAI,
            "total_tokens": 100,
            "cmd": f"python train.py --api-key {OPENAI} --lr 1e-5",
        },
        {"step": 2, "loss": 0.4, "total_tokens": 200, "headers": {"authorization": f"Bearer {BEARER}"}},
    ]
    jsonl.write_text(
        "".join(json.dumps(line) + "\n" for line in lines) + json.dumps({"step": f"Bearer {BEARER}", "loss": 1}) + "\n"
    )  # a bad step, quoted in its issue
    console = root / "console-run" / "train.log"
    console.parent.mkdir()
    console.write_text(
        "loading model...\n"
        f"{{'loss': 1.0, 'api_key': '{OPENAI}', 'tokens_per_second': 99.5, 'epoch': 0.1}}\n"
        f"{{'loss': 0.9, 'note': 'sent Authorization: Bearer {BEARER}', 'epoch': 0.2}}\n"
    )


def events() -> list[dict]:
    base = {"service": "diplomacy-rollout-worker", "rollout_id": "r1"}
    return [
        {
            "_time": "2026-01-01T00:00:01.000000001Z",
            "event": "http_call",
            **base,
            "authorization": f"Bearer {BEARER}",
            "message": f"retrying with Authorization: Bearer {BEARER}",
            "headers": {"x-api-key": OPENAI, "accept": "json"},
            "prompt_tokens": 120,
            "max_new_tokens": 512,
            "status": "ok",
            "trace": f"session {JWT} renewed",
        },
        {
            "_time": "2026-01-01T00:00:02Z",
            "event": "rollout_complete",
            **base,
            "trajectories_count": 8,
            "run_name": f"diplomacy Bearer {BEARER}",
            "wandb_key": WANDB_CLASSIC,
            "git_commit": GIT_SHA,
        },
    ]


def all_text_of_lake(lake: Path) -> str:
    """Every file under the lake: raw bytes as text, and each Parquet file's rows decoded (compression would hide
    a secret from a byte search)."""
    out = []
    for path in sorted(lake.rglob("*")):
        if not path.is_file():
            continue
        out.append(path.read_bytes().decode("utf-8", "replace"))
        if path.suffix == ".parquet":
            out.append(json.dumps(pq.read_table(path).to_pylist(), default=str))
    return "\n".join(out)


def all_text_of_warehouse(settings: Settings) -> str:
    con = warehouse.connect_readonly(settings)
    try:
        names = [
            r[0]
            for r in con.sql("select table_name from information_schema.tables where table_schema = 'main'").fetchall()
        ]
        return "\n".join(str(con.sql(f'select * from "{n}"').fetchall()) for n in names)
    finally:
        con.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Every source ingested into one lake, and the warehouse built over it."""
    tmp = tmp_path_factory.mktemp("secrets")
    folder = write_leaky_run(tmp / "wandb")
    write_trainer_logs(tmp / "trainer")
    ndjson = tmp / "events" / "diplomacy.ndjson"
    ndjson.parent.mkdir()
    ndjson.write_text(
        "".join(json.dumps(e) + "\n" for e in events()) + json.dumps({"_time": f"Bearer {BEARER}", "event": "x"}) + "\n"
    )  # no_time, quoted
    settings = Settings(
        home=tmp / "home", wandb_dirs=(tmp / "wandb",), trainer_logs=(tmp / "trainer",), event_files=(tmp / "events",)
    )
    said: list[str] = []
    reports = ingest(settings, progress=said.append)
    with AxiomEmulator() as em:
        em.add("diplomacy", events())
        em.add("beta", events()[:1])
        em.fail("403", dataset="beta", message=f"token {GITHUB} may not read beta")
        reports["axiom"] = axiom.ingest(
            settings.lake,
            ["diplomacy", "beta"],
            progress=said.append,
            url=em.url,
            token=em.token,
            use_row_ids=False,
            policy=RetryPolicy(attempts=2, backoff_s=0.01, sleep=lambda s: None),
        )
    said += reports["axiom"].lines()
    WandbEmulator.client_settings(retry_max=2, wait_seconds=1, timeout_seconds=5)
    with WandbEmulator() as emu:
        emu.add_offline_run(folder, entity=ENTITY, project=PROJECT)
        reports["wandb_cloud"] = wandb_cloud.ingest(
            settings.lake, [f"{ENTITY}/{PROJECT}"], progress=said.append, api=emu.api()
        )
    said += reports["wandb_cloud"].lines()
    warehouse.build(settings)
    return settings, reports, said


def test_no_secret_anywhere(world):
    settings, reports, said = world
    lake, house, messages = all_text_of_lake(settings.lake), all_text_of_warehouse(settings), "\n".join(said)
    assert REDACTED in lake and REDACTED in house
    for secret in SECRETS:
        assert secret not in lake, f"{secret} in the lake"
        assert secret not in house, f"{secret} in the warehouse"
        assert secret not in messages, f"{secret} in a message"
    for name, report in reports.items():
        text = "\n".join(report.lines()) + repr(report.issues)
        assert not any(secret in text for secret in SECRETS), name
    # Sources really read what they were given (a test that reads nothing would pass the above).
    assert all(reports[s].values > 0 for s in ("wandb_offline", "trainer_log", "event_files", "axiom", "wandb_cloud"))


def _runs(settings: Settings) -> dict[tuple[str, str], tuple]:
    con = warehouse.connect_readonly(settings)
    try:
        rows = con.sql("select source, name, config, summary, tags, group_name, run_key from runs").fetchall()
    finally:
        con.close()
    return {(r[0], r[6].rsplit("/", 1)[-1]): r[1:] for r in rows}


def test_wandb_config_summary_name_tags_group(world):
    settings, _, _ = world
    runs = _runs(settings)
    name, config, summary, tags, group, _ = runs[("wandb", RUN_ID)]
    config, summary = json.loads(config), json.loads(summary)
    for key in ("api_key", "wandb_key", "auth_header", "private_key_pem", "db_password"):
        assert config[key] == REDACTED, key
    assert config["hub"] == {"hf_token": REDACTED, "model_id": "qwen"}
    assert config["launch_cmd"] == f"python train.py --api-key {REDACTED} --lr 1e-5"
    assert (
        config["git_commit"],
        config["max_new_tokens"],
        config["tokenizer"],
        config["pad_token"],
        config["total_tokens"],
        config["lr"],
    ) == (GIT_SHA, 512, "qwen", "<|endoftext|>", 1000, 1e-5)
    assert summary["openai_key"] == REDACTED and summary["api_key"] == REDACTED and summary["passwd"] == REDACTED
    assert summary["final_note"] == f"uploaded with {REDACTED}" and summary["best_reward"] == 0.75
    assert summary["max_new_tokens"] == 512 and summary["git_sha"] == GIT_SHA
    assert name == f"run Bearer {REDACTED}" and tags == ["ok-tag", REDACTED] and group == f"grp-{REDACTED}"


def _history(settings: Settings, run_like: str) -> dict:
    con = warehouse.connect_readonly(settings)
    try:
        rows = con.sql(
            f"select run_key, step, key, value, value_text, value_type from history where run_key like '{run_like}'"
        ).fetchall()
    finally:
        con.close()
    return {(r[0].split(":")[0], r[1], r[2]): r[3:] for r in rows}


def test_wandb_history_keeps_the_row_not_the_secret(world):
    settings, _, _ = world
    h = _history(settings, f"%/{RUN_ID}")
    redacted = (None, REDACTED, "redacted")
    for key in ("api_key", "auth/token", "passwd", "creds.password"):
        assert h[("wandb", 0, key)] == redacted, key
    assert h[("wandb", 0, "note")] == (None, f"retrying with Authorization: Bearer {REDACTED} now", "redacted")
    assert h[("wandb", 1, "cmd")] == (None, f"WANDB_API_KEY={REDACTED} python train.py", "redacted")
    assert json.loads(h[("wandb", 1, "sample")][1]) == [REDACTED, "ok"]
    assert h[("wandb", 0, "max_new_tokens")][0] == 512 and h[("wandb", 0, "time_per_token")][0] == 0.25
    assert h[("wandb", 0, "git_sha")][1:] == (GIT_SHA, "string") and h[("wandb", 0, "creds.user")][1] == "bob"
    assert h[("wandb", 0, "msg")][1:] == ("hello, 'world'", "string")


def test_the_cloud_run_reads_the_same_as_its_file(world):
    settings, reports, _ = world
    assert not reports["wandb_cloud"].issues, reports["wandb_cloud"].lines()
    glob = settings.lake / "history" / "source=wandb_cloud" / "*.parquet"
    cloud = dict(
        ((r[0], r[1]), r[2:])
        for r in duckdb.sql(f"select step, key, value_text, value_type from read_parquet('{glob}')").fetchall()
    )
    assert cloud[(0, "api_key")] == (REDACTED, "redacted") and cloud[(0, "creds.password")] == (REDACTED, "redacted")
    assert cloud[(0, "note")][1] == "redacted" and cloud[(0, "git_sha")] == (GIT_SHA, "string")
    row = duckdb.sql(
        f"select config, summary, name, tags from read_parquet('{settings.lake}/runs/source=wandb_cloud/*.parquet')"
    ).fetchone()
    config = json.loads(row[0])
    assert config["hub"]["hf_token"] == REDACTED and config["git_commit"] == GIT_SHA
    assert json.loads(row[1])["openai_key"] == REDACTED and REDACTED in row[2] and row[3] == ["ok-tag", REDACTED]


def test_trainer_logs(world):
    settings, reports, _ = world
    runs = {r[0][1]: r[1] for r in _runs(settings).items() if r[0][0] == "trainer_log"}
    by_name = {v[0]: v for v in runs.values()}
    config = json.loads(by_name["hf-out"][1])
    assert config["hub_token"] == config["push_to_hub_token"] == REDACTED
    assert config["git_commit"] == GIT_SHA and config["max_new_tokens"] == 512
    h = _history(settings, "trainer_log:%")
    values = {(step, key): v for (_, step, key), v in h.items()}
    assert values[(1, "note")] == (None, f"token={REDACTED}", "redacted")
    assert values[(1, "openai_api_key")] == (None, REDACTED, "redacted")
    assert values[(1, "cmd")][1] == f"python train.py --api-key {REDACTED} --lr 1e-5"
    assert values[(2, "headers.authorization")] == (None, REDACTED, "redacted")
    assert values[(1, "api_key")] == (None, REDACTED, "redacted")  # the console's TRL dict line
    assert values[(1, "tokens_per_second")][0] == 99.5 and values[(2, "total_tokens")][0] == 200
    summaries = [json.loads(v[2]) for v in runs.values()]
    assert any(s.get("openai_api_key") == REDACTED for s in summaries)
    assert any(s.get("api_key") == REDACTED for s in summaries)
    issue = next(i for i in reports["trainer_log"].issues if i.kind not in ("no_step",) and "step" in i.message)
    assert REDACTED in issue.message and BEARER not in issue.message


def _events(lake: Path, source: str) -> dict:
    rows = duckdb.sql(
        f"select event, run_name, fields, event_id from read_parquet('{lake}/events/source={source}/*.parquet')"
    ).fetchall()
    return {r[0]: r for r in rows}


def test_events_both_paths_redact_alike_and_keep_their_id(world):
    settings, reports, _ = world
    files, api = _events(settings.lake, "event_files"), _events(settings.lake, "axiom")
    assert set(files) == set(api) == {"http_call", "rollout_complete"}
    for name in files:
        assert files[name] == api[name]  # fields and content id equal whichever way the event was read
    fields = json.loads(files["http_call"][2])
    assert fields["authorization"] == REDACTED and fields["headers.x-api-key"] == REDACTED
    assert fields["message"] == f"retrying with Authorization: Bearer {REDACTED}"
    assert fields["trace"] == f"session {REDACTED} renewed"
    assert (fields["prompt_tokens"], fields["max_new_tokens"], fields["status"], fields["headers.accept"]) == (
        120,
        512,
        "ok",
        "json",
    )
    done = json.loads(files["rollout_complete"][2])
    assert done["wandb_key"] == REDACTED and done["git_commit"] == GIT_SHA
    assert files["rollout_complete"][1] == f"diplomacy Bearer {REDACTED}"
    # The id is a hash of what is stored: computing it from the redacted event gives it back.
    first = events()[0]
    assert files["http_call"][3] == event_files.content_id(
        event_files.parse_time_ns(first["_time"]), event_files.flatten(first)
    )
    no_time = next(i for i in reports["event_files"].issues if i.kind == "no_time")
    refused = next(i for i in reports["axiom"].issues if i.path == "axiom:beta")
    assert REDACTED in no_time.message and REDACTED in refused.message and GITHUB not in refused.message
