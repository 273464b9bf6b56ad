"""Completion samples around a root cause's onset, from the W&B tables a run logged: a real verl run (cumulative
wide validation table, most files missing), a TRL-style run written by the wandb library itself, and bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import duckdb
import pytest

from pipeline.report import samples as samples_mod
from pipeline.report.samples import completion_samples, samples_from_table
from tests.conftest import LENGTH_COLLAPSE, grpolens

VERL_RUN = "wandb:local/retool_opd/gjvwlq13"
TRL_RUN = "wandb:testers/tests/samples1"


def _build(home: Path, wandb_dirs: Path) -> duckdb.DuckDBPyConnection:
    """Ingest, then build only `runs` and `history` (and what they read): the samples need nothing else."""
    grpolens("--home", str(home), "ingest", env={"GRPOLENS_WANDB_DIRS": str(wandb_dirs)}, check=True)
    grpolens(
        "--home",
        str(home),
        "build",
        "--select",
        "+history +runs",
        env={"DBT_INDIRECT_SELECTION": "cautious"},
        check=True,
    )
    return duckdb.connect(str(home / "grpolens.duckdb"), read_only=True)


@pytest.fixture(scope="module")
def verl_con(tmp_path_factory):
    con = _build(tmp_path_factory.mktemp("verl-home"), LENGTH_COLLAPSE)
    yield con
    con.close()


@pytest.fixture(scope="module")
def trl_con(tmp_path_factory):
    import wandb

    from tests.wandb_writer import write_run

    root = tmp_path_factory.mktemp("trl-wandb")

    def rows():
        for step in range(45):
            row = {"reward": 0.8 if step < 25 else 0.1}
            if step % 10 == 0:  # TRL logs step as a string; completions collapse after step 25
                text = "Let me think step by step. " * 40 if step < 25 else "42"
                row["completions"] = wandb.Table(
                    columns=["step", "prompt", "completion", "reward"],
                    data=[[str(step), f"question {i} at {step}", f"{text} (sample {i})", 0.25 * i] for i in range(4)],
                )
            yield row

    with pytest.MonkeyPatch.context() as mp:
        for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR"):
            mp.setenv(name, str(root / name.lower()))
        mp.setenv("WANDB_MODE", "offline")
        write_run(root, rows(), run_id="samples1")
    con = _build(tmp_path_factory.mktemp("trl-home"), root)
    yield con
    con.close()


def test_real_verl_length_collapse(verl_con):
    got = completion_samples(verl_con, VERL_RUN, 36)
    assert got["available"] and got["key"] == "val/generations"
    assert [s["step"] for s in got["before"]] == [30, 30, 30]
    assert [s["step"] for s in got["after"]] == [40, 40, 40]
    for s in got["before"] + got["after"]:
        assert s["prompt"].endswith("assistant\n") and "Find" in s["prompt"]  # the question, not the system prompt
        assert s["length_chars"] > 600 and len(s["completion"]) == 601 and s["completion"].endswith("…")
        assert isinstance(s["reward"], float) and -1.0 <= s["reward"] <= 0
    # Validation still answers at length at step 40; the collapse to a bare \boxed{N} shows from step 50 on.
    late = completion_samples(verl_con, VERL_RUN, 41)
    assert [s["step"] for s in late["before"]] == [40, 40, 40] and [s["step"] for s in late["after"]] == [50] * 3
    assert max(s["length_chars"] for s in late["after"]) < 20
    assert all(s["completion"].startswith("\\boxed{") for s in late["after"])
    before_len = sum(s["length_chars"] for s in got["before"]) / 3
    assert before_len > 20 * max(s["length_chars"] for s in late["after"])
    assert len(got["files"]) == 1 and got["files"][0].endswith(".table.json") and "generations_59_" in got["files"][0]
    assert "6 of 6 table files of val/generations" in got["note"] and "not found" in got["note"]
    assert str(LENGTH_COLLAPSE) in got["note"]
    end = completion_samples(verl_con, VERL_RUN, None, per_side=2)
    assert end["before"] == [] and [s["step"] for s in end["after"]] == [60, 60]


def test_wandb_offline_trl_table(trl_con):
    got = completion_samples(trl_con, TRL_RUN, 25)
    assert got["available"] and got["key"] == "completions" and got["note"] is None
    assert [s["step"] for s in got["before"]] == [20, 20, 20] and [s["step"] for s in got["after"]] == [30, 30, 30]
    assert [s["reward"] for s in got["after"]] == [0.0, 0.25, 0.5]
    assert [s["prompt"] for s in got["after"]] == [f"question {i} at 30" for i in range(3)]
    assert got["after"][0]["completion"] == "42 (sample 0)" and got["after"][0]["length_chars"] == 13
    assert all(s["length_chars"] > 1000 for s in got["before"])
    assert len(got["files"]) == 5  # nearest three on each side: every logging here
    at = completion_samples(trl_con, TRL_RUN, 30, per_side=1)  # a logged step is the onset: it comes after
    assert [s["step"] for s in at["before"]] == [20] and [s["step"] for s in at["after"]] == [30]
    more = completion_samples(trl_con, TRL_RUN, 25, per_side=6)  # short of samples at step 20: step 10 fills in
    assert [s["step"] for s in more["before"]] == [10, 10, 20, 20, 20, 20]
    none = completion_samples(trl_con, "wandb:nobody/none/x", 25)
    assert not none["available"] and "no W&B tables" in none["note"]


# Bad input, on a small warehouse of our own: the same two tables, the files where a run folder keeps them.


def _warehouse(tmp_path: Path, refs: dict[str, list[int]], source_files=None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("create table runs (run_key varchar, name varchar, source varchar, source_files varchar[])")
    con.execute("create table history (run_key varchar, step bigint, key varchar, value double, value_text varchar)")
    wandb_file = tmp_path / "run-x" / "run-x.wandb"
    con.execute(
        "insert into runs values ('r', 'r', 'wandb', ?)",
        [[str(wandb_file)] if source_files is None else source_files or None],
    )
    for key, steps in refs.items():
        for step in steps:
            ref = {"_type": "table-file", "path": f"media/table/{key}_{step}_abc123.table.json", "nrows": 2}
            con.execute("insert into history values ('r', ?, ?, null, ?)", [step, key, json.dumps(ref)])
    return con


def _table_file(tmp_path: Path, key: str, step: int, content) -> Path:
    path = tmp_path / "run-x" / "files" / "media" / "table" / f"{key}_{step}_abc123.table.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def _long(step: int, text: str, n: int = 2) -> dict:
    return {
        "columns": ["step", "prompt", "completion", "reward"],
        "data": [[step, f"p{i}", f"{text}{i}", 1.0] for i in range(n)],
    }


def test_no_tables_and_not_offline(tmp_path):
    assert "no W&B tables of completions were logged" in completion_samples(_warehouse(tmp_path, {}), "r", 5)["note"]
    got = completion_samples(_warehouse(tmp_path, {"completions": [0]}, source_files=[]), "r", 5)
    assert not got["available"] and "not from a W&B offline folder" in got["note"]
    got = completion_samples(_warehouse(tmp_path, {"completions": [0]}), "r", 5)
    assert not got["available"] and "no longer exists" in got["note"]
    assert "could not read" in completion_samples(duckdb.connect(), "r", 5)["note"]


def test_corrupt_big_and_missing_files(tmp_path, monkeypatch):
    con = _warehouse(tmp_path, {"completions": [0, 10, 20, 30]})
    _table_file(tmp_path, "completions", 0, _long(0, "a"))
    _table_file(tmp_path, "completions", 10, '{"columns": ["step", "completion"], "data": [[10, "tru')
    big = _table_file(tmp_path, "completions", 30, _long(30, "c"))
    monkeypatch.setattr(samples_mod, "MAX_FILE_BYTES", big.stat().st_size - 1)
    got = completion_samples(con, "r", 15)
    assert [s["step"] for s in got["before"]] == [0, 0] and got["after"] == [] and got["available"]
    assert "1 of 4 table files" in got["note"] and str(tmp_path / "run-x" / "files") in got["note"]
    assert "could not read completions_10_abc123.table.json" in got["note"]
    assert "skipped completions_30_abc123.table.json" in got["note"] and "50 MB" in got["note"]
    _table_file(tmp_path, "completions", 0, "not json at all")
    got = completion_samples(con, "r", 15)
    assert not got["available"] and got["before"] == got["after"] == [] and "could not read" in got["note"]


def test_chooses_completion_key_and_reads_unreferenced_files(tmp_path):
    con = _warehouse(tmp_path, {"val/generations": [0], "train/completions": [0, 10], "charts/hist": [0]})
    _table_file(tmp_path, "val/generations", 0, _long(0, "v", n=1))
    _table_file(tmp_path, "train/completions", 0, _long(0, "t"))
    _table_file(tmp_path, "train/completions", 10, _long(10, "t"))
    _table_file(tmp_path, "train/completions", 20, _long(20, "late"))  # the history's copy ended before this one
    _table_file(tmp_path, "charts/hist", 0, {"columns": ["bin", "count"], "data": [[1, 2]]})
    got = completion_samples(con, "r", 15)
    assert got["key"] == "train/completions" and [s["step"] for s in got["after"]] == [20, 20]
    assert "1 table file(s) of train/completions in the run folder are not in the history" in got["note"]
    assert "other tables logged: val/generations, charts/hist" in got["note"]
    only_hist = _warehouse(tmp_path / "h", {"charts/hist": [0]})
    _table_file(tmp_path / "h", "charts/hist", 0, {"columns": ["bin", "count"], "data": [[1, 2]]})
    got = completion_samples(only_hist, "r", 15)
    assert not got["available"] and "no completion-like text column" in got["note"]


def test_samples_from_table_pure():
    assert samples_from_table("[1, 2]") == ([], "not a W&B table (no columns and data)")
    assert samples_from_table({"columns": ["a"], "data": "x"})[0] == []
    got, why = samples_from_table({"columns": ["step", "question", "score"], "data": [[1, "q", 0.5]]})
    assert got == [] and "no completion-like text column" in why
    nan = float("nan")
    table = {
        "columns": [
            "step",
            "prompt",
            "completion",
            "completion_length",
            "accuracy_reward",
            "format_reward",
            "advantage",
        ],
        "data": [
            ["7", "p" * 1000, "x" * 700, 700, 1.0, 0.5, 0.3],  # step as TRL writes it: a string
            [8, [{"role": "user", "content": "hi"}], {"text": "odd"}, 3, nan, 1.0, 0.1],
            [9, "p", None, 0, 1.0, 1.0, 0.0],  # no completion: not a sample
            [10, "p", "short"],
        ],
    }  # ragged row: skipped
    got, why = samples_from_table(table, max_chars=600)
    assert why is None and len(got) == 2
    assert got[0]["step"] == 7 and got[0]["length_chars"] == 700 and got[0]["completion"] == "x" * 600 + "…"
    assert got[0]["prompt"] == "…" + "p" * 600 and got[0]["reward"] == 1.5  # two reward functions: their sum
    assert got[1]["reward"] is None and got[1]["prompt"] == "user: hi" and json.loads(got[1]["completion"])
    wide = {
        "columns": ["step", "input_1", "output_1", "score_1", "input_2", "output_2", "score_2"],
        "data": [[40, "i1", "o1", nan, "i2", 17, "bad"]],
    }
    got, _ = samples_from_table(wide)
    assert [(s["prompt"], s["completion"], s["reward"]) for s in got] == [("i1", "o1", None), ("i2", "17", None)]
    numbered = {"columns": ["prompt", "completion", "reward_fn_1", "reward_fn_2"], "data": [["p", "c", 1.0, 0.5]]}
    assert samples_from_table(numbered)[0][0]["reward"] == 1.5  # one completion column: not a wide table
    got, _ = samples_from_table({"columns": ["response", "advantage"], "data": [["r", -0.5]]}, default_step=3)
    assert got == [{"step": 3, "prompt": None, "completion": "r", "reward": -0.5, "length_chars": 1}]
    assert not any(math.isnan(s["reward"]) for s in got if s["reward"] is not None)
