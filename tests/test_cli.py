"""The `grpolens` command as a user runs it: one clear line on failure, read-only SQL, cheap no-op refresh, help
with examples, colour only on a terminal, tables that fit it, one JSON convention, the dbt docs site."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.settings import PROJECT_ROOT
from tests.conftest import BIN, LENGTH_COLLAPSE, REAL_RUNS, grpolens

# Beside the W&B run: two trainer-log runs of one project (a sweep and a compare need two) and a run whose loss
# turns NaN (the JSON of its findings and report must stay strict).
TRAINER_RUNS = (REAL_RUNS / "verl-opd-qwen2-3b-stable", REAL_RUNS / "unsloth-llama31-8b-grpo-gsm8k")


def _nan_run(folder: Path) -> Path:
    folder.mkdir()
    with open(folder / "nan-loss-run.jsonl", "w", encoding="utf-8") as fh:
        for step in range(1, 41):
            loss = math.nan if step >= 25 else 0.5 - step * 0.005 + (step % 3) * 0.003
            fh.write(
                json.dumps(
                    {
                        "step": step,
                        "loss": loss,
                        "reward": 0.1 + step * 0.01 + (step % 4) * 0.005,
                        "kl": 0.01,
                        "grad_norm": math.inf if step == 30 else 1.0,
                    }
                )
                + "\n"
            )
    return folder


@pytest.fixture(scope="module")
def refreshed(tmp_path_factory):
    logs = (*TRAINER_RUNS, _nan_run(tmp_path_factory.mktemp("logs") / "nanlog"))
    env = {
        "GRPOLENS_HOME": str(tmp_path_factory.mktemp("home")),
        "GRPOLENS_WANDB_DIRS": str(LENGTH_COLLAPSE),
        "GRPOLENS_TRAINER_LOGS": os.pathsep.join(map(str, logs)),
    }
    first = grpolens("refresh", env=env, check=True)
    return env, first


def test_refresh_ingests_and_builds_then_does_nothing_when_nothing_is_new(refreshed):
    env, first = refreshed
    assert "5650 values" in first.stderr and "3 runs updated" in first.stderr and "dbt build" in first.stderr
    assert "wandb offline: 1 run file, 1 read," in first.stderr
    # one progress line per layer of the warehouse as dbt finishes it (the Dagster groups), in the order it does
    for group in ("staging", "core", "elo", "training", "pipeline"):
        assert re.search(rf"^  {group}: \d+ tables and views built$", first.stderr, re.M), group
    again = grpolens("refresh", env=env, check=True)
    assert "0 read" in again.stderr and "up to date" in again.stderr and "dbt build" not in again.stderr


def test_sql_reads_and_refuses_to_write(refreshed):
    env, _ = refreshed
    out = grpolens(
        "sql", "select count(*) as n from history where run_key like 'wandb:%'", "--format", "csv", env=env, check=True
    )
    assert out.stdout.splitlines() == ["n", "5650"]
    denied = grpolens("sql", "delete from history", env=env)
    assert denied.returncode == 1
    assert denied.stderr.startswith("grpolens sql: query failed:") and "read-only" in denied.stderr
    assert "Traceback" not in denied.stderr
    assert (
        grpolens(
            "sql", "select count(*) from history where run_key like 'wandb:%'", "--format", "csv", env=env
        ).stdout.splitlines()[1]
        == "5650"
    )


HOLD_LOCK = """
import duckdb, sys, time
con = duckdb.connect(sys.argv[1])
print("locked", flush=True)
time.sleep(60)
"""


def test_locked_warehouse_is_one_clear_line(refreshed):
    env, _ = refreshed
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, f"{env['GRPOLENS_HOME']}/grpolens.duckdb"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        read = grpolens("sql", "select 1", env=env)
        build = grpolens("build", env=env)
    finally:
        holder.kill()
        holder.wait()
    for proc in (read, build):
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert "is locked by another writer" in proc.stderr and f"process {holder.pid}" in proc.stderr


def test_an_ingest_while_another_holds_the_source_is_one_clear_line(tmp_path):
    """The CLI names the lake's IngestBusy without importing the lake up front (numpy and pyarrow would slow every
    command); raised by an ingest, it is still one line, not a traceback."""
    from pipeline import lake
    from pipeline.settings import Settings

    logs = tmp_path / "logs" / "proj"
    logs.mkdir(parents=True)
    (logs / "run.jsonl").write_text('{"step": 0, "reward": 1.0}\n')
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(logs.parent)}
    with lake.ingest_lock(Settings(home=tmp_path / "home").lake, "trainer_log"):
        busy = grpolens("ingest", env=env)
    assert busy.returncode == 1 and "Traceback" not in busy.stderr
    assert busy.stderr.splitlines()[-1].startswith("grpolens ingest: another ingest of trainer_log is running")
    assert grpolens("ingest", env=env).returncode == 0  # the lock released, the next one runs


def test_unconfigured_source_is_skipped_with_one_line(tmp_path):
    out = grpolens("ingest", env={"GRPOLENS_HOME": str(tmp_path)}, check=True)
    assert out.stderr.splitlines() == [
        "wandb offline: skipped: GRPOLENS_WANDB_DIRS is not set",
        "wandb cloud: skipped: GRPOLENS_WANDB_PROJECTS is not set",
        "trainer logs: skipped: GRPOLENS_TRAINER_LOGS is not set",
        "axiom: skipped: AXIOM_TOKEN is not set",
        "event files: skipped: GRPOLENS_EVENT_FILES is not set",
    ]


def test_help_everywhere_with_an_example_for_every_command():
    from pipeline.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {c.dest for c in commands._choices_actions} == set(commands.choices)  # every command listed with its help
    assert all(c.help and c.help.strip() for c in commands._choices_actions)
    assert "docs" in commands.choices and "check" in commands.choices
    for name, sub in [("", parser), *commands.choices.items()]:
        for action in sub._actions:
            if action is not commands:
                assert action.help and action.help.strip(), f"grpolens {name} {action.option_strings or action.dest}"
    for command in ([], *([name] for name in commands.choices)):
        out = grpolens(*command, "--help")
        assert out.returncode == 0 and "usage: grpolens" in out.stdout
        assert re.search(r"^Examples?:\n  (\w+=\S+ )?grpolens ", out.stdout, re.M), command


def test_sql_help_cites_a_query_file_that_exists_and_runs(refreshed):
    env, _ = refreshed
    cited = set(re.findall(r"sql/[\w/]+\.sql", grpolens("sql", "--help", check=True).stdout))
    assert cited
    for path in cited:
        assert (PROJECT_ROOT / path).is_file(), path
        out = grpolens("sql", "--file", str(PROJECT_ROOT / path), "--format", "csv", env=env, check=True)
        assert len(out.stdout.splitlines()) > 1


def test_a_mistyped_command_or_choice_gets_the_closest_one(refreshed):
    env, _ = refreshed
    out = grpolens("chek")
    assert out.returncode == 2 and "did you mean check?" in out.stderr and "Traceback" not in out.stderr
    out = grpolens("check", "--format", "jsn", env=env)
    assert out.returncode == 2 and "did you mean json?" in out.stderr
    out = grpolens("frobnicate")
    assert out.returncode == 2 and "did you mean" not in out.stderr and "invalid choice" in out.stderr
    out = grpolens("check", "--run", "qwen2_3b_op", env=env)  # a run name: exit 1 as before, with close names
    assert out.returncode == 1 and "did you mean qwen2_3b_opd?" in out.stderr


def test_numbers_out_of_range_are_usage_errors_before_the_command_starts(tmp_path):
    from pipeline.cli import build_parser

    env = {"GRPOLENS_HOME": str(tmp_path / "home")}
    for args in (
        ("docs", "--port", "99999"),
        ("docs", "--port", "-1"),
        ("ui", "--port", "0"),
        ("ui", "--port", "70000"),
        ("sql", "--max-rows", "0", "select 1 union all select 2"),
        ("sql", "--max-rows", "-1", "select 1"),
        ("demo", "--scale", "-1"),
        ("demo", "--scale", "0"),
        ("demo", "--scale", "nan"),
    ):
        out = grpolens(*args, env=env)
        assert out.returncode == 2 and f"argument {args[1]}: {args[2]} is out of range" in out.stderr, args
        assert "Traceback" not in out.stderr and not out.stdout, args
    assert not (tmp_path / "home").exists()  # refused before anything ran
    parse = build_parser().parse_args
    assert parse(["docs", "--port", "0"]).port == 0 and parse(["docs", "--port", "65535"]).port == 65535
    assert parse(["ui", "--port", "1"]).port == 1 and parse(["sql", "--max-rows", "1", "q"]).max_rows == 1
    assert parse(["demo", "--scale", "0.05"]).scale == 0.05 and parse(["demo"]).scale == 1.0


def test_a_build_selecting_nothing_says_so_and_fails(tmp_path):
    out = grpolens("--home", str(tmp_path / "home"), "build", "--select", "nosuchmodel")
    assert out.returncode == 1 and "Traceback" not in out.stderr and "warehouse built" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        "grpolens build: nothing was built: the selection criterion 'nosuchmodel' does not match any enabled nodes "
        "(models, seeds, tests) of the dbt project"
    )


def test_home_goes_before_or_after_any_command_and_after_wins(tmp_path):
    """Each command is run on a home that is a file: it names the home it was given, before doing anything."""
    from pipeline.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    required = {"report": ["RUN"], "sweep": ["--group", "G"], "compare": ["A", "B"], "sql": ["select 1"]}
    blocker, other = tmp_path / "a-file", tmp_path / "other"
    blocker.touch()
    for name in commands:
        args = [name, *required.get(name, [])]
        before, after = ["--home", str(blocker), *args], [*args, "--home", str(blocker)]
        for argv in (before, after, ["--home", str(other), *after]):  # the one after the command wins
            out = grpolens(*argv)
            assert out.returncode == 1 and out.stderr == (
                f"grpolens {name}: the data home {blocker} is a file, not a folder: point GRPOLENS_HOME (or --home) "
                "at a folder\n"
            ), argv
    assert not other.exists()


def test_version_and_a_refresh_with_nothing_configured(tmp_path):
    version = grpolens("--version", check=True)
    assert version.stdout.startswith("grpolens ") and version.stdout.split()[1][0].isdigit()
    empty = grpolens("refresh", env={"GRPOLENS_HOME": str(tmp_path / "home")})
    assert empty.returncode == 1 and "Traceback" not in empty.stderr
    assert "no source is configured" in empty.stderr and "GRPOLENS_WANDB_DIRS" in empty.stderr
    assert not (tmp_path / "home" / "grpolens.duckdb").exists()  # nothing was built for nothing


def test_counts_of_one_are_singular(tmp_path):
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(_nan_run(tmp_path / "nanlog"))}
    refreshed = grpolens("refresh", env=env, check=True).stderr  # one file, one run, one flag: its loss turns NaN
    assert "trainer logs: 1 file, 1 read, 40 lines/entries, 160 values, 1 run updated in" in refreshed
    assert "checks flagged 1 anomaly (1 error): `grpolens check` lists them" in refreshed
    checked = grpolens("check", env=env, check=True).stderr
    assert checked.splitlines()[0] == "30 checks: 1 error, 0 warnings, 0 info"


def test_no_run_found_is_no_all_clear(tmp_path):
    """A folder holding no log it reads built an empty warehouse: `refresh` ended with "checks flagged 0 anomalies"
    and `check` with "30 checks: 0 errors, 0 warnings", an all-clear with nothing checked. Both say there is no run;
    `check` exits as ever (0: nothing flagged, no rule failed) and its JSON is still one document."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rewards.csv").write_text("prompt,reward\nsix times seven,1\n")
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(logs)}
    refreshed = grpolens("refresh", env=env, check=True).stderr
    assert "rewards.csv @ byte 0: not_read: a CSV whose header names no step column" in refreshed
    assert "checks flagged" not in refreshed
    assert refreshed.strip().splitlines()[-1].endswith("no run found in the configured sources: nothing was checked")
    checked = grpolens("check", env=env)
    assert checked.returncode == 0 and checked.stdout == "" and "checks:" not in checked.stderr
    assert checked.stderr.startswith("no runs in the warehouse (and no rollout events): nothing was checked")
    listed = grpolens("check", "--format", "json", env=env)
    assert listed.returncode == 0 and json.loads(listed.stdout) == [] and "no runs in the warehouse" in listed.stderr


