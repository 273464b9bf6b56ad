"""The real public W&B run file ingests with every history value equal to an independent decode of it."""

from __future__ import annotations

import json
import math

import duckdb
import pytest

from pipeline.sources import wandb_offline
from tests.conftest import LENGTH_COLLAPSE, REAL_RUNS


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("lake")
    report = wandb_offline.ingest(root, [REAL_RUNS])
    return root, report


def test_every_value_equals_the_independent_decode(lake):
    root, report = lake
    rows = duckdb.sql(f"""select step, key, value, value_int, value_text, value_type, epoch(ts)
                          from read_parquet('{root}/history/source=wandb_offline/*.parquet')""").fetchall()
    got = {(step, key): rest for step, key, *rest in rows}
    with open(LENGTH_COLLAPSE / "history_decoded.jsonl") as fh:
        expected = [json.loads(line) for line in fh]
    compared = 0
    for row in expected:
        step = row.pop("_step")
        media = {k.split("/", 2)[2]: row.pop(k) for k in list(row) if k.startswith("val/generations/")}
        for key, want in row.items():
            value, vint, text, _vtype, ts = got[(step, key)]
            if isinstance(want, str):
                assert text == want, key
            elif isinstance(want, int) and not isinstance(want, bool):
                assert vint == want and value == float(want), key
            else:
                assert value == want or (math.isnan(want) and math.isnan(value)), key
            compared += 1
        if "_timestamp" in row:
            assert ts == pytest.approx(row["_timestamp"], abs=1e-6)
        if media:  # a W&B table logged at this step: one value of type table-file, its fields intact
            value, vint, text, vtype, _ = got[(step, "val/generations")]
            assert vtype == "table-file" and json.loads(text) == media
            compared += 1
    assert compared == len(rows) == report.values
    assert len(expected) == 59


def test_run_metadata(lake):
    root, report = lake
    run = duckdb.sql(f"select * from read_parquet('{root}/runs/source=wandb_offline/*.parquet')").fetchall()
    cols = [
        d[0]
        for d in duckdb.sql(f"select * from read_parquet('{root}/runs/source=wandb_offline/*.parquet')").description
    ]
    (row,) = [dict(zip(cols, r, strict=True)) for r in run]
    assert (row["run_id"], row["project"], row["name"]) == ("gjvwlq13", "retool_opd", "qwen2_3b_opd")
    assert row["wandb_version"] == "0.23.0" and row["last_step"] == 58 and row["history_rows"] == 59
    assert row["state"] == "running"  # the copy has no exit record: it was taken while the run was going
    assert json.loads(row["config"])["actor_rollout_ref"]["actor"]["strategy"] == "fsdp"
    assert json.loads(row["summary"])["response_length/mean"] > 0
    assert any("incomplete record" in note for note in report.notes)
