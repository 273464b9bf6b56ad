"""`.wandb` files written by wandb 0.10 to 0.19 (tests/fixtures/wandb-versions: real runs people committed, each
SOURCE.txt saying what the file holds, read record by record): every history record comes back, in order, with
each run's end as the file tells it, and a file cut inside a record spanning blocks keeps every complete one."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipeline.sources import wandb_offline

VERSIONS = Path(__file__).parent / "fixtures" / "wandb-versions"


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    report = wandb_offline.ingest(root, [VERSIONS])
    return root, report


def _runs(root: Path) -> dict[str, tuple]:
    parts = f"{root}/runs/source=wandb_offline/*.parquet"
    rows = duckdb.sql(f"select run_id, exit_code, last_step, history_rows from read_parquet('{parts}')").fetchall()
    return {run_id: rest for run_id, *rest in rows}


def _steps(root: Path, run_id: str) -> tuple[int, int, int, set[str]]:
    (count, first, last, keys) = duckdb.sql(
        f"""select count(distinct step), min(step), max(step), list(distinct key)
            from read_parquet('{root}/history/source=wandb_offline/*.parquet')
            where run_key like '%/{run_id}' and not starts_with(key, '_')"""
    ).fetchone()
    return count, first, last, set(keys or [])


def test_every_version_is_read_without_an_issue(lake):
    root, report = lake
    assert report.files_seen == report.files_read == 4 and report.issues == []
    runs = _runs(root)
    assert set(runs) == {"35kc10hc", "clnzftry", "815ukod1", "h0m7677o"}


def test_each_file_gives_the_history_and_the_end_it_holds(lake):
    root, _ = lake
    runs = _runs(root)
    # 0.10.21: console output only, crashed with exit code 1
    assert runs["35kc10hc"] == [1, None, 0]
    # 0.14.2: _step 0..77, loss, lr, epoch and batch_id; exit code 255
    assert runs["clnzftry"] == [255, 77, 78]
    assert _steps(root, "clnzftry") == (78, 0, 77, {"loss", "lr", "epoch", "batch_id"})
    # 0.17.2: killed after one history record (no exit record)
    assert runs["815ukod1"][0] is None and runs["815ukod1"][1:] == [0, 1]
    count, first, last, keys = _steps(root, "815ukod1")
    assert (count, first, last) == (1, 0, 0) and "train/global_step" in keys and "train/preference_loss" in keys


def test_a_file_cut_inside_a_record_spanning_blocks_keeps_every_complete_record(lake):
    root, report = lake
    runs = _runs(root)
    assert runs["h0m7677o"][0] is None and runs["h0m7677o"][1:] == [2465, 2466]
    count, first, last, keys = _steps(root, "h0m7677o")
    assert (count, first, last) == (2466, 0, 2465) and {"batch_loss", "val_loss"} <= keys
    (note,) = [n for n in report.notes if "run-h0m7677o.wandb" in n]
    assert "incomplete record" in note
