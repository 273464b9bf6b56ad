"""A damaged or foreign file is named in the output and in ingest_issues; every other run still ingests."""

from __future__ import annotations

import shutil

import duckdb

from pipeline.sources import wandb_log, wandb_offline
from tests.conftest import LENGTH_COLLAPSE
from tests.wandb_writer import write_run

REAL_FILE = next(LENGTH_COLLAPSE.glob("run-*/run-*.wandb"))


def test_corrupt_truncated_and_foreign_files_do_not_stop_the_rest(tmp_path):
    root = tmp_path / "runs"
    write_run(root, [{"loss": 1.0 / (s + 1)} for s in range(20)], run_id="healthy1")
    damaged = root / "copied" / "run-20251130_144822-gjvwlq13" / "run-gjvwlq13.wandb"
    damaged.parent.mkdir(parents=True)
    shutil.copy(REAL_FILE, damaged)
    damaged.chmod(0o644)
    with open(damaged, "r+b") as fh:  # flip one byte inside block 30
        fh.seek(30 * wandb_log.BLOCK_SIZE + 500)
        byte = fh.read(1)
        fh.seek(30 * wandb_log.BLOCK_SIZE + 500)
        fh.write(bytes([byte[0] ^ 0x55]))
    foreign = root / "elsewhere" / "run-notreally.wandb"
    foreign.parent.mkdir()
    foreign.write_text("this is a text file that happens to be named like a run file\n")

    report = wandb_offline.ingest(tmp_path / "lake", [root])
    kinds = {(i.path, i.kind) for i in report.issues}
    assert (str(damaged.resolve()), "checksum") in kinds and (str(foreign.resolve()), "not_wandb") in kinds
    assert any("checksum" in line and "gjvwlq13" in line for line in report.lines())
    rows = dict(
        duckdb.sql(f"""select run_key, count(*) from read_parquet('{tmp_path}/lake/history/*/*.parquet')
                               group by run_key""").fetchall()
    )
    healthy = next(v for k, v in rows.items() if k.endswith("/healthy1"))
    assert healthy == 20 * 3  # loss, _runtime, _timestamp on every row
    damaged_rows = next(v for k, v in rows.items() if k.endswith("/gjvwlq13"))
    assert 5650 - 100 < damaged_rows <= 5650  # only the damaged record is missing: reading resumes at the next
    issues = duckdb.sql(f"select kind, path from read_parquet('{tmp_path}/lake/ingest_issues/*/*.parquet')").fetchall()
    assert {k for k, _ in issues} >= {"checksum", "not_wandb"}
    # Nothing new: the damage is not reported again and the foreign file is not re-read.
    again = wandb_offline.ingest(tmp_path / "lake", [root])
    assert not again.changed and again.issues == []
