"""`grpolens sql` is read-only in fact, not only in name: no file written anywhere (the lake included), no extension
installed or loaded, no other database attached, no setting unlocked, no file outside the lake read; while the
warehouse's tables, its views over the lake, read_parquet on the lake and every sql/questions file still work.

A refused statement ends in one line, `grpolens sql: query failed: <DuckDB's message or ours>`, exit status 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from pipeline import warehouse
from pipeline.settings import SQL_DIR, Settings
from tests.conftest import grpolens

STEPS = 50


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A warehouse built from a small JSONL trainer log, and an empty folder outside the home to aim writes at."""
    root = tmp_path_factory.mktemp("sql")
    run = root / "logs" / "exp1"
    run.mkdir(parents=True)
    run.joinpath("metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 1 / (s + 1), "kl": 0.01 * s}) + "\n" for s in range(STEPS))
    )
    home = root / "home"
    env = {"GRPOLENS_HOME": str(home), "GRPOLENS_TRAINER_LOGS": str(root / "logs")}
    grpolens("ingest", "--source", "trainer_log", env=env, check=True)
    grpolens("build", env=env, check=True)
    outside = root / "outside"
    outside.mkdir()
    return home, outside, {"GRPOLENS_HOME": str(home)}


def snapshot(*folders: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for f in folders for p in sorted(f.rglob("*"))}


def refused(proc) -> str:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("grpolens sql: query failed: "), proc.stderr
    return lines[0]


# Each statement, and the file it would create: {out} is a folder outside the home, {lake} the home's lake.
WRITES = {
    "copy to a file outside": ("copy (select * from runs) to '{out}/runs.csv'", "{out}/runs.csv"),
    "copy a query into the lake's cursors": ("copy (select 1 as x) to '{lake}/_state/trainer_log.json'", None),
    "copy into a new lake file": (
        "copy history to '{lake}/history/source=trainer_log/part-x.parquet'",
        "{lake}/history/source=trainer_log/part-x.parquet",
    ),
    "export database": ("export database '{out}/export'", "{out}/export"),
    "explain analyze copy": ("explain analyze copy (select 1) to '{lake}/e.csv'", "{lake}/e.csv"),
    "a second statement copies": ("select 1; copy runs to '{lake}/r.csv'", "{lake}/r.csv"),
    "install": ("install httpfs", None),
    "force install": ("force install httpfs", None),
    "load": ("load httpfs", None),
    "attach a new file": ("attach '{out}/other.duckdb' as other", "{out}/other.duckdb"),
    "attach a new file in the lake": ("attach '{lake}/other.duckdb' as other (read_only false)", "{lake}/other.duckdb"),
    "profiling output": ("call enable_profiling(format='json', save_location='{lake}/p.json')", "{lake}/p.json"),
    "log output": ("select * from enable_logging(storage='file', storage_path='{lake}/logs')", "{lake}/logs"),
    "sql built from a string": (
        "select * from query('copy (select 1) to ''' || '{lake}/q.csv' || '''')",
        "{lake}/q.csv",
    ),
    "create table": ("create table t as select 1", None),  # these two: DuckDB's read-only refusal
    "insert": ("insert into runs select * from runs", None),
    "a macro that would write": ("create temp macro m() as table select * from enable_profiling()", None),
    "prepare": ("prepare p as copy runs to '{lake}/p.csv'", "{lake}/p.csv"),
}


@pytest.mark.parametrize("name", list(WRITES))
def test_statements_that_could_write_are_refused_and_write_nothing(built, name):
    home, outside, env = built
    statement, target = (t.format(out=outside, lake=home / "lake") if t else None for t in WRITES[name])
    before = snapshot(home, outside)
    line = refused(grpolens("sql", statement, env=env))
    assert "Permission Error" in line or "read-only" in line, line
    assert target is None or not Path(target).exists()
    assert snapshot(home, outside) == before  # not a byte anywhere, the lake's cursors included


@pytest.mark.parametrize(
    "statement",
    [
        "set enable_external_access = true",
        "reset enable_external_access",
        "set lock_configuration = false",
        "reset lock_configuration",
        "set allowed_directories = ['/']",
        "set autoload_known_extensions = true",
        "pragma threads = 1",
    ],
)
def test_the_locks_cannot_be_lifted(built, statement):
    _, _, env = built
    line = refused(grpolens("sql", statement, env=env))
    assert "the configuration has been locked" in line  # DuckDB's own refusal, in full


@pytest.mark.parametrize(
    "statement",
    [
        "select count(*) from read_csv('/etc/passwd')",
        "select * from read_text('/etc/hostname')",
        "select * from glob('/etc/*')",
        "select count(*) from read_csv('{lake}/../../../../etc/passwd')",
    ],
)
def test_files_outside_the_lake_cannot_be_read(built, statement):
    home, _, env = built
    line = refused(grpolens("sql", statement.format(lake=home / "lake"), env=env))
    assert "Permission Error" in line and "file system operations are disabled by configuration" in line


def test_the_connection_itself_refuses_files_and_extensions(built):
    """Without the statement check in front: DuckDB's own settings refuse everything outside the lake."""
    home, outside, _ = built
    con = warehouse.connect_query(Settings(home=home))
    try:
        for statement in (
            f"copy (select 1) to '{outside}/x.csv'",
            f"export database '{outside}/e'",
            "install httpfs",
            "load httpfs",
            f"attach '{outside}/o.duckdb' as o",
            "select * from read_csv('/etc/passwd')",
        ):
            with pytest.raises(duckdb.Error, match="Permission Error|disabled"):
                con.sql(statement)
        assert con.sql("select count(*) from history").fetchone() == (2 * STEPS,)
    finally:
        con.close()
    assert list(outside.iterdir()) == []


def test_reads_still_work(built):
    home, _, env = built
    lake = home / "lake"
    queries = {
        "select count(*) as n from history": 2 * STEPS,  # a table
        "select count(*) as n from stg_lake__history": 2 * STEPS,  # a view that reads the lake's Parquet
        f"select count(*) as n from read_parquet('{lake}/history/*/*.parquet')": 2 * STEPS,
        f"select count(*) as n from '{lake}/runs/source=trainer_log/*.parquet'": 1,
        "with t as (select distinct key from history) select count(*) as n from t": 2,
        "explain analyze select count(*) from history": None,
        "describe history": None,
        "pivot (select run_key, key, value from history) on key using max(value)": None,
        "set variable k = 'kl'; select count(*) as n from history where key = getvariable('k')": STEPS,
    }
    for query, expected in queries.items():
        out = grpolens("sql", query, "--format", "csv", env=env, check=True)
        if expected is not None:
            assert out.stdout.splitlines() == ["n", str(expected)], query
    table = grpolens("sql", "select key, count(*) from history group by key order by key", env=env, check=True)
    assert "kl" in table.stdout and "loss" in table.stdout  # the default table display runs under the locks


@pytest.mark.parametrize("question", sorted(p.name for p in (SQL_DIR / "questions").glob("*.sql")))
def test_every_question_file_runs(built, question):
    _, _, env = built
    out = grpolens("sql", "--file", str(SQL_DIR / "questions" / question), "--format", "csv", env=env, check=True)
    assert out.stdout.strip(), question  # at least its header
