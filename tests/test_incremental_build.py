"""An incremental refresh redoes only the runs that changed, and ends exactly where a full rebuild from the same
lake ends: through appended steps, repeated steps, a rewound log, a log restarted with later steps, a re-read
(interrupted) ingest, a resumed W&B run with Elo ratings, new events alone, a lake part that vanished or was
rewritten, and builds killed at random moments. `history` extends a run that only grew and rewrites the others. It
runs only the dbt nodes below the lake tables that changed, and no dbt at all when none did."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from pipeline import build_plan, checks, lake, warehouse
from pipeline.demo.events import write_demo_events
from pipeline.ingest import SOURCES, ingest
from pipeline.settings import Settings
from tests.conftest import BIN
from tests.wandb_writer import write_run


def log_lines(first: int, steps: int, collapse_at: int | None = None, seed: int = 0) -> str:
    """TRL-named metrics; from `collapse_at` on the completions shrink and the reward falls (checks fire)."""
    rng = random.Random(seed)
    lines = []
    for step in range(first, first + steps):
        collapsed = collapse_at is not None and step >= collapse_at
        reward = (0.2 if collapsed else 0.3 + step / 400) + rng.gauss(0, 0.02)
        length = (20 if collapsed else 300 + step) + rng.gauss(0, 5)
        lines.append(
            f'{{"step": {step}, "reward": {reward:.5f}, "reward_std": {0.2 + rng.gauss(0, 0.01):.5f}, '
            f'"kl": {0.01 + step / 5000:.5f}, "entropy": {1.2 - step / 1000:.5f}, '
            f'"completion_length": {length:.2f}, "grad_norm": {1 + rng.gauss(0, 0.1):.4f}, '
            f'"loss": {0.1 + rng.gauss(0, 0.01):.5f}}}\n'
        )
    return "".join(lines)


def refresh(settings: Settings) -> None:
    """What `grpolens refresh` does: ingest every source, build, check."""
    ingest(settings, tuple(SOURCES))
    warehouse.build(settings, stamp=False)
    checks.check_warehouse(settings)
    warehouse.stamp_build(settings)


def full_rebuild(settings: Settings, where: Path) -> Settings:
    """The same lake, built and checked from nothing in another home."""
    other = Settings(home=where)
    where.mkdir(parents=True)
    shutil.copytree(settings.lake, other.lake)
    warehouse.build(other)
    checks.check_warehouse(other)
    return other


def table_rows(path: Path) -> dict[str, list[tuple]]:
    """Every table's rows, sorted; doubles rounded to 9 significant digits (parallel sums differ in the last bits
    from one build to the next, incremental or not)."""

    def norm(value):
        if isinstance(value, float) and math.isfinite(value) and value != 0:
            return float(f"{value:.9g}")
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        return value

    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = [
            name
            for (name,) in con.execute(
                "select table_name from information_schema.tables where table_catalog = current_database() and "
                "table_type = 'BASE TABLE' and not starts_with(table_name, '_')"
            ).fetchall()
        ]
        return {
            table: sorted(
                (tuple(norm(v) for v in row) for row in con.execute(f'select * from "{table}"').fetchall()), key=repr
            )
            for table in tables
        }
    finally:
        con.close()


def assert_same_warehouse(a: Path, b: Path) -> None:
    left, right = table_rows(a), table_rows(b)
    assert sorted(left) == sorted(right)
    for table in left:
        assert left[table] == right[table], f"{table} differs from a full rebuild"


@pytest.fixture
def logs(tmp_path) -> Path:
    folder = tmp_path / "logs" / "proj"
    folder.mkdir(parents=True)
    (folder / "steady.jsonl").write_text(log_lines(0, 80, seed=1))
    (folder / "collapsing.jsonl").write_text(log_lines(0, 80, collapse_at=50, seed=2))
    (folder / "rewound.jsonl").write_text(log_lines(0, 80, seed=3))
    return folder


def elo_rows(first: int, steps: int) -> list[dict]:
    """A Diplomacy-style league: the base model and a bot lose ground to the run's own checkpoints."""
    return [
        {
            "loss": 1.0 / (s + 1),
            "reward": s / 10,
            "elo/base_model": 1000.0 - 3 * s,
            "elo/dumb_bot": 850.0 - s,
            f"elo/resumable_adapter_v{10 * (s // 10)}": 1000.0 + 4 * s,
        }
        for s in range(first, first + steps)
    ]


