"""SIGKILL an ingest at random moments, run it again: nothing lost, nothing doubled."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import duckdb
import pytest

from pipeline.sources import wandb_offline
from tests.wandb_writer import write_run

INGEST = """
import sys
from pathlib import Path
from pipeline.sources import wandb_offline
print("ready", flush=True)
report = wandb_offline.ingest(Path(sys.argv[1]), [Path(sys.argv[2])], batch_rows=20_000)
print("done", report.values, flush=True)
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    rng = random.Random(11)
    keys = [f"family{k % 7}/metric_{k}" for k in range(100)]
    for r in range(3):
        write_run(root, [{k: rng.random() for k in keys} for _ in range(1500)], run_id=f"killrun{r}")
    return root


def deduplicated(lake):
    """The staging rule (newest ingest wins per run, step, key) applied to the raw lake."""
    return duckdb.sql(f"""
        select run_key, step, key, value from read_parquet('{lake}/history/source=wandb_offline/*.parquet')
        qualify row_number() over (partition by run_key, step, key order by ingest_id desc, file_offset desc) = 1
    """).fetchall()


def ingest_process(lake, runs, delay=None):
    """Run an ingest in a child process; kill it with SIGKILL ``delay`` seconds in. Returns (killed, seconds)."""
    proc = subprocess.Popen([sys.executable, "-c", INGEST, str(lake), str(runs)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    started = time.perf_counter()
    killed = False
    if delay is not None:
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
    proc.wait()
    assert killed or proc.returncode == 0
    return killed, time.perf_counter() - started


@pytest.mark.slow
def test_kill_anywhere_then_rerun_loses_and_doubles_nothing(tmp_path, runs):
    clean = wandb_offline.ingest(tmp_path / "clean", [runs])
    assert clean.values == 3 * 1500 * 102  # each row also has _runtime and _timestamp
    expected = sorted(deduplicated(tmp_path / "clean"))
    _, duration = ingest_process(tmp_path / "timing", runs)  # how long a whole ingest takes here, now

    def verify(lake):
        got = deduplicated(lake)
        assert len(got) == clean.values and sorted(got) == expected
        assert not wandb_offline.ingest(lake, [runs]).changed  # every cursor sits exactly at the end
        assert not list(lake.rglob(".*.tmp"))  # what killed ingests were writing is gone

    rng = random.Random(5)
    kills, lakes, attempts = 0, 0, 0
    lake = tmp_path / "lake-0"
    # Whether an attempt is killed depends on how fast the machine is at that moment (a resumed ingest has less to
    # do), so after ten attempts more are made until five were killed.
    while attempts < 10 or (kills < 5 and attempts < 30):
        attempts += 1
        # Kill moments spread over the whole ingest, its commits and the cursor save at the very end included.
        killed, _ = ingest_process(lake, runs, delay=rng.uniform(0.02, 1.0) * duration)
        kills += killed
        if any(lake.rglob("part-*.parquet")):
            deduplicated(lake)  # whatever moment it died at, the lake stays readable
        if not killed:  # this attempt finished after earlier ones were killed: check it, then start over
            verify(lake)
            lakes += 1
            lake = tmp_path / f"lake-{lakes}"
    assert kills >= 5
    ingest_process(lake, runs)
    verify(lake)
