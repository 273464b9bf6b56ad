"""The `grpolens` command as a user runs it: one clear line on failure, read-only SQL, cheap no-op refresh."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import LENGTH_COLLAPSE, grpolens


@pytest.fixture(scope="module")
def refreshed(tmp_path_factory):
    env = {"GRPOLENS_HOME": str(tmp_path_factory.mktemp("home")), "GRPOLENS_WANDB_DIRS": str(LENGTH_COLLAPSE)}
    first = grpolens("refresh", env=env, check=True)
    return env, first


def test_refresh_ingests_and_builds_then_does_nothing_when_nothing_is_new(refreshed):
    env, first = refreshed
    assert "5650 values" in first.stderr and "dbt build" in first.stderr
    again = grpolens("refresh", env=env, check=True)
    assert "0 read" in again.stderr and "up to date" in again.stderr and "dbt build" not in again.stderr


def test_sql_reads_and_refuses_to_write(refreshed):
    env, _ = refreshed
    out = grpolens("sql", "select count(*) as n from history", "--format", "csv", env=env, check=True)
    assert out.stdout.splitlines() == ["n", "5650"]
    denied = grpolens("sql", "delete from history", env=env)
    assert denied.returncode == 1
    assert denied.stderr.startswith("grpolens sql: query failed:") and "read-only" in denied.stderr
    assert "Traceback" not in denied.stderr
    assert grpolens("sql", "select count(*) from history", "--format", "csv", env=env).stdout.splitlines()[1] == "5650"


HOLD_LOCK = """
import duckdb, sys, time
con = duckdb.connect(sys.argv[1])
print("locked", flush=True)
time.sleep(60)
"""


def test_locked_warehouse_is_one_clear_line(refreshed):
    env, _ = refreshed
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, f"{env['GRPOLENS_HOME']}/grpolens.duckdb"],
                              stdout=subprocess.PIPE, text=True)
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


def test_unconfigured_source_is_skipped_with_one_line(tmp_path):
    out = grpolens("ingest", env={"GRPOLENS_HOME": str(tmp_path)}, check=True)
    assert out.stderr.splitlines() == ["wandb offline: skipped: GRPOLENS_WANDB_DIRS is not set",
                                       "wandb cloud: skipped: GRPOLENS_WANDB_PROJECTS is not set",
                                       "trainer logs: skipped: GRPOLENS_TRAINER_LOGS is not set",
                                       "axiom: skipped: AXIOM_TOKEN is not set",
                                       "event files: skipped: GRPOLENS_EVENT_FILES is not set"]


def test_help_everywhere():
    for command in ([], ["ingest"], ["build"], ["refresh"], ["sql"], ["demo"], ["ui"]):
        out = grpolens(*command, "--help")
        assert out.returncode == 0 and "usage: grpolens" in out.stdout


def test_version_and_a_refresh_with_nothing_configured(tmp_path):
    version = grpolens("--version", check=True)
    assert version.stdout.startswith("grpolens ") and version.stdout.split()[1][0].isdigit()
    empty = grpolens("refresh", env={"GRPOLENS_HOME": str(tmp_path / "home")})
    assert empty.returncode == 1 and "Traceback" not in empty.stderr
    assert "no source is configured" in empty.stderr and "GRPOLENS_WANDB_DIRS" in empty.stderr
    assert not (tmp_path / "home" / "grpolens.duckdb").exists()  # nothing was built for nothing


def test_check_on_one_run_ends_with_its_verdict(refreshed):
    env, _ = refreshed
    out = grpolens("check", "--run", "qwen2_3b_opd", env=env, check=True)
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("qwen2_3b_opd: unhealthy (") and "of 30 rules applied" in last
    assert "root cause response_length_collapse" in last


def test_a_closed_pipe_ends_quietly(refreshed):
    env, _ = refreshed
    import os

    from tests.conftest import BIN

    proc = subprocess.Popen(f"'{BIN / 'grpolens'}' sql 'select * from history' --format json --max-rows 100000 | head -1",
                            shell=True, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    out, err = proc.communicate(timeout=300)
    assert out.count("\n") == 1 and "Traceback" not in err and "BrokenPipe" not in err
    proc = subprocess.Popen(f"'{BIN / 'grpolens'}' check --format json | head -1", shell=True,
                            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    assert out == "[\n" and "Traceback" not in err and "BrokenPipe" not in err
