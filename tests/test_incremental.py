"""Incremental ingest: nothing new costs nothing, appended records arrive exactly once, resumed runs merge."""

from __future__ import annotations

import random
import subprocess
import sys
import time

import duckdb

from pipeline.sources import wandb_offline
from tests.conftest import LENGTH_COLLAPSE, grpolens
from tests.wandb_writer import run_file, write_run

REAL_FILE = next(LENGTH_COLLAPSE.glob("run-*/run-*.wandb"))


def parts(lake, table="history"):
    return sorted((lake / table / "source=wandb_offline").glob("part-*.parquet"))


def raw_rows(lake):
    return duckdb.sql(f"""select run_key, step, key, value_text, value, ingest_id, file_offset
                          from read_parquet('{lake}/history/source=wandb_offline/*.parquet')""").fetchall()


def test_second_ingest_with_nothing_new_reads_and_writes_nothing(tmp_path):
    lake = tmp_path / "lake"
    first = wandb_offline.ingest(lake, [LENGTH_COLLAPSE])
    assert first.changed and first.values == 5650
    written = {p: p.stat().st_mtime_ns for p in lake.rglob("*.parquet")}
    again = wandb_offline.ingest(lake, [LENGTH_COLLAPSE])
    assert not again.changed and again.files_read == 0 and again.records == 0 and again.values == 0
    assert {p: p.stat().st_mtime_ns for p in lake.rglob("*.parquet")} == written


def test_growing_file_is_ingested_exactly_once(tmp_path):
    """The file grows in arbitrary pieces (mid-chunk, mid-record); the lake ends with each value once."""
    data = REAL_FILE.read_bytes()
    live = tmp_path / "wandb" / "run-20251130_144822-gjvwlq13" / "run-gjvwlq13.wandb"
    live.parent.mkdir(parents=True)
    lake = tmp_path / "lake"
    cuts = sorted(random.Random(3).sample(range(8, len(data)), 25)) + [len(data)]
    done = 0
    for cut in cuts:
        with open(live, "ab") as fh:
            fh.write(data[done:cut])
        done = cut
        wandb_offline.ingest(lake, [tmp_path / "wandb"])
    rows = raw_rows(lake)
    keys = [(r[0], r[1], r[2]) for r in rows]
    assert len(keys) == len(set(keys)) == 5650  # no value twice, none missing
    once = wandb_offline.ingest(tmp_path / "lake-once", [LENGTH_COLLAPSE])
    assert (
        sorted(r[:5] for r in rows) == sorted(r[:5] for r in raw_rows(tmp_path / "lake-once")) and once.values == 5650
    )


LIVE_WRITER = """
import sys, time, wandb
run = wandb.init(mode="offline", dir=sys.argv[1], id="liverun1", project="live",
                 settings=wandb.Settings(silent=True, x_disable_stats=True, console="off"))
for step in range(int(sys.argv[2])):
    run.log({"loss": 1.0 / (step + 1), "reward": step * 0.5, "text": f"row {step}"})
    time.sleep(0.01)
run.finish()
"""


def test_live_run_ingested_while_wandb_writes_it(tmp_path):
    """A real wandb process writes while ingest runs again and again; every row arrives once."""
    steps = 300
    writer = subprocess.Popen([sys.executable, "-c", LIVE_WRITER, str(tmp_path), str(steps)])
    lake = tmp_path / "lake"
    passes = 0
    while writer.poll() is None:
        wandb_offline.ingest(lake, [tmp_path / "wandb"])
        passes += 1
        time.sleep(0.05)
    assert writer.returncode == 0
    wandb_offline.ingest(lake, [tmp_path / "wandb"])
    rows = raw_rows(lake)
    user = sorted((r[1], r[2], r[3] if r[2] == "text" else r[4]) for r in rows if not r[2].startswith("_"))
    expected = sorted(
        [(s, "loss", 1.0 / (s + 1)) for s in range(steps)]
        + [(s, "reward", s * 0.5) for s in range(steps)]
        + [(s, "text", f"row {s}") for s in range(steps)]
    )
    assert user == expected
    assert passes >= 3 and len(parts(lake)) >= 2  # it really was read in several pieces
    state = duckdb.sql(
        f"select state from read_parquet('{lake}/runs/source=wandb_offline/*.parquet') order by ingest_id desc limit 1"
    ).fetchone()[0]
    assert state == "finished"


def test_run_resumed_in_another_folder_is_one_run(tmp_path):
    root = tmp_path / "runs"
    write_run(root, [{"loss": float(s)} for s in range(10)], run_id="resumed1", name="resumable")
    time.sleep(1.1)  # run folders are named by start second; wandb would otherwise reuse the folder name
    # Offline resume in a new process restarts _step at 0 (no server to ask where it stopped).
    write_run(root, [{"loss": 100.0 + s} for s in range(5)], run_id="resumed1", name="resumable", resume="allow")
    folders = sorted(p.name for p in (root / "wandb").iterdir() if p.name.startswith("offline-run"))
    assert len(folders) == 2
    report = wandb_offline.ingest(tmp_path / "lake", [root])
    assert len(report.runs_touched) == 1
    rows = sorted((r[1], r[4]) for r in raw_rows(tmp_path / "lake") if r[2] == "loss")
    assert rows == [(s, float(s)) for s in range(10)] + [(10 + s, 100.0 + s) for s in range(5)]
    assert any("restarted _step" in note for note in report.notes)


def test_latest_run_symlink_is_not_ingested_twice(tmp_path):
    root = tmp_path / "runs"
    folder = write_run(root, [{"x": 1.0}], run_id="linked01")
    assert (root / "wandb" / "latest-run").is_symlink()
    found = wandb_offline.discover([root])
    assert found == [run_file(folder).resolve()]


def test_resumed_run_that_logs_earlier_steps_again_replaces_them(tmp_path):
    """A resume that passes step= going back (restarted from an earlier checkpoint) carries the trainer's own steps:
    they are not shifted past the earlier segment but replace its values at those steps, also when both segments
    are read in one ingest, and duplicate_steps says so."""
    root = tmp_path / "runs"
    write_run(root, [({"reward": float(s)}, {"step": s}) for s in range(40)], run_id="rewind01", name="rewound")
    time.sleep(1.1)  # run folders are named by start second
    write_run(root, [({"reward": 100.0 + s}, {"step": s}) for s in range(20, 51)], run_id="rewind01", resume="allow")
    home = tmp_path / "home"
    refreshed = grpolens("refresh", env={"GRPOLENS_HOME": str(home), "GRPOLENS_WANDB_DIRS": str(root)}, check=True)
    assert "restarted _step" not in refreshed.stderr
    con = duckdb.connect(str(home / "grpolens.duckdb"), read_only=True)
    try:
        history = con.execute("select step, value, versions from history where key = 'reward' order by step")
        assert history.fetchall() == (
            [(s, float(s), 1) for s in range(20)]
            + [(s, 100.0 + s, 2) for s in range(20, 40)]
            + [(s, 100.0 + s, 1) for s in range(40, 51)]
        )
        assert con.execute("select last_step from runs").fetchall() == [(50,)]
        flags = con.execute("select step, step_end from anomalies where check_name = 'duplicate_steps'").fetchall()
        assert flags == [(20, 39)]
    finally:
        con.close()
