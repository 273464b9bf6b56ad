"""dbt's child process: started ahead of need, it runs dbt once, and it leaves the database closed and the lock
free when it exits; never needed, it is stopped rather than awaited; given bad arguments, it says so. And
grpolens-dbt, the same exit as the executable of the Dagster dbt resource."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import duckdb

from pipeline import warehouse
from pipeline.dbt_process import DbtProcess
from pipeline.ingest import ingest
from pipeline.resources import dbt_resource
from pipeline.settings import Settings


def test_a_child_never_given_work_is_stopped(home):
    with DbtProcess(home) as dbt:
        pass
    assert dbt.proc.returncode == -signal.SIGKILL  # stopped while it imported dbt, not left to finish


def test_a_build_through_the_child_leaves_the_database_closed(tmp_path):
    logs = tmp_path / "logs" / "proj"
    logs.mkdir(parents=True)
    (logs / "run.jsonl").write_text("".join(json.dumps({"step": s, "reward": s / 10}) + "\n" for s in range(20)))
    settings = Settings(home=tmp_path / "home", trainer_logs=(logs.parent,))
    ingest(settings, ("trainer_log",))
    with DbtProcess(settings) as dbt:
        counts = warehouse.build(settings, dbt=dbt)
    assert dbt.proc.returncode == 0 and counts.get("success", 0) > 10
    # The child leaves with os._exit: it must have closed DuckDB first (a checkpoint), or the WAL stays behind
    # for the next connection to replay, and dbt's log must be complete.
    assert not settings.duckdb_path.with_name(settings.duckdb_path.name + ".wal").exists()
    con = duckdb.connect(str(settings.duckdb_path))  # a writer: the lock is free
    try:
        assert con.execute("select count(*) from history").fetchone()[0] == 20
    finally:
        con.close()
    last = (settings.home / "logs" / "dbt.log").read_text().splitlines()[-3:]
    assert "build` succeeded" in last[1] and "Flushing usage events" in last[2], last  # dbt's log ends as it does


def test_bad_arguments_exit_2_and_say_why(home):
    with DbtProcess(home) as dbt:
        code, lines = dbt.run(warehouse.dbt_args(home, "build", "--no-such-option"))
    assert code == 2
    assert any("No such option" in line and "--no-such-option" in line for line in lines), lines


def test_a_run_cut_short_here_stops_the_child(home):
    """An error (or Ctrl-C) in the caller while dbt runs must not leave dbt building behind its back."""

    class Stop(Exception):
        pass

    def stop(line: str) -> None:
        raise Stop(line)

    try:
        with DbtProcess(home) as dbt:
            dbt.run(warehouse.dbt_args(home, "build"), echo=stop)
    except Stop:
        pass
    assert dbt.proc.returncode == -signal.SIGKILL


def test_dagster_runs_dbt_through_grpolens_dbt_with_no_adapter_of_its_own(home, tmp_path):
    """Before each invocation dagster-dbt asks its executable for `--version` and sets up a dbt adapter in its own
    process (4 s of a refresh at team scale): the version is answered without importing dbt, no adapter is set up,
    and dbt still runs."""
    resource = dbt_resource()
    assert Path(resource.dbt_executable).name == "grpolens-dbt"
    asked = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import sys; sys.argv[1:] = ['--version']; "
         "from pipeline.dbt_process import cli; cli()"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert re.search(r"(\d+\.\d+\.\d+)", asked.stdout).group(1) == version("dbt-core")  # what dagster-dbt parses
    assert not re.search(r"\|\s+dbt(\.|$)", asked.stderr, re.M), "answering --version imported dbt"
    home.export()  # profiles.yml reads GRPOLENS_HOME
    invocation = resource.cli(["parse", "--quiet"], target_path=tmp_path / "target").wait()
    assert invocation.is_successful() and invocation.adapter is None
    assert (tmp_path / "target" / "manifest.json").exists()


# Two threads turning Python literals into ast objects while garbage collections run Python code (as dbt's threads
# do when Jinja renders natively); prints how many SystemErrors they hit.
AST_RACE = """
import ast, gc, sys, threading, time
if sys.argv[1] == "guarded":
    from pipeline.dbt_process import serialize_ast_parsing
    serialize_ast_parsing()
sys.setswitchinterval(1e-6)
gc.callbacks.append(lambda phase, info: sum(range(50)))
gc.set_threshold(50, 5, 5)
source = "[" + ",".join(f"({i}, {{'a': [{i}, 'x']}})" for i in range(300)) + "]"
errors = []
def work():
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end and not errors:
        try:
            ast.literal_eval(source)
        except SystemError as exc:
            errors.append(exc)
threads = [threading.Thread(target=work) for _ in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
print(len(errors))
"""


def test_dbts_threads_take_turns_in_the_ast_module():
    """CPython's ast recursion counter is shared by threads: unguarded, the race fails within ~50 ms here (a dbt
    node failed with "AST constructor recursion depth mismatch" in the suite once); guarded, it never does."""

    def errors(mode: str, seconds: float) -> int:
        run = subprocess.run(
            [sys.executable, "-c", AST_RACE, mode, str(seconds)], capture_output=True, text=True, check=True
        )
        return int(run.stdout.strip())

    assert errors("bare", 3.0) > 0, "this interpreter shows no race: the guard has nothing to prove here"
    assert errors("guarded", 3.0) == 0


# A failed dbt unit test's message in run_results.json, as dbt 1.11 writes it (ANSI colours and all).
UNIT_TEST_FAILURE = {
    "unique_id": "unit_test.grpolens.reward_components.reward_components_gain",
    "status": "fail",
    "message": "\n\n\x1b[32mactual\x1b[0m differs from \x1b[31mexpected\x1b[0m:\n\n\x1b[0;1m@@\x1b[0m\x1b[33m,\x1b[0m"
    "\x1b[0;1mrun_key\x1b[0m\x1b[33m,\x1b[0m\x1b[0;1mpoints\x1b[0m\r\n\x1b[31;1m\x1b[34;1m→\x1b[32;1m\x1b[0m"
    "\x1b[33m,\x1b[0ma\x1b[33m,\x1b[0m\x1b[31;1m6\x1b[34;1m→\x1b[32;1m7\x1b[0m\r\n\n",
}


def test_a_failed_node_is_one_plain_line_and_a_unit_test_shows_its_diff():
    """The line `grpolens build` fails with: no terminal colour codes, and for a unit test the row that differs."""
    assert warehouse.node_failure(UNIT_TEST_FAILURE) == (
        "reward_components_gain: actual differs from expected: @@,run_key,points: →,a,6→7"
    )
    runtime = {
        "unique_id": "model.grpolens.metrics",
        "status": "error",
        "message": 'Runtime Error in model metrics (models/marts/core/metrics.sql)\n  Binder Error: column "x" not '
        "found\n\nLINE 4: select x\n                ^",
    }
    assert warehouse.node_failure(runtime) == (
        'metrics: Runtime Error in model metrics (models/marts/core/metrics.sql): Binder Error: column "x" not found'
    )


def test_the_callers_working_folder_is_not_on_the_childs_import_path(home, tmp_path, monkeypatch):
    """`python -m` puts the working folder first on the import path: a user's `logging.py` there replaced the
    standard module in dbt's child, and every build failed with "dbt build could not run"."""
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "logging.py").write_text("raise SystemExit('user script logging.py ran')\n")
    monkeypatch.chdir(folder)
    with DbtProcess(home) as dbt:
        code, lines = dbt.run(warehouse.dbt_args(home, "parse"))
    assert code == 0, lines
    assert not any("user script" in line for line in lines), lines