def extended_runs(settings: Settings) -> set[str]:
    """The runs the last build of `history` extended with their new rows rather than rewrote."""
    con = warehouse.connect_readonly(settings)
    try:
        return {run for (run,) in con.execute("select run_key from _history_appended_runs").fetchall()}
    finally:
        con.close()


def built_nodes(settings: Settings) -> set[str]:
    """The models the last dbt build of this home ran."""
    results = json.loads((settings.home / "dbt_target" / "run_results.json").read_text())
    return {r["unique_id"].split(".")[-1] for r in results["results"] if r["unique_id"].startswith("model.")}


def compiled(settings: Settings, name: str) -> str:
    """The SQL the last build compiled for a model or data test."""
    found = sorted((settings.home / "dbt_target" / "compiled").rglob(f"{name}.sql"))
    models = [path for path in found if path.parent.suffix != ".yml"]  # unit tests' inputs sit in <file>.yml/
    (path,) = models or found
    return path.read_text()


def run_keys(settings: Settings) -> dict[str, str]:
    con = warehouse.connect_readonly(settings)
    try:
        return dict(con.execute("select name, run_key from runs").fetchall())
    finally:
        con.close()


@pytest.mark.slow
def test_incremental_refreshes_equal_a_full_rebuild(tmp_path, logs):
    wandb_root = tmp_path / "wandb-runs"
    write_run(wandb_root, elo_rows(0, 30), run_id="resume01", name="resumable")
    hostile = logs.parent / 'it\'s "quoted"; --'  # a run_key with quotes, pasted into SQL as a literal
    hostile.mkdir()
    (hostile / "quoted.jsonl").write_text(log_lines(0, 50, seed=9))
    events = tmp_path / "events"
    events.mkdir()
    write_demo_events(events / "first.ndjson", datetime(2026, 1, 1, tzinfo=UTC), hours=1, seed=1)
    settings = Settings(
        home=tmp_path / "home", trainer_logs=(logs.parent,), wandb_dirs=(wandb_root,), event_files=(events,)
    )
    refresh(settings)
    assert build_plan.load_record(settings) is not None
    assert "_build_changed_runs" not in compiled(settings, "not_null_history_key")  # a full build tests all
    keys = run_keys(settings)
    con = warehouse.connect_readonly(settings)
    assert con.execute("select count(*) from elo_gap where run_key = $k", {"k": keys["resumable"]}).fetchone()[0] > 0
    con.close()
    manifest = settings.home / "dbt_target" / "manifest.json"
    written = manifest.stat().st_mtime_ns

    # Two runs grow (one logs a step twice: versions = 2), a new run starts.
    with open(logs / "steady.jsonl", "a") as fh:
        fh.write(log_lines(80, 20, seed=4) + log_lines(99, 1, seed=5))
    with open(logs / "collapsing.jsonl", "a") as fh:
        fh.write(log_lines(80, 20, collapse_at=50, seed=6))
    (logs / "newcomer.jsonl").write_text(log_lines(0, 40, seed=7))
    with open(hostile / "quoted.jsonl", "a") as fh:
        fh.write(log_lines(50, 10, seed=10))
    ingest(settings, tuple(SOURCES))
    plan = build_plan.plan(settings)
    assert not plan.full and keys["quoted"] in plan.changed_runs and "'" in keys["quoted"]
    assert set(plan.changed_runs) - {keys["steady"], keys["collapsing"], keys["quoted"]}
    assert len(plan.changed_runs) == 4
    warehouse.build(settings, stamp=False)
    checks.check_warehouse(settings)
    con = warehouse.connect_readonly(settings)
    assert con.execute("select max(versions) from history where run_key = $k", {"k": keys["steady"]}).fetchone()[0] == 2
    assert con.execute("select max(step) from history where run_key = $k", {"k": keys["quoted"]}).fetchone()[0] == 59
    con.close()
    assert "history" in built_nodes(settings) and "rollout_timing" not in built_nodes(settings)  # no event changed
    assert manifest.stat().st_mtime_ns == written  # the project is the full build's: its manifest is not rewritten
    # every changed run only grew by new steps (a repeated one among them): extended, not rewritten
    assert extended_runs(settings) == set(plan.changed_runs)
    assert_same_warehouse(settings.duckdb_path, full_rebuild(settings, tmp_path / "full-grown").duckdb_path)
    assert "_build_changed_runs" in compiled(settings, "not_null_history_key")  # tests read the changed runs
    # the lake is read with one equality per changed run (Parquet row groups skipped by their statistics)
    assert compiled(settings, "history").count("where run_key = 'trainer_log:") == 4

    # Only events arrive: no run changes, and no per-run model is rebuilt.
    write_demo_events(events / "second.ndjson", datetime(2026, 1, 1, 1, tzinfo=UTC), hours=1, seed=2)
    ingest(settings, tuple(SOURCES))
    plan = build_plan.plan(settings)
    assert not plan.full and plan.changed_runs == [] and plan.changed_sources == ["event_files_events"]
    warehouse.build(settings, stamp=False)
    checks.check_warehouse(settings)
    assert "rollout_timing" in built_nodes(settings) and "history" not in built_nodes(settings)

    # The log is rewound (rewritten shorter, different values): its run is read again from the start.
    (logs / "rewound.jsonl").write_text(log_lines(0, 30, collapse_at=10, seed=8))
    # A log is restarted with later steps only: nothing new overlaps what history holds of the run, but the rows
    # of its earlier steps go all the same.
    (logs / "collapsing.jsonl").write_text(log_lines(500, 10, seed=11))
    # The W&B run is resumed offline in another folder (_step restarts at 0 there).
    time.sleep(1.1)
    write_run(wandb_root, elo_rows(30, 10), run_id="resume01", name="resumable", resume="allow")
    refresh(settings)
    assert extended_runs(settings) == {keys["resumable"]}  # its steps go on from 30; the two logs are rewritten
    assert_same_warehouse(settings.duckdb_path, full_rebuild(settings, tmp_path / "full-rewound").duckdb_path)

    # An ingest interrupted after writing its part and before saving its cursor reads the same lines again.
    (settings.lake / "_state" / "trainer_log.json").unlink()
    shutil.rmtree(settings.lake / "_state" / "trainer_log", ignore_errors=True)
    refresh(settings)
    assert extended_runs(settings) == set()  # every run read again holds what it read before: rewritten

    # A part vanishes (moved out of the lake) and another is rewritten in place with other values.
    history = sorted((settings.lake / "history" / "source=trainer_log").glob("part-*.parquet"))
    newest = history[-1]
    newest.rename(tmp_path / newest.name)
    first = history[0]
    table = pq.read_table(first)
    table = table.set_column(
        table.schema.get_field_index("value"),
        "value",
        [[None if v is None else v * 2 for v in table.column("value").to_pylist()]],
    )
    pq.write_table(table, first)
    plan = build_plan.plan(settings)
    assert not plan.full and "vanished" in plan.reason and "rewritten" in plan.reason
    assert plan.changed_runs and plan.grown_runs == []  # runs that lost or changed rows are rewritten, never extended
    refresh(settings)

    assert_same_warehouse(settings.duckdb_path, full_rebuild(settings, tmp_path / "full").duckdb_path)