def test_check_on_one_run_ends_with_its_verdict(refreshed):
    env, _ = refreshed
    out = grpolens("check", "--run", "qwen2_3b_opd", env=env, check=True)
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("qwen2_3b_opd: unhealthy (") and "of 30 rules applied" in last
    assert "root cause response_length_collapse" in last


def test_a_closed_pipe_ends_quietly(refreshed):
    env, _ = refreshed
    proc = subprocess.Popen(
        f"'{BIN / 'grpolens'}' sql 'select * from history' --format json --max-rows 100000 | head -1",
        shell=True,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=300)
    assert out.count("\n") == 1 and "Traceback" not in err and "BrokenPipe" not in err
    proc = subprocess.Popen(
        f"'{BIN / 'grpolens'}' check --format json | head -1",
        shell=True,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=300)
    assert out == "[\n" and "Traceback" not in err and "BrokenPipe" not in err


# --- a terminal: colour only there, tables that fit it -------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def on_terminal(*args: str, env: dict, columns: int = 100) -> tuple[int, str]:
    """Run grpolens with stdout and stderr on a pseudo-terminal of ``columns`` columns; its exit status and output."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [str(BIN / "grpolens"), *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env={**environ, "TERM": "xterm-256color", **env},
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=300), b"".join(chunks).decode().replace("\r\n", "\n")


def test_colour_on_a_terminal_and_never_with_no_color_or_into_a_pipe(refreshed):
    env, _ = refreshed
    code, shown = on_terminal("check", "--run", "qwen2_3b_opd", env=env)
    assert code == 0
    assert "\x1b[1;31mERROR\x1b[0m response_length_collapse" in shown  # the severity word
    assert "qwen2_3b_opd: \x1b[1;31munhealthy\x1b[0m (" in shown  # the verdict word
    code, shown = on_terminal("check", "--run", "qwen2_3b_opd", env={**env, "NO_COLOR": "1"})
    assert code == 0 and "\x1b[" not in shown and "ERROR response_length_collapse" in shown
    code, shown = on_terminal("check", "--run", "qwen2_3b_opd", env={**env, "NO_COLOR": ""})  # empty: not set
    assert "\x1b[1;31mERROR" in shown
    piped = grpolens("check", "--run", "qwen2_3b_opd", env=env, check=True)
    assert "\x1b[" not in piped.stdout + piped.stderr and "ERROR response_length_collapse" in piped.stdout


def test_tables_fit_the_terminal_and_name_runs(refreshed):
    env, _ = refreshed
    query = "select run_key, name, config, last_step, created_at, heartbeat_at from runs order by run_key desc"
    code, shown = on_terminal("sql", query, env=env, columns=72)  # the terminal's own width
    lines = shown.rstrip("\n").splitlines()
    assert code == 0 and lines and all(len(ANSI.sub("", line)) <= 72 for line in lines)
    wandb_row = next(line for line in lines if line.startswith("wandb:"))
    key = ANSI.sub("", wandb_row).split("  ")[0]  # cut in the middle: both ends of the run_key stay
    assert key.startswith("wandb:") and key.endswith("/gjvwlq13") and "…" in key
    assert "more columns not shown: created_at, heartbeat_at" in " ".join(shown.split())

    narrow = grpolens("check", env={**env, "COLUMNS": "70"}, check=True).stdout
    assert all(len(line) <= 70 for line in narrow.splitlines())
    assert re.search(r"^WARN  kl_spike +unsloth-\S+…\S+-gsm8k +step 206$", narrow, re.M)  # both ends stay; one step
    wide = grpolens("check", env={**env, "COLUMNS": "150"}, check=True).stdout
    assert "qwen2_3b_opd" in wide and "unsloth-llama31-8b-grpo-gsm8k" in wide  # names, not run_keys
    assert "wandb:local/retool_opd/gjvwlq13" not in wide and "trainer_log:" not in wide
    assert re.search(r"^ERROR loss_nonfinite +nan-loss-run +step 25\+$", wide, re.M)

    rounded = grpolens("sql", "select 1.0/3 as third, pi() * 1e6 as big, 42 as n", env=env, check=True).stdout
    assert rounded.splitlines()[2].split() == ["0.3333", "3.142e+06", "42"]
    full = grpolens("sql", "select 1.0/3 as third, pi() * 1e6 as big", "--format", "csv", env=env, check=True).stdout
    assert full.splitlines()[1] == "0.3333333333333333,3141592.653589793"

    cut = grpolens("sql", "select range as i from range(1000)", env=env, check=True).stdout.splitlines()
    assert len(cut) == 2 + 40 + 1 and cut[-2].strip() == "39"
    assert cut[-1] == "… 960 more rows (use --max-rows or --format csv)"
    whole = grpolens("sql", "select range as i from range(1000)", "--max-rows", "1000", env=env, check=True).stdout
    assert "more rows" not in whole and len(whole.splitlines()) == 1002


def test_sql_errors_keep_duckdbs_hints_and_context(refreshed):
    env, _ = refreshed
    typo = grpolens("sql", "select * from metric", env=env)
    assert typo.returncode == 1 and typo.stderr.startswith("grpolens sql: query failed: Catalog Error")
    assert 'Did you mean "metrics"' in typo.stderr and "Traceback" not in typo.stderr
    syntax = grpolens("sql", "selec run_key from runs", env=env)
    assert syntax.returncode == 1 and "LINE 1: selec run_key from runs" in syntax.stderr
    caret = syntax.stderr.splitlines()[-1]
    assert caret.strip() == "^" and caret.index("^") == syntax.stderr.splitlines()[-2].index("selec")
    column = grpolens("sql", "select nme from runs", env=env)
    assert column.returncode == 1 and 'Candidate bindings: "name"' in column.stderr


# --- one JSON convention -------------------------------------------------------------------------------------------


def strict_json(text: str):
    """What a strict parser (RFC 8259: no NaN or Infinity) reads; fails on anything else, one object per line too."""

    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def strings(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)
    elif isinstance(value, str):
        yield value


def test_every_json_output_is_one_strict_document_with_iso_times_and_nulls(refreshed):
    env, _ = refreshed
    docs = {
        "check": grpolens("check", "--format", "json", env=env, check=True).stdout,
        "sql": grpolens("sql", "select * from runs", "--format", "json", env=env, check=True).stdout,
        "report": grpolens("report", "nan-loss-run", "--format", "json", env=env, check=True).stdout,
        "sweep": grpolens("sweep", "--project", "real-runs", "--format", "json", env=env, check=True).stdout,
        "compare": grpolens(
            "compare",
            "verl-opd-qwen2-3b-stable",
            "unsloth-llama31-8b-grpo-gsm8k",
            "--format",
            "json",
            env=env,
            check=True,
        ).stdout,
    }
    parsed = {name: strict_json(text) for name, text in docs.items()}
    assert isinstance(parsed["check"], list) and isinstance(parsed["sql"], list)
    assert all(isinstance(parsed[name], dict) for name in ("report", "sweep", "compare"))
    for name, doc in parsed.items():
        spaced = [s for s in strings(doc) if re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?.*", s)]
        assert not spaced, f"{name}: times must be ISO-8601 (T between date and time): {spaced[:3]}"
    snake = re.compile(r"[a-z][a-z0-9_]*")
    for row in parsed["check"]:
        assert set(row) == set(parsed["check"][0]) and all(snake.fullmatch(k) for k in row)
    for name in ("report", "sweep", "compare"):
        assert all(snake.fullmatch(k) for k in parsed[name])
    nan_row = next(r for r in parsed["check"] if r["check_name"] == "loss_nonfinite")
    assert nan_row["value"] is None and nan_row["step"] == 25 and nan_row["dataset"] is None
    run = next(r for r in parsed["sql"] if r["name"] == "qwen2_3b_opd")
    assert isinstance(run["config"], dict) and run["config"]  # a JSON column is JSON, not a string
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00", run["created_at"])
    assert parsed["report"]["run"] == "nan-loss-run" and parsed["report"]["verdict"] == "unhealthy"
    # `--run` as `check --run` takes it
    flagged = grpolens("report", "--run", "nan-loss-run", "--format", "json", env=env, check=True).stdout
    assert strict_json(flagged)["verdict"] == "unhealthy"
    neither = grpolens("report", env=env)
    assert neither.returncode == 1 and neither.stderr.startswith("grpolens report: which run?"), neither.stderr
    assert {r["run"] for r in parsed["compare"]["runs"]} == {
        "verl-opd-qwen2-3b-stable",
        "unsloth-llama31-8b-grpo-gsm8k",
    }

    values = grpolens(
        "sql",
        "select 'nan'::double as nan, '-inf'::double as inf, 1.0/3 as third, "
        "9007199254740993::bigint as big, null as nothing, timestamptz '2025-01-02 03:04:05.5+00' as ts,"
        " date '2025-01-02' as day, interval 90 second as span, [1, 2] as list, {'a': 1} as struct",
        "--format",
        "json",
        env=env,
        check=True,
    ).stdout
    assert strict_json(values) == [
        {
            "nan": None,
            "inf": None,
            "third": 1 / 3,
            "big": 9007199254740993,
            "nothing": None,
            "ts": "2025-01-02T03:04:05.500000+00:00",
            "day": "2025-01-02",
            "span": 90.0,
            "list": [1, 2],
            "struct": {"a": 1},
        }
    ]
    assert strict_json(grpolens("sql", "select 1 where false", "--format", "json", env=env, check=True).stdout) == []


# --- grpolens docs ------------------------------------------------------------------------------------------------


def test_docs_need_a_built_warehouse(tmp_path):
    out = grpolens("docs", "--no-serve", env={"GRPOLENS_HOME": str(tmp_path / "home")})
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "no warehouse at" in out.stderr and "grpolens refresh" in out.stderr


def _listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) of the sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            for line in Path(table).read_text().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.rsplit(":", 1)
                if int(hex_port, 16) == port and state == "0A":  # LISTEN
                    found.add(address)
    return found


def test_docs_generate_and_serve_the_site_on_loopback_only(refreshed):
    import select
    import urllib.error
    import urllib.request

    env, _ = refreshed
    folder = Path(grpolens("docs", "--no-serve", env=env, check=True).stdout.strip())
    assert folder == Path(env["GRPOLENS_HOME"]) / "docs"
    assert {p.name for p in folder.iterdir()} >= {"index.html", "manifest.json", "catalog.json"}

    server = subprocess.Popen(
        [str(BIN / "grpolens"), "docs", "--port", "0"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([server.stdout], [], [], 300)
        assert ready, "grpolens docs printed no URL"
        url = server.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url), url
        port = int(url.rsplit(":", 1)[1].rstrip("/"))
        if os.path.exists("/proc/net/tcp"):
            assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, and no other interface
        with urllib.request.urlopen(url, timeout=30) as page:
            assert page.status == 200 and "<html" in page.read(4096).decode().lower()
        with urllib.request.urlopen(url + "catalog.json", timeout=30) as page:
            catalog = json.load(page)
        model = catalog["nodes"]["model.grpolens.learning_dynamics"]
        assert "reward_mean" in model["columns"] and "run_key" in model["columns"]
        with urllib.request.urlopen(url + "manifest.json", timeout=30) as page:
            assert "model.grpolens.runs" in json.load(page)["nodes"]
        with pytest.raises(urllib.error.HTTPError) as missing:  # only the site: not dbt's run results or SQL
            urllib.request.urlopen(url + "run_results.json", timeout=30)
        assert missing.value.code == 404
        # serving holds no lock: the warehouse stays readable, and a second server on the port says it is taken
        read = grpolens("sql", "select count(*) as n from runs", "--format", "csv", env=env, check=True)
        assert read.stdout == "n\n4\n"
        taken = grpolens("docs", "--port", str(port), env=env)
        assert taken.returncode == 1 and f"port {port} on 127.0.0.1 is in use" in taken.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)