@pytest.mark.slow
def test_a_build_killed_at_random_moments_is_completed_by_the_next(tmp_path, logs):
    settings = Settings(home=tmp_path / "home", trainer_logs=(logs.parent,))
    refresh(settings)
    env = {**os.environ, "GRPOLENS_HOME": str(settings.home)}
    rng = random.Random(11)
    for attempt in range(3):
        with open(logs / "collapsing.jsonl", "a") as fh:
            fh.write(log_lines(80 + 10 * attempt, 10, collapse_at=50, seed=20 + attempt))
        (logs / f"extra{attempt}.jsonl").write_text(log_lines(0, 30, seed=30 + attempt))
        ingest(settings, tuple(SOURCES))
        build = subprocess.Popen(
            [str(BIN / "grpolens"), "build"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(rng.uniform(1.0, 6.0))
        os.killpg(build.pid, signal.SIGKILL)  # grpolens and its dbt child, wherever they are
        build.wait()
    refresh(settings)
    assert build_plan.pending_plan(settings) is None  # the completed build made its plan the record
    assert_same_warehouse(settings.duckdb_path, full_rebuild(settings, tmp_path / "full").duckdb_path)


def _children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    found = []
    for task in tasks.glob("*") if tasks.exists() else []:
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


@pytest.mark.slow
def test_a_refresh_killed_while_dbt_runs_takes_its_dbt_child_along(tmp_path, logs):
    """SIGKILL of `grpolens refresh` alone (not its process group, as a scheduler or an OOM killer may do) used to
    leave its dbt child building on, holding the write lock: the next refresh failed on "held by process N". The
    child now dies with its parent, and the next refresh completes the build at once."""
    settings = Settings(home=tmp_path / "home", trainer_logs=(logs.parent,))
    refresh(settings)
    (logs / "late.jsonl").write_text(log_lines(0, 40, seed=5))
    env = {**os.environ, "GRPOLENS_HOME": str(settings.home), "GRPOLENS_TRAINER_LOGS": str(logs.parent)}
    parent = subprocess.Popen(
        [str(BIN / "grpolens"), "refresh"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert parent.stderr is not None
    for line in parent.stderr:  # dbt is at work once the build is announced
        if "building the warehouse with dbt" in line:
            break
    (child,) = _children(parent.pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 0.5  # the kernel kills it at once; an orphan built on for ~2 s here
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        status = Path(f"/proc/{child}/status").read_text() if Path(f"/proc/{child}/status").exists() else ""
        if "State:\tZ" in status:  # dead, waiting for a reaper
            break
        time.sleep(0.05)
    status = Path(f"/proc/{child}/status")
    assert not status.exists() or "State:\tZ" in status.read_text(), "the dbt child outlived its parent"
    done = subprocess.run([str(BIN / "grpolens"), "refresh"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_nothing_changed_plans_nothing_and_full_refresh_rebuilds_everything(tmp_path, logs):
    settings = Settings(home=tmp_path / "home", trainer_logs=(logs.parent,))
    first = build_plan.plan(settings)
    assert first.full and first.reason == "no record of a complete build"
    refresh(settings)
    again = build_plan.plan(settings)
    assert not again.full and again.changed_runs == [] and again.selection() == []
    results = settings.home / "dbt_target" / "run_results.json"
    results.unlink()
    assert set(warehouse.build(settings)) == {"seconds"} and not results.exists()  # dbt was not started
    forced = build_plan.plan(settings, full_refresh=True)
    assert forced.full and len(forced.changed_runs) == 3
    # The same home copied elsewhere (a backup restored, a volume mounted at another path) is the same lake
    moved = Settings(home=tmp_path / "elsewhere" / "home", trainer_logs=(logs.parent,))
    shutil.copytree(settings.home, moved.home)
    assert build_plan.plan(moved).changed_runs == [] and build_plan.plan(moved).selection() == []
    # ... and a record from before parts were named by their path in the lake (absolute paths) still holds
    record = json.loads((moved.home / build_plan.RECORD).read_text())
    record["parts"] = {str(settings.lake / part): entry for part, entry in record["parts"].items()}
    (moved.home / build_plan.RECORD).write_text(json.dumps(record))
    assert build_plan.plan(moved).changed_runs == [] and build_plan.plan(moved).selection() == []
    # A table dropped by hand, then the whole warehouse: the next build is full whatever the record says (an
    # incremental one builds only what changed and would leave them missing).
    con = warehouse.connect_write(settings)
    con.execute("drop table rollout_timing")
    con.close()
    dropped = build_plan.plan(settings)
    assert dropped.full and dropped.reason == "the warehouse has no rollout_timing table"
    settings.duckdb_path.unlink()
    assert build_plan.plan(settings).full


def test_the_steps_after_the_build_know_when_they_lag_behind_the_warehouse(tmp_path, logs):
    """What a Dagster refresh with nothing new asks before it skips the checks and reports: whether the anomalies
    table and every run's report reflect the warehouse as built."""
    from pipeline.assets.dbt import lagging_steps
    from pipeline.report import batch

    settings = Settings(home=tmp_path / "home", trainer_logs=(logs.parent,))
    ingest(settings, tuple(SOURCES))
    warehouse.build(settings)  # `grpolens build`: no check
    assert lagging_steps(settings) == "the anomalies table and the reports"
    checks.check_warehouse(settings)
    assert lagging_steps(settings) == "the reports of 3 run(s)"
    batch.write_reports(settings, draw=False)
    assert lagging_steps(settings) is None
    with open(logs / "steady.jsonl", "a") as fh:  # `grpolens refresh` takes in more of one run
        fh.write(log_lines(80, 20, seed=4))
    refresh(settings)
    assert lagging_steps(settings) == "the reports of 1 run(s)"
    con = warehouse.connect_readonly(settings)
    try:
        assert batch.stale_reports(settings, con) == [run_keys(settings)["steady"]]
    finally:
        con.close()
    (settings.home / checks.CHECKED).unlink()  # the table's state lost: it is checked again
    assert lagging_steps(settings) == "the anomalies table and the reports"


def test_a_warehouse_of_events_alone_is_checked_once(tmp_path):
    """A lake with no run (Axiom or event files only) is checked when its events change, not on every refresh."""
    from pipeline.assets.dbt import lagging_steps

    events = tmp_path / "events"
    events.mkdir()
    write_demo_events(events / "first.ndjson", datetime(2026, 1, 1, tzinfo=UTC), hours=1, seed=1)
    settings = Settings(home=tmp_path / "home", event_files=(events,))
    refresh(settings)
    assert build_plan.run_versions(build_plan.load_record(settings)) == {}
    assert lagging_steps(settings) is None
    checked = (settings.home / checks.CHECKED).stat().st_mtime_ns
    checks.check_warehouse(settings)
    assert (settings.home / checks.CHECKED).stat().st_mtime_ns == checked  # read the table, wrote nothing
    write_demo_events(events / "second.ndjson", datetime(2026, 1, 1, 1, tzinfo=UTC), hours=1, seed=2)
    ingest(settings, tuple(SOURCES))
    warehouse.build(settings)
    assert lagging_steps(settings) == "the anomalies table and the reports"


def test_the_project_digest_changes_with_the_project_only(tmp_path):
    """A changed model rebuilds everything; dbt's user id (.user.yml, written beside profiles.yml when something
    runs dbt with usage statistics on) and its target folder are no change of the project."""
    project = tmp_path / "target" / "project"  # a checkout under a folder named like dbt's
    (project / "models").mkdir(parents=True)
    (project / "models" / "a.sql").write_text("select 1 as x")
    before = build_plan.files_digest(project)
    (project / ".user.yml").write_text("id: 5b0c")
    (project / "target").mkdir()
    (project / "target" / "a.sql").write_text("select 2 as x")
    assert build_plan.files_digest(project) == before
    (project / "models" / "a.sql").write_text("select 2 as x")
    assert build_plan.files_digest(project) != before


def test_a_run_key_no_sql_literal_can_hold_is_read_through_the_semi_join(tmp_path, logs):
    """A run_key with a NUL character (a damaged or hostile file's run id) cannot be pasted into the per-run lake
    scans: history falls back to the semi-join, and the build goes on."""
    settings = Settings(home=tmp_path / "home", trainer_logs=(logs.parent,))
    refresh(settings)
    odd = "trainer_log:local/proj/nul\x00run"
    rows = [
        {
            "run_key": odd,
            "step": s,
            "key": "reward",
            "value": s / 10,
            "value_type": "number",
            "ingest_id": 99,
            "file_offset": s,
        }
        for s in range(5)
    ]
    lake.write_part(settings.lake, "history", "trainer_log", 99, rows)
    run = {
        "run_key": odd,
        "source": "trainer_log",
        "entity": "local",
        "project": "proj",
        "run_id": "nul\x00run",
        "name": "nul run",
        "ingest_id": 99,
        "last_step": 4,
    }
    lake.write_part(settings.lake, "runs", "trainer_log", 99, [run])
    plan = build_plan.plan(settings)
    assert not plan.full and plan.changed_runs == [odd]
    warehouse.build(settings)
    assert "run_key in (select run_key from main._build_changed_runs)" in compiled(settings, "history")
    con = warehouse.connect_readonly(settings)
    try:
        assert con.execute("select count(*) from history where run_key = $k", {"k": odd}).fetchone()[0] == 5
    finally:
        con.close()


def wide_log(first: int, steps: int, keys: int, seed: int) -> str:
    """A JSONL metrics log with many keys a step: a few runs of it fill several of DuckDB's row groups."""
    rng = random.Random(seed)
    return "".join(
        json.dumps({"step": s, "reward": rng.random(), **{f"probe/k{k}": rng.random() for k in range(keys)}}) + "\n"
        for s in range(first, first + steps)
    )


def rows_scanned(con, sql: str, where: Path) -> int:
    """How many table rows DuckDB read to answer ``sql`` (its JSON profile's cumulative_rows_scanned)."""
    out = where / "profile.json"
    con.execute("pragma enable_profiling = 'json'")
    con.execute(f"pragma profiling_output = '{out}'")
    con.execute(sql).fetchall()
    con.execute("pragma disable_profiling")
    return json.loads(out.read_text())["cumulative_rows_scanned"]


@pytest.mark.slow
def test_the_changed_runs_are_read_from_their_own_row_groups(tmp_path):
    """history is stored ordered by run_hash, and the next models, the data tests and the checks of an incremental
    build filter on it: they read the changed run's row groups, not the whole table (a filter on run_key alone
    reads every row group: DuckDB's zone maps keep 8 bytes of a string, and every run_key here starts alike)."""
    folder = tmp_path / "logs" / "wide"
    folder.mkdir(parents=True)
    for n in range(12):
        (folder / f"run{n}.jsonl").write_text(wide_log(0, 2000, 60, seed=n))  # 122k values: a row group a run
    settings = Settings(home=tmp_path / "home", trainer_logs=(folder.parent,))
    refresh(settings)
    with open(folder / "run3.jsonl", "a") as fh:
        fh.write(wide_log(2000, 10, 60, seed=99))
    ingest(settings, tuple(SOURCES))
    plan = warehouse.build(settings, stamp=False)
    assert plan
    for node in ("metrics", "not_null_history_key"):  # a model reading history, a data test on it
        assert "run_hash in (select run_hash from main._build_changed_runs)" in compiled(settings, node), node
    con = warehouse.connect_readonly(settings)
    try:
        total = con.execute("select count(*) from history").fetchone()[0]
        changed = con.execute("select count(*) from history semi join _build_changed_runs using (run_key)").fetchone()
        assert total > 10 * 122_880 and changed[0] == 2010 * 61
        by_key = rows_scanned(
            con, "select count(*) from history where run_key in (select run_key from _build_changed_runs)", tmp_path
        )
        by_hash = rows_scanned(
            con,
            "select count(*) from history where run_hash in (select run_hash from _build_changed_runs) "
            "and run_key in (select run_key from _build_changed_runs)",
            tmp_path,
        )
    finally:
        con.close()
    assert by_key >= total  # why run_hash exists (and the one-row table of changed runs)
    # the run's row groups where it was (its rows deleted) and where it now is (appended): two or three each
    group = 122_880
    assert by_hash <= 4 * group < total / 2, (by_hash, total)
    # the checks read the changed run the same way (their views filter on run_hash)
    con = warehouse.connect_readonly(settings)
    try:
        checks._restrict_to_runs(con, [run_keys(settings)["run3"]])
        assert rows_scanned(con, "select count(*) from history", tmp_path) <= 4 * group
    finally:
        con.close()
