"""Trainer logs as a source: trainer_state.json, JSONL metric logs, TRL and verl console logs.

The real files under tests/fixtures/real-runs are the fixtures: every value the lake holds must be the value the
file holds. Synthetic files (written here, in tmp_path) cover what the real ones do not: growth mid-line, bad
lines, rewritten snapshots, console noise.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from pipeline import lake
from pipeline.sources import files, trainer_log_lines, trainer_logs
from tests.conftest import LENGTH_COLLAPSE, REAL_RUNS, grpolens, write_jsonl

UNSLOTH = REAL_RUNS / "unsloth-llama31-8b-grpo-gsm8k"
STABLE_LOG = REAL_RUNS / "verl-opd-qwen2-3b-stable" / "output.log"
COLLAPSE_LOG = next(LENGTH_COLLAPSE.glob("run-*/files/output.log"))
SNIPPETS = REAL_RUNS / "issue-snippets-trl-grpo-ppo"
TRAINER_LOG_FIXTURES = Path(__file__).parent / "fixtures" / "trainer-logs"  # parser fixtures: README there


def history(lake_root: Path, where: str = "true") -> list[tuple]:
    return duckdb.sql(f"""
        select run_key, step, key, value, value_int, value_text, value_type, ts, ingest_id, file_offset
        from read_parquet('{lake_root}/history/source=trainer_log/*.parquet') where {where}
        order by run_key, step, key, ingest_id""").fetchall()


def values_by_step(lake_root: Path, run_key: str) -> dict[int, dict[str, tuple]]:
    out: dict[int, dict[str, tuple]] = {}
    for row in history(lake_root, f"run_key = '{run_key}'"):
        assert row[2] not in out.setdefault(row[1], {}), f"{row[2]} twice at step {row[1]}"
        out[row[1]][row[2]] = row
    return out


def runs(lake_root: Path) -> dict[str, dict]:
    rel = duckdb.sql(f"""select * from read_parquet('{lake_root}/runs/source=trainer_log/*.parquet')
                         qualify row_number() over (partition by run_key order by ingest_id desc) = 1""")
    return {row[0]: dict(zip(rel.columns, row, strict=True)) for row in rel.fetchall()}


def run_of(lake_root: Path, name: str) -> dict:
    [found] = [r for r in runs(lake_root).values() if r["name"] == name]
    return found


def parts(lake_root: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in lake_root.rglob("part-*.parquet")}


def same(lake_value: float | None, expected) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return lake_value is not None and math.isnan(lake_value)
    return lake_value == float(expected)


# --------------------------------------------------------------------------------------------- real files


def test_a_refresh_of_trainer_logs_does_not_load_wandb(tmp_path):
    """wandb's import (0.8 s) was most of a no-op refresh of trainer logs: only the W&B sources load it."""
    code = (
        "import sys; from pathlib import Path; from pipeline.ingest import SOURCES, ingest; "
        "from pipeline.settings import Settings; "
        f"said = ingest(Settings(home=Path({str(tmp_path / 'home')!r}), trainer_logs=(Path({str(UNSLOTH)!r}),))); "
        "wandb = sorted(m for m in sys.modules if m.split('.')[0] == 'wandb'); "
        "print(said['trainer_log'].values, said['wandb_offline'], wandb)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) > 100 and out[1:] == ["None", "[]"], out  # read the run; skipped W&B; never imported wandb


def test_everything_under_real_runs_ingests_then_nothing_new_costs_nothing(tmp_path):
    lake_root = tmp_path / "lake"
    first = trainer_logs.ingest(lake_root, [REAL_RUNS])
    # the W&B run file is the one file not read that is said (its folder's media, summaries and console are W&B's
    # own: read here, its files/output.log was a second run of the same training)
    assert first.changed and [(Path(i.path).suffix, i.kind) for i in first.issues] == [(".wandb", "not_read")]
    found = {(r["origin"], r["project"], r["name"]) for r in runs(lake_root).values()}
    assert found == {
        ("trainer_state", "real-runs", "unsloth-llama31-8b-grpo-gsm8k"),
        ("console_verl", "real-runs", "verl-opd-qwen2-3b-stable"),
        ("jsonl", "wandb-binary-verl-opd-qwen2-3b-lengthcollapse", "history_decoded"),
        ("console_trl", "issue-snippets-trl-grpo-ppo", "hongbomiao_pr37684_trl_ppo"),
        ("console_trl", "issue-snippets-trl-grpo-ppo", "open-r1_issue239"),
        ("console_trl", "issue-snippets-trl-grpo-ppo", "open-r1_issue255"),
        ("console_trl", "issue-snippets-trl-grpo-ppo", "open-r1_issue257"),
        ("console_trl", "issue-snippets-trl-grpo-ppo", "trl_issue3452"),
    }
    for run in runs(lake_root).values():
        assert run["source"] == "trainer_log" and run["entity"] == "local"
        assert run["run_key"] == f"trainer_log:local/{run['project']}/{run['run_id']}"
        assert re.fullmatch(r"[0-9a-f]{12}", run["run_id"])
        assert run["heartbeat_at"] is not None and run["source_files"]
    written = parts(lake_root)
    state_file = lake_root / "_state" / "trainer_log.json"
    state_mtime = state_file.stat().st_mtime_ns
    assert trainer_logs.pending_files(lake_root, [REAL_RUNS]) == []
    again = trainer_logs.ingest(lake_root, [REAL_RUNS])
    assert not again.changed and again.files_read == 0 and again.records == 0 and again.values == 0
    assert again.issues == [] and again.notes == []  # what was skipped is said once
    assert again.files_seen == first.files_seen
    assert parts(lake_root) == written and state_file.stat().st_mtime_ns == state_mtime


def test_unsloth_trainer_state_every_value_exact(tmp_path):
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [UNSLOTH])
    doc = json.loads((UNSLOTH / "trainer_state.json").read_text())
    run = run_of(lake_root, "unsloth-llama31-8b-grpo-gsm8k")
    got = values_by_step(lake_root, run["run_key"])
    assert report.values == sum(len(e) - 1 for e in doc["log_history"]) == 3250
    assert sorted(got) == list(range(1, 251))
    for entry in doc["log_history"]:
        row = got[entry["step"]]
        assert set(row) == set(entry) - {"step"}  # the step is the row's step, not a value
        for key, expected in entry.items():
            if key != "step":
                assert row[key][3] == expected and row[key][6] == "number", (entry["step"], key)
    assert sum(1 for step in got.values() if step["reward_std"][3] == 0) == 64
    assert got[206]["kl"][3] == 0.9347108602523804 == next(e["kl"] for e in doc["log_history"] if e["step"] == 206)
    assert all(row[7] is None for step in got.values() for row in step.values())  # the file has no times
    assert run["state"] == "finished" and run["last_step"] == 250 and run["history_rows"] == 250
    config = json.loads(run["config"])
    assert config["max_steps"] == 250 and config["logging_steps"] == 1 and "global_step" not in config
    assert config["train_batch_size"] == 1 and config["num_train_epochs"] == 1 and "log_history" not in config
    assert json.loads(run["summary"])["reward"] == doc["log_history"][-1]["reward"]


def _verl_step_lines(path: Path) -> list[str]:
    return [line.rstrip("\n") for line in path.open(encoding="utf-8") if line.startswith("step:")]


def _expected_verl_pairs(line: str) -> tuple[int, dict[str, str], str | None]:
    """Independent reading of one console step line: the pairs that are whole, and the cut one if any."""
    pairs = line.split(" - ")
    step = int(pairs.pop(0).removeprefix("step:"))
    cut = pairs.pop() if len(line) >= 4096 else None
    return step, dict(p.split(":", 1) for p in pairs), cut


def _plain_number(text: str) -> float:
    match = re.fullmatch(r"np\.(?:float64|int32|int64)\((.*)\)", text)
    return float(match.group(1) if match else text)


def test_a_trainer_states_config_is_its_settings_not_the_progress_training_recorded(tmp_path):
    """A trainer_state.json holds the run's arguments beside what training produced: how far it got (epoch,
    global_step, total_flos), its best checkpoint, the process flags and the TrainerControl's. Taken as the config,
    they made a sweep of three runs report "epoch: rho = -0.87" and suggest "epoch 0.114" as a setting."""
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [TRAINER_LOG_FIXTURES / "xling-openrs-rs2-42"])
    run = run_of(lake_root, "xling-openrs-rs2-42")
    assert json.loads(run["config"]) == {
        "eval_steps": 500,
        "logging_steps": 5,
        "max_steps": 100,
        "num_train_epochs": 1,
        "save_steps": 50,
        "train_batch_size": 6,
        "trial_name": None,
        "trial_params": None,
    }
    doc = json.loads(next((TRAINER_LOG_FIXTURES / "xling-openrs-rs2-42").glob("*/trainer_state.json")).read_text())
    assert set(doc) - set(json.loads(run["config"])) == set(doc) & trainer_logs.STATE_BOOKKEEPING  # only those left
    assert run["state"] == "running" and run["last_step"] == 50  # what the progress says is still read from it


def test_verl_stable_console_log(tmp_path):
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [STABLE_LOG])
    run = run_of(lake_root, "verl-opd-qwen2-3b-stable")
    assert run["origin"] == "console_verl" and run["state"] == "unknown" and run["project"] == "real-runs"
    got = values_by_step(lake_root, run["run_key"])
    assert sorted(got) == list(range(180)) and run["last_step"] == 179 and run["history_rows"] == 180
    lines = _verl_step_lines(STABLE_LOG)
    truncated = [line for line in lines if len(line) >= 4096]
    assert len(truncated) == 18
    for line in lines:
        step, pairs, cut = _expected_verl_pairs(line)
        assert set(got[step]) == set(pairs), step
        for key, text in pairs.items():
            assert got[step][key][3] == _plain_number(text), (step, key)
        if cut is not None:  # the pair W&B cut short is gone, the complete ones before it are all there
            cut_key = cut.split(":", 1)[0]
            assert cut_key not in got[step] and len(got[step]) == len(pairs) >= 50
    assert got[1]["perf/throughput"][3] == 1014.7088345875407
    assert got[1]["global_seqlen/min"][4] == 336776  # an integer stays exact
    assert got[10]["val-aux/aime_2024/score/maj@8/std"][3] == 0.22439304474242153  # last whole pair of a cut line
    assert "val-aux/aime_2024/score/best@16/mean" not in got[10]  # the cut one: 'np.float64(-0.339593'


def test_verl_collapse_console_equals_the_runs_wandb_history(tmp_path):
    """The console log and the .wandb file of one run were written by the same process: same values."""
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [COLLAPSE_LOG])
    run = run_of(lake_root, "run-20251130_144822-gjvwlq13")
    assert run["project"] == "wandb-binary-verl-opd-qwen2-3b-lengthcollapse"
    got = values_by_step(lake_root, run["run_key"])
    assert sorted(got) == list(range(60))  # step 59 reached the console, never the W&B history
    wandb_rows = [json.loads(line) for line in (LENGTH_COLLAPSE / "history_decoded.jsonl").open()]
    compared = 0
    for row in wandb_rows:
        step = row["_step"]
        for key, expected in row.items():
            if key in got[step] and isinstance(expected, (int, float)):
                assert same(got[step][key][3], expected), (step, key, got[step][key], expected)
                compared += 1
    assert compared > 4000
    shared_keys = {k for row in wandb_rows for k in row} & {k for step in got.values() for k in step}
    assert {"actor/entropy", "actor/grad_norm", "response_length/mean", "critic/score/mean"} <= shared_keys
    cut_lines = [line for line in _verl_step_lines(COLLAPSE_LOG) if len(line) >= 4096]
    assert len(cut_lines) == 6


def test_trl_issue_snippets(tmp_path):
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [SNIPPETS])
    total = 0
    for path in sorted(SNIPPETS.glob("*.log")):
        run = run_of(lake_root, path.stem)
        assert run["origin"] == "console_trl"
        assert json.loads(run["config"]) == {"step_source": "ordinal"}  # the dicts carry no step: lines are counted
        got = values_by_step(lake_root, run["run_key"])
        dicts = [ast.literal_eval(line) for line in path.read_text().splitlines()]
        assert sorted(got) == list(range(1, len(dicts) + 1))
        for ordinal, expected in enumerate(dicts, 1):
            assert set(got[ordinal]) == set(expected)
            for key, value in expected.items():
                assert got[ordinal][key][3] == value, (path.name, ordinal, key)
        total += len(dicts)
    assert total == 11
    ppo = values_by_step(lake_root, run_of(lake_root, "hongbomiao_pr37684_trl_ppo")["run_key"])
    assert ppo[2]["objective/kl"][3] == 11.28681755065918 and ppo[2]["episode"][4] == 832


# ------------------------------------------------------------------------------------------ incremental


VERL_LINE = (
    "step:{n} - actor/entropy:np.float64(0.{n}5) - critic/score/mean:{n}.25 - response_length/max:np.int32(1{n})\n"
)
TRL_LINE = "{{'loss': 0.{n}, 'reward': '1.{n}', 'kl': 0.00{n}, 'epoch': 0.{n}}}\n"
JSONL_LINE = '{{"step": {n}, "data": {{"actor/entropy": 0.{n}5, "critic/score/mean": {n}.25}}}}\n'


@pytest.mark.parametrize(
    "name,template",
    [
        ("metrics.jsonl", JSONL_LINE),
        ("train.log", VERL_LINE),
        ("trl.log", TRL_LINE),
        ("train_metrics.jsonl", JSONL_LINE),  # generic words alone: named after its folder too (a verl JSONL)
    ],
)
def test_half_written_line_waits_and_arrives_once(tmp_path, name, template):
    log = tmp_path / "runs" / "exp1" / name
    log.parent.mkdir(parents=True)
    lake_root = tmp_path / "lake"
    one, two, three = (template.format(n=n) for n in (1, 2, 3))
    log.write_text(one + two[: len(two) // 2])
    first = trainer_logs.ingest(lake_root, [tmp_path / "runs"])
    assert sorted({r[1] for r in history(lake_root)}) == [1]
    assert trainer_logs.pending_files(lake_root, [tmp_path / "runs"]) == []  # same size: nothing to read yet
    assert not trainer_logs.ingest(lake_root, [tmp_path / "runs"]).changed
    with open(log, "a") as fh:
        fh.write(two[len(two) // 2 :])
    assert trainer_logs.pending_files(lake_root, [tmp_path / "runs"]) == [log]
    second = trainer_logs.ingest(lake_root, [tmp_path / "runs"])
    with open(log, "a") as fh:
        fh.write(three)
    trainer_logs.ingest(lake_root, [tmp_path / "runs"])
    rows = history(lake_root)
    keys = [(r[0], r[1], r[2]) for r in rows]
    assert len(keys) == len(set(keys)) and sorted({r[1] for r in rows}) == [1, 2, 3]
    assert {r[8] for r in rows if r[1] == 2} == {second.ingest_id} and first.ingest_id < second.ingest_id
    step2 = {r[2]: r for r in rows if r[1] == 2}
    if name == "trl.log":  # the ordinal carries on across ingests; numeric strings became numbers
        assert step2["reward"][3] == 1.2 and step2["loss"][3] == 0.2
    else:
        assert step2["actor/entropy"][3] == 0.25 and step2["critic/score/mean"][3] == 2.25
    assert {r[5] for r in rows} == {None}  # every value was a number
    run = runs(lake_root)[rows[0][0]]
    assert run["last_step"] == 3 and run["history_rows"] == 3
    expected_name = "trl" if name == "trl.log" else "exp1"
    assert run["name"] == expected_name and run["project"] == ("runs" if expected_name == "exp1" else "exp1")


def _age(path: Path) -> None:
    """Make the file look untouched for longer than the rule that says nobody writes it any more."""
    old = path.stat().st_mtime - 2 * files.QUIET_S
    os.utime(path, (old, old))


@pytest.mark.parametrize(
    "name,template", [("metrics.jsonl", JSONL_LINE), ("train.log", VERL_LINE), ("trl.log", TRL_LINE)]
)
def test_a_last_line_without_newline_is_read_once_the_file_is_quiet_and_appends_follow_it(tmp_path, name, template):
    log = tmp_path / "runs" / "exp1" / name
    log.parent.mkdir(parents=True)
    lake_root, roots = tmp_path / "lake", [tmp_path / "runs"]
    one, two, three, four, five = (template.format(n=n) for n in range(1, 6))
    log.write_text(one + two.rstrip("\n"))  # the writer never ended its last line
    trainer_logs.ingest(lake_root, roots)
    if name == "train.log":  # a verl line could still grow by a pair: still being written, as far as anyone can tell
        assert {r[1] for r in history(lake_root)} == {1}
        _age(log)  # the file went quiet after that read, unchanged: its last line is final now
        assert trainer_logs.pending_files(lake_root, roots) == [log]
        trainer_logs.ingest(lake_root, roots)
    # (a JSON object or a printed dict is whole once its closing brace is there: read at once)
    assert {r[1] for r in history(lake_root)} == {1, 2}
    assert not trainer_logs.ingest(lake_root, roots).changed  # read once
    with open(log, "a") as fh:  # a resumed writer appends a whole line right after it, with no newline between
        fh.write(three + four.rstrip("\n"))
    trainer_logs.ingest(lake_root, roots)
    _age(log)
    trainer_logs.ingest(lake_root, roots)
    with open(log, "a") as fh:  # a writer that puts the newline first
        fh.write("\n" + five)
    trainer_logs.ingest(lake_root, roots)
    rows = history(lake_root)
    keys = [(r[1], r[2]) for r in rows]
    assert len(keys) == len(set(keys)) and sorted({r[1] for r in rows}) == [1, 2, 3, 4, 5]  # none twice
    assert sorted({r[9] for r in rows}) == [
        log.read_text().index(line.strip()) for line in (one, two, three, four, five)
    ]
    step2 = {r[2]: r[3] for r in rows if r[1] == 2}
    assert step2 == (
        {"loss": 0.2, "reward": 1.2, "kl": 0.002, "epoch": 0.2}
        if name == "trl.log"
        else {
            "actor/entropy": 0.25,
            "critic/score/mean": 2.25,
            **({"response_length/max": 12.0} if name == "train.log" else {}),
        }
    )
    run = runs(lake_root)[rows[0][0]]
    assert run["last_step"] == 5 and run["history_rows"] == 5


def test_a_last_line_left_waiting_is_read_when_the_unchanged_file_goes_quiet(tmp_path):
    """The usual end of a run: read while live, then nobody writes again. Time passes for real (the file is
    made almost quiet first), the file's size and mtime stay as the cursor saw them, and the line still comes."""
    log = tmp_path / "m.log"
    log.write_bytes(b"step:1 - loss:0.5 - kl:0.1\nstep:2 - loss:0.25 - kl:0.2")  # a verl line can still grow
    almost = time.time() - files.QUIET_S + 6
    os.utime(log, (almost, almost))
    trainer_logs.ingest(tmp_path / "lake", [log])
    assert {r[1] for r in history(tmp_path / "lake")} == {1}
    time.sleep(max(0.0, almost + files.QUIET_S + 0.5 - time.time()))
    assert trainer_logs.pending_files(tmp_path / "lake", [log]) == [log]
    trainer_logs.ingest(tmp_path / "lake", [log])
    assert sorted((r[1], r[2], r[3]) for r in history(tmp_path / "lake")) == [
        (1, "kl", 0.1),
        (1, "loss", 0.5),
        (2, "kl", 0.2),
        (2, "loss", 0.25),
    ]
    assert not trainer_logs.ingest(tmp_path / "lake", [log]).changed


def test_a_bad_last_line_without_newline_in_a_quiet_file_is_reported(tmp_path):
    log = tmp_path / "m.jsonl"
    log.write_bytes(b'{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.')
    _age(log)
    report = trainer_logs.ingest(tmp_path / "lake", [log])
    assert [(i.kind, i.offset) for i in report.issues] == [("bad_line", 25)]
    assert {r[1] for r in history(tmp_path / "lake")} == {1}
    assert not trainer_logs.ingest(tmp_path / "lake", [log]).changed  # reported once


def test_bad_jsonl_lines_are_skipped_and_reported(tmp_path):
    log = tmp_path / "m.jsonl"
    lines = [
        b'{"step": 1, "loss": 0.5}\n',
        b'{"step": 2, "loss": 0.4\n',
        b"\n",
        b"not json at all\n",
        b'{"loss": 0.3}\n',
        b"[1, 2]\n",
        b'{"step": 3, "loss": NaN, "note": "warm", "_timestamp": 1700000000.5}\n',
    ]
    log.write_bytes(b"".join(lines))
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [log])
    offsets = [sum(len(line) for line in lines[:i]) for i in range(len(lines))]
    issues = [(i.kind, i.offset) for i in report.issues]
    assert issues == [
        ("bad_line", offsets[1]),
        ("bad_line", offsets[3]),
        ("no_step", offsets[4]),
        ("bad_line", offsets[5]),
    ]
    stored = duckdb.sql(f"""select kind, "offset", path from
                            read_parquet('{lake_root}/ingest_issues/source=trainer_log/*.parquet')
                            order by "offset" """).fetchall()
    assert stored == [(k, o, str(log)) for k, o in issues]
    rows = {(r[1], r[2]): r for r in history(lake_root)}
    assert sorted(rows) == [(1, "loss"), (3, "_timestamp"), (3, "loss"), (3, "note")]
    assert math.isnan(rows[(3, "loss")][3]) and rows[(3, "note")][5] == "warm"
    assert rows[(3, "loss")][7].timestamp() == 1700000000.5 and rows[(1, "loss")][7] is None
    assert rows[(3, "loss")][9] == offsets[6]  # file_offset is the line's byte offset
    assert not trainer_logs.ingest(lake_root, [log]).changed  # bad lines are not read again


def test_a_jsonl_log_with_no_step_anywhere_says_so_once_naming_its_step_like_keys(tmp_path):
    """A JSONL log in a format the reader does not know (no step field in any record) printed one skipped line per
    record, and the report then said no run was found: one issue now says the file has no step and which of its keys
    look like one, so the user knows what to map. A stray stepless line in a log of steps stays an issue of its own
    (test_bad_jsonl_lines_are_skipped_and_reported)."""
    log = write_jsonl(
        tmp_path / "run" / "metrics.jsonl",
        [{"kind": "rollout", "StepIdx": s, "gradient_accumulation_steps": 64, "reward": s / 4} for s in range(3)],
    )
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [log])
    assert [(i.kind, i.offset, i.bytes_skipped) for i in report.issues] == [("no_step", 0, log.stat().st_size)]
    assert report.issues[0].message == (
        f"none of its 3 records has a step ({trainer_log_lines.NO_STEP_FIELDS}); keys in them that look like one: "
        "StepIdx, gradient_accumulation_steps; nothing taken from them"
    )
    assert history(lake_root) == [] and report.runs_touched == []
    size = log.stat().st_size
    with open(log, "a") as fh:  # more of the same: said once more, for what was appended
        fh.write('{"kind": "eval", "StepIdx": 3, "accuracy": 0.5}\n{"kind": "eval", "StepIdx": 4, "accuracy": 0.6}\n')
    again = trainer_logs.ingest(lake_root, [log])
    assert [(i.kind, i.offset) for i in again.issues] == [("no_step", size)]
    assert again.issues[0].message.startswith(f"none of its 2 records from byte {size} on has a step (")


def _trainer_state(steps: int, max_steps: int, kl_at: dict | None = None) -> str:
    history_ = [
        {"loss": 0.0, "kl": (kl_at or {}).get(s, s / 100), "reward": s / 10, "epoch": s / 10, "step": s}
        for s in range(1, steps + 1)
    ]
    history_.append({"eval_loss": 0.5, "eval_reward": 0.25, "epoch": steps / 10, "step": steps})  # eval, same step
    return json.dumps(
        {
            "global_step": steps,
            "max_steps": max_steps,
            "logging_steps": 1,
            "train_batch_size": 4,
            "best_metric": None,
            "log_history": history_,
        },
        indent=2,
    )


def test_checkpoints_are_snapshots_of_one_run_and_a_rewrite_reloads_only_that_run(tmp_path):
    out_a, out_b = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    for n in (2, 4):
        (out_a / f"checkpoint-{n}").mkdir(parents=True)
        (out_a / f"checkpoint-{n}" / "trainer_state.json").write_text(_trainer_state(n, 6))
    out_b.mkdir(parents=True)
    (out_b / "trainer_state.json").write_text(_trainer_state(3, 3))
    lake_root = tmp_path / "lake"
    first = trainer_logs.ingest(lake_root, [tmp_path / "runs"])
    by_name = {r["name"]: r for r in runs(lake_root).values()}
    assert set(by_name) == {"a", "b"} and len(first.runs_touched) == 2
    assert by_name["a"]["state"] == "running" and by_name["b"]["state"] == "finished"
    assert by_name["a"]["last_step"] == 4 and by_name["a"]["source_files"] == [
        str((out_a / "checkpoint-4" / "trainer_state.json").resolve())
    ]
    a_rows = values_by_step(lake_root, by_name["a"]["run_key"])
    assert sorted(a_rows) == [1, 2, 3, 4] and {"eval_loss", "loss", "kl"} <= set(a_rows[4])  # train + eval kept
    assert a_rows[4]["epoch"][3] == 0.4  # both entries carry the same epoch: one row, not a repeated step

    # the Trainer saves checkpoint-6 and rotates checkpoint-2 away; run b is untouched
    (out_a / "checkpoint-6").mkdir()
    (out_a / "checkpoint-6" / "trainer_state.json").write_text(_trainer_state(6, 6, kl_at={3: 9.5}))
    for p in (out_a / "checkpoint-2").iterdir():
        p.unlink()
    (out_a / "checkpoint-2").rmdir()
    assert trainer_logs.pending_files(lake_root, [tmp_path / "runs"]) == [
        (out_a / "checkpoint-6" / "trainer_state.json").resolve()
    ]
    second = trainer_logs.ingest(lake_root, [tmp_path / "runs"])
    assert second.runs_touched == [by_name["a"]["run_key"]] and second.files_read == 1
    assert {r[0] for r in history(lake_root, f"ingest_id = {second.ingest_id}")} == {by_name["a"]["run_key"]}
    newest = {}
    for row in history(lake_root, f"run_key = '{by_name['a']['run_key']}'"):
        newest[(row[1], row[2])] = row  # ordered by ingest_id: the last one is what staging keeps
    assert newest[(3, "kl")][3] == 9.5 and newest[(6, "reward")][3] == 0.6
    assert runs(lake_root)[by_name["a"]["run_key"]]["state"] == "finished"
    assert runs(lake_root)[by_name["a"]["run_key"]]["last_step"] == 6

    # rewriting run b's file (same size, new mtime) reloads b alone
    state_b = out_b / "trainer_state.json"
    stat = state_b.stat()
    os.utime(state_b, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    third = trainer_logs.ingest(lake_root, [tmp_path / "runs"])
    assert third.runs_touched == [by_name["b"]["run_key"]] and third.files_read == 1
    assert not trainer_logs.ingest(lake_root, [tmp_path / "runs"]).changed


def test_a_trainer_state_caught_mid_write_is_reported_and_retried(tmp_path):
    run_dir = tmp_path / "out"
    run_dir.mkdir()
    state = run_dir / "trainer_state.json"
    full = _trainer_state(5, 10)
    state.write_text(full[: len(full) // 2])
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [run_dir])
    assert [i.kind for i in report.issues] == ["bad_file"] and history(lake_root) == []
    assert not trainer_logs.ingest(lake_root, [run_dir]).changed  # not retried until it changes
    state.write_text(full)
    assert trainer_logs.ingest(lake_root, [run_dir]).values == 5 * 4 + 2


def test_folders_with_the_same_name_do_not_collide(tmp_path):
    for parent in ("x", "y"):
        (tmp_path / parent / "exp" / "checkpoint-1").mkdir(parents=True)
        (tmp_path / parent / "exp" / "checkpoint-1" / "trainer_state.json").write_text(_trainer_state(1, 1))
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [tmp_path])
    found = runs(lake_root)
    assert len(found) == 2 and {r["name"] for r in found.values()} == {"exp"}
    assert {r["project"] for r in found.values()} == {"x", "y"}


# ----------------------------------------------------------------------------------------- console noise


def test_trl_console_noise_is_ignored(tmp_path):
    log = tmp_path / "job" / "grpo_run.log"
    log.parent.mkdir()
    log.write_text(
        "WARNING: something about tokenizers\n"
        "  0%|          | 0/100 [00:00<?, ?it/s]\r  1%|1         | 1/100 [00:02<03:18,  2.0s/it]\r"
        "{'loss': 0.0, 'grad_norm': nan, 'reward': '0.5', 'kl': np.float64(0.001), 'epoch': 0.01}\n"
        "{'model_name': 'Qwen',\n"
        " 'lr': 1e-06,\n"
        " {'nested': 1}}\n"
        " {'loss': 9.9}\n"
        "config: {'loss': 8.8}\n"
        "{'status': 'ok'}\n"
        "{'loss': 0.1, 'reward': '-inf', 'completion_length': 120, 'grad_norm': inf}\n"
        "{'train_runtime': 12.5, 'train_loss': 0.05, 'epoch': 1.0}\n"
    )
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [tmp_path / "job"])
    assert report.issues == []
    run = run_of(lake_root, "grpo_run")
    got = values_by_step(lake_root, run["run_key"])
    assert sorted(got) == [1, 2]  # the end-of-training dict is the run's summary, not a step
    assert math.isnan(got[1]["grad_norm"][3]) and got[1]["reward"][3] == 0.5 and got[1]["kl"][3] == 0.001
    assert got[2]["reward"][3] == -math.inf and got[2]["grad_norm"][3] == math.inf
    assert got[2]["completion_length"][4] == 120
    assert json.loads(run["summary"])["train_runtime"] == 12.5 and run["state"] == "finished"
    # the first dict follows the train bar's `1/100`, the next one no new count: the bar does not count the dicts'
    # steps (a buffered output's burst looks the same), so the file is numbered by its dicts' order
    assert run["project"] == "job" and json.loads(run["config"]) == {"step_source": "ordinal"}


def test_trl_dicts_among_progress_bar_redraws_are_read(tmp_path):
    """A log captured with nohup keeps every tqdm redraw: a dict printed between two of them shares its physical
    line with them (what a terminal would show is the last redraw), and a bar left without its newline can precede
    one. Both are log lines; losing them also shifted every later step of a run numbered by its dicts."""
    log = tmp_path / "job" / "nohup.log"
    log.parent.mkdir()
    bar = "\r {0}%|###       | {0}/100 [01:25<44:18, 85.12s/it]"
    log.write_text(
        "{'loss': 0.1, 'reward': 0.2, 'epoch': 0.01}\n"
        + bar.format(1)
        + "{'loss': 0.2, 'reward': 0.3, 'epoch': 0.02}"
        + bar.format(2)
        + "\r                    \r\n"
        + "Unsloth: Preparing safetensor model files: 0%|          |{'loss': 0.3, 'reward': 0.4, 'epoch': 0.03}\n"
        + "{'loss': 0.4, 'reward': 0.5, 'epoch': 0.04}\n"
    )
    lake_root = tmp_path / "lake"
    assert trainer_logs.ingest(lake_root, [tmp_path / "job"]).issues == []
    got = values_by_step(lake_root, run_of(lake_root, "nohup")["run_key"])
    assert {step: got[step]["reward"][3] for step in got} == {1: 0.2, 2: 0.3, 3: 0.4, 4: 0.5}


def _wrapped(line: str, width: int) -> str:
    """``line`` as a terminal of ``width`` columns shows it, copied from the screen: cut every ``width`` characters."""
    return "".join(line[i : i + width] + "\n" for i in range(0, len(line), width))


def test_dict_lines_a_terminal_wrapped_are_read_whole_and_wait_for_their_last_piece(tmp_path):
    """A terminal capture cuts each long dict mid-word at the terminal's width: the pieces are joined back; a dict
    printed over lines of other widths (a config) stays unread, and a dict whose last piece is not written yet
    waits for it rather than being lost or read twice."""
    dicts = [
        "{" + ", ".join(f"'completions/key_{k:02d}': {0.01 * k + step}" for k in range(12)) + f", 'reward': {step}}}"
        for step in range(1, 4)
    ]
    log = tmp_path / "capture" / "output.log"
    log.parent.mkdir()
    config = "{'model_name': 'Qwen',\n 'lr': 1e-06}\n"
    text = "Singularity> python -m train --steps 3\n" + _wrapped(dicts[0], 90) + config
    second = _wrapped(dicts[1], 90)
    log.write_text(text + second[:200])  # the second dict's first two pieces only
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [log])
    run = run_of(lake_root, "capture")
    assert sorted(values_by_step(lake_root, run["run_key"])) == [1]
    with open(log, "a") as fh:
        fh.write(second[200:] + _wrapped(dicts[2], 90))
    trainer_logs.ingest(lake_root, [log])
    got = values_by_step(lake_root, run["run_key"])
    assert sorted(got) == [1, 2, 3], got.keys()
    assert all(got[s]["reward"][3] == s and got[s]["completions/key_11"][3] == 0.11 + s for s in (1, 2, 3))
    assert len(history(lake_root)) == 3 * 13  # each dict once
    assert json.loads(run["config"]) == {"step_source": "ordinal"}


def test_a_dict_broken_anywhere_is_joined_and_one_that_never_ends_is_an_issue(tmp_path):
    """An Unsloth + TRL log published on GitHub has its last dict broken by a newline in the middle of a key
    (`'completions/max_terminated_length` / `': 578.0, …}`), the second piece longer than the first: no terminal's
    wrap, so the pieces were not joined and the dict was dropped without a word. A dict broken anywhere is joined;
    the start of a metric dict whose rest never comes is an ingest issue (a config printed over lines is not)."""
    last = {
        "loss": 0.0,
        "grad_norm": 0.20969897508621216,
        "learning_rate": 1.1111111111111112e-07,
        "completions/mean_terminated_length": 495.0,
        "completions/max_terminated_length": 578.0,
        "rewards/match_format_exactly/mean": 0.0,
        "rewards/match_format_approximately/mean": -1.875,
        "rewards/match_format_approximately/std": 0.75,
        "rewards/check_answer/mean": -2.0,
        "rewards/check_numbers/mean": -1.0,
        "reward": -4.875,
        "reward_std": 0.75,
        "frac_reward_zero_std": 0.0,
        "kl": 0.0009595842566341162,
        "epoch": 1.52,
    }
    text = repr(last)
    cut = text.index("_length': 578.0") + len("_length")
    lines = [
        "{'loss': 0.0, 'grad_norm': 0.4456276297569275, 'kl': 0.0011, 'epoch': 1.48}",
        text[:cut],
        text[cut:],
        "{'loss': 0.0, 'grad_norm': 0.5, 'learning_rate': 1e-0",  # cut off, its rest never written
        "Traceback (most recent call last):",
        "{'model_name': 'Qwen/Qwen3-4B-Base', 'max_seq_length': 2048,",  # a config printed over two lines
        " 'lora_rank': 64}",
        "{'loss': 0.0, 'grad_norm': 0.4, 'learn",  # the last line, its rest still to come
    ]
    log = tmp_path / "unsloth" / "train_grpo.log"
    log.parent.mkdir()
    log.write_text("\n".join(lines) + "\n")
    assert len(text[cut:]) > len(text[:cut])
    offsets = [sum(len(line) + 1 for line in lines[:n]) for n in range(len(lines))]
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [log])
    assert [(i.kind, i.offset) for i in report.issues] == [("bad_line", offsets[3])]
    assert "does not end" in report.issues[0].message
    got = values_by_step(lake_root, run_of(lake_root, "train_grpo")["run_key"])
    assert sorted(got) == [1, 2] and {k: v[3] for k, v in got[2].items()} == last
    _age(log)  # nobody writes the file any more: its last dict will not end either
    report = trainer_logs.ingest(lake_root, [log])
    assert [(i.kind, i.offset) for i in report.issues] == [("bad_line", offsets[7])]
    assert not trainer_logs.ingest(lake_root, [log]).changed  # said once


def _ppo_step(step: int, value: str) -> str:
    """One step of a hand-written PPO on Apple MPS as its console shows it: a sampled completion (its markdown
    bullets and all), the step's stats as a printed dict of torch tensors (``value`` is the reward's), then its own
    summary line."""
    return (
        "**3. Calculate the total cost of the sweaters:**\n"
        "* Number of sweaters: 4\n"
        "* Dogs: 80\n"
        f"{{'prompt_id_length': 98, 'tokens_shape': (8, 338), 'truncated': [False, True], 'ratio_mean': "
        f"tensor(1.0001, device='mps:0', grad_fn=<DivBackward0>), 'reward_mean': {value}, "
        f"'policy_loss': -0.0014, 'value_loss': 0.0359}}\n"
        f"Step: {step} | Loss: -0.0011 | KL: -0.0002\n"
        "Average Critic Gradient Magnitude: 0.0000571418\n"
    )


def test_a_printed_dict_of_tensors_with_their_grad_fn_is_read(tmp_path):
    """A tensor computed with gradients prints `grad_fn=<DivBackward0>` among its keyword arguments, which no Python
    literal holds: the dict was reported once as one "that does not end", and the file, read for its `Step: N | …`
    lines instead, lost every later dict without a word (reward_mean never reached the lake) and took the bullets
    of the completions printed between the steps (`* Number of sweaters: 4`) as metrics. The wrapper's value is the
    number, and the file's metric lines are its dicts."""
    log = tmp_path / "ppo" / "ppo_20251228_2.log"
    log.parent.mkdir()
    log.write_text(
        "=== Epoch 1/10 ===\n"
        + _ppo_step(1, "tensor(-0.0008, device='mps:0')")
        + _ppo_step(2, "tensor(0.25, device='mps:0', dtype=torch.bfloat16, grad_fn=<MeanBackward0>)")
        + _ppo_step(3, "tensor(0.5, device='mps:0', grad_fn=<DivBackward0>)")
    )
    lake_root = tmp_path / "lake"
    assert trainer_logs.ingest(lake_root, [log]).issues == []
    run = run_of(lake_root, "ppo_20251228_2")
    got = values_by_step(lake_root, run["run_key"])
    assert run["origin"] == "console_trl" and json.loads(run["config"]) == {"step_source": "ordinal"}
    assert {step: (row["reward_mean"][3], row["ratio_mean"][3]) for step, row in got.items()} == {
        1: (-0.0008, 1.0001),
        2: (0.25, 1.0001),
        3: (0.5, 1.0001),
    }
    assert set(got[1]) == {
        "prompt_id_length",
        "tokens_shape",
        "truncated",
        "ratio_mean",
        "reward_mean",
        "policy_loss",
        "value_loss",
    }


def test_a_long_line_with_an_angle_repr_and_quotes_that_never_close_is_read_in_one_pass(tmp_path):
    """The quoted strings around a `grad_fn=<…>` are passed over as they are; a quote that never closes takes the
    rest of the line with it, else each of 40,000 such quotes scanned the rest of the line again (minutes for this
    one line, quadratic in its length), and the ingest of the whole log waited on it."""
    log = tmp_path / "ppo" / "train.log"
    log.parent.mkdir()
    hostile = "{'reward_mean': tensor(0.5, grad_fn=<DivBackward0>), 'loss': 0.1, 'note': " + "'\\" * 40_000 + "}"
    log.write_text(hostile + "\n" + _ppo_step(1, "0.7"))
    started = time.perf_counter()
    report = trainer_logs.ingest(tmp_path / "lake", [log])
    assert time.perf_counter() - started < 10
    assert [(i.kind, i.offset) for i in report.issues] == [("bad_line", 0)]
    got = values_by_step(tmp_path / "lake", run_of(tmp_path / "lake", "ppo")["run_key"])
    assert {step: row["reward_mean"][3] for step, row in got.items()} == {2: 0.7}  # the hostile line took step 1


def test_printed_metric_dicts_no_reader_can_read_are_each_said_and_keep_the_file_theirs(tmp_path):
    """A printed dict that is whole but no Python literal (an object's default repr among its values) is said, each
    one, not only the first: it is one of the file's metric lines, so the `key: value` lines around it (the
    trainer's step summary, the bullets of a printed completion) do not become the file's metrics instead, and the
    readable dicts after it keep their ordinals."""
    sampler = "<torch.utils.data.RandomSampler object at 0x7f3a2c1b9d60>"
    log = tmp_path / "ppo" / "train.log"
    log.parent.mkdir()
    steps = [
        _ppo_step(1, "0.1").replace("'value_loss'", f"'sampler': {sampler}, 'value_loss'"),
        _ppo_step(2, "0.2").replace("'value_loss'", f"'sampler': {sampler}, 'value_loss'"),
        _ppo_step(3, "0.3"),
    ]
    log.write_text("".join(steps))
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [log])
    text = log.read_text()
    starts = [m.start() for m in re.finditer(r"^\{", text, re.MULTILINE)]
    assert [(i.kind, i.offset) for i in report.issues] == [("bad_line", starts[0]), ("bad_line", starts[1])]
    assert all("no Python literal" in i.message for i in report.issues), report.issues
    run = run_of(lake_root, "ppo")
    got = values_by_step(lake_root, run["run_key"])
    assert run["origin"] == "console_trl" and {step: row["reward_mean"][3] for step, row in got.items()} == {3: 0.3}
    assert not {"loss", "kl", "number_of_sweaters", "dogs"} & set(got[3])


def test_trl_dict_lines_with_a_step_use_it(tmp_path):
    log = tmp_path / "train_rank0.log"
    log.write_text("{'loss': 0.5, 'step': 10}\n{'eval_loss': 0.7, 'step': 10}\n{'loss': 0.4, 'step': 20}\n")
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [log])
    run = run_of(lake_root, "train_rank0")
    got = values_by_step(lake_root, run["run_key"])
    assert sorted(got) == [10, 20] and set(got[10]) == {"loss", "eval_loss"} and "step" not in got[20]
    assert json.loads(run["config"]) == {}


def test_a_printed_dict_is_at_the_step_its_progress_bar_counted_on_its_line(tmp_path):
    """TRL's console prints each log dict right after the train bar's redraw, `5/100 [26:14<…]{'loss': …}`, on one
    line of carriage returns. Numbered by their order, the dicts of this run (logging every 5 steps) were steps
    1, 2, 3, 4: every onset, trend per 100 steps and steps-to-target five times off. The same run's
    trainer_state.json says which steps they are, and holds the same values."""
    lake_root = tmp_path / "lake"
    assert trainer_logs.ingest(lake_root, [TRAINER_LOG_FIXTURES]).issues == []
    console = run_of(lake_root, "xling-openrs-console")
    got = values_by_step(lake_root, console["run_key"])
    state = values_by_step(lake_root, run_of(lake_root, "xling-openrs-rs2-42")["run_key"])
    assert sorted(got) == [5, 10, 15, 20]
    for step, row in got.items():  # the console rounds only the epoch
        assert {k: v[3] for k, v in row.items() if k != "epoch"} == {k: state[step][k][3] for k in row if k != "epoch"}
    assert json.loads(console["config"]) == {"step_source": "progress_bar"}


def test_a_bar_that_runs_ahead_of_buffered_dicts_leaves_the_log_numbered_by_its_dicts(tmp_path):
    """Standard output redirected to a file is block-buffered while tqdm writes to the unbuffered standard error:
    the dicts of steps 5 to 30 come out in a burst after the bar counted 40 of 200, the next burst after 70. Those
    counts are not the dicts' steps: the log is numbered by its dicts' order, none of its rows at a count, whether it
    is read in one go or the burst that shows it arrives at a later read (which reads the file again from its start)."""
    bar = "\r {0}%|#| {0}/200 [00:{0:02d}<01:00, 1.50s/it]"
    first = "".join(bar.format(n) for n in range(41)) + "{'loss': 0.1, 'reward': 0.0}\n"
    first += "".join("{'loss': 0.1, 'reward': %s}\n" % (r / 10) for r in range(1, 6))
    second = "".join(bar.format(n) for n in range(41, 71)) + "{'loss': 0.2, 'reward': 0.6}\n"
    second += "".join("{'loss': 0.2, 'reward': %s}\n" % (r / 10) for r in range(7, 12))
    whole = tmp_path / "whole" / "train.log"
    whole.parent.mkdir()
    whole.write_text(first + second)
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [whole])
    run = run_of(lake_root, "whole")
    assert json.loads(run["config"]) == {"step_source": "ordinal"}
    assert sorted(values_by_step(lake_root, run["run_key"])) == list(range(1, 13))

    growing = tmp_path / "growing" / "train.log"  # one dict at the bar's count, then the burst at a later read
    growing.parent.mkdir()
    growing.write_text("".join(bar.format(n) for n in range(6)) + "{'loss': 0.1, 'reward': 0.0}\n")
    trainer_logs.ingest(lake_root, [growing])
    assert sorted(values_by_step(lake_root, run_of(lake_root, "growing")["run_key"])) == [5]
    with growing.open("a") as fh:
        fh.write("{'loss': 0.1, 'reward': 0.1}\n" + second)
    report = trainer_logs.ingest(lake_root, [growing])
    assert any("does not give the steps" in note for note in report.notes), report.notes
    again = run_of(lake_root, "growing")
    assert json.loads(again["config"]) == {"step_source": "ordinal"} and again["history_rows"] == 8
    rows = history(
        lake_root, f"run_key = '{again['run_key']}' and key = 'reward' and ingest_id >= {again['history_from_ingest']}"
    )
    assert [r[1] for r in rows] == list(range(1, 9))  # from this read on: the count-5 row is superseded


def test_a_buffered_log_that_finished_is_numbered_on_the_trainers_logging_grid(tmp_path):
    """`nohup python train.py > train.log`: the dicts come out in bursts after the bar (no count before any of them),
    so they were numbered 1, 2, 3, … although the Trainer logged every 10 steps of 100: a KL blow-up at step 70 read
    "step 7". Once the end-of-training dict is printed, the bar's total over the number of dicts gives the interval,
    which the printed epochs confirm: steps 10 to 100, as the trainer counted them, read in one go or when the end
    arrives at a later read (the file is read again, the ordinal rows superseded). logging_first_step adds step 1.
    Epochs that no grid fits, or a log that has not finished, keep the ordinals."""
    bar = "\r {0}%|#| {0}/100 [00:{0:02d}<01:00, 1.50s/it]"
    loading = "\rLoading checkpoint shards: 100%|#| 2/2 [00:01<00:00, 1.9s/it]\n"

    def dicts(steps, epoch=lambda step: round(step / 100, 2)):
        return "".join(f"{{'loss': 0.1, 'kl': {step / 1000}, 'epoch': {epoch(step)}}}\n" for step in steps)

    first = loading + "".join(bar.format(n) for n in range(61)) + "\n" + dicts(range(10, 60, 10))
    rest = "".join(bar.format(n) for n in range(61, 101)) + "\n" + dicts(range(60, 110, 10))
    end = "{'train_runtime': 150.0, 'train_loss': 0.1, 'epoch': 1.0}\n"
    lake_root = tmp_path / "lake"

    def steps_of(name):
        run = run_of(lake_root, name)
        rows = history(
            lake_root, f"run_key = '{run['run_key']}' and key = 'kl' and ingest_id >= {run['history_from_ingest'] or 0}"
        )
        return json.loads(run["config"]), {r[1]: r[3] for r in rows}

    whole = tmp_path / "whole" / "train.log"
    whole.parent.mkdir()
    whole.write_text(first + rest + end)
    trainer_logs.ingest(lake_root, [whole])
    config, kl = steps_of("whole")
    assert config == {"step_source": "logging_grid", "logging_steps": 10, "max_steps": 100}
    assert kl == {step: step / 1000 for step in range(10, 110, 10)}

    growing = tmp_path / "growing" / "train.log"
    growing.parent.mkdir()
    growing.write_text(first)
    trainer_logs.ingest(lake_root, [growing])
    assert steps_of("growing") == ({"step_source": "ordinal"}, {n: n / 100 for n in range(1, 6)})
    with growing.open("a") as fh:
        fh.write(rest + end)
    report = trainer_logs.ingest(lake_root, [growing])
    assert any("logging interval" in note for note in report.notes), report.notes
    assert steps_of("growing")[1] == {step: step / 1000 for step in range(10, 110, 10)}

    first_step = tmp_path / "first_step" / "train.log"
    first_step.parent.mkdir()
    first_step.write_text(dicts([1]) + first + rest + end)
    trainer_logs.ingest(lake_root, [first_step])
    assert sorted(steps_of("first_step")[1]) == [1, *range(10, 110, 10)]

    irregular = tmp_path / "irregular" / "train.log"  # a dict missing: the epochs no longer fit any grid
    irregular.parent.mkdir()
    irregular.write_text(first + rest.replace("{'loss': 0.1, 'kl': 0.07, 'epoch': 0.7}\n", "", 1) + end)
    trainer_logs.ingest(lake_root, [irregular])
    assert steps_of("irregular") == (
        {"step_source": "ordinal"},
        {n: v for n, v in enumerate([s / 1000 for s in range(10, 110, 10) if s != 70], start=1)},
    )


def test_an_eval_bar_beside_the_train_bar_never_gives_the_step(tmp_path):
    """The Trainer's evaluation draws a bar of its own (`8/8`), on the train bar's line or on a line of its own, before
    it prints the eval dict at the step it evaluated. Only the train bar counts steps: its total (max_steps) is the
    one before the file's first train dict. An eval dict is at the train bar's last count, and does not repeat the
    epoch of the train dict at that step; a dict printed lines after the bar's redraw is at that redraw's count. A
    log whose first dict has no bar count before it keeps numbering its dicts by their order, whatever bars follow."""
    train = "\r {0}%|#| {0}/40 [00:{0:02d}<01:00, 1.50s/it]"
    evaluation = "\r {0}%|#| {0}/8 [00:0{0}<00:01, 4.00it/s]"
    vllm = "\rProcessed prompts: 100%|#| 16/16 [00:03<00:00, 5.1it/s]"
    log = tmp_path / "job" / "train.log"
    log.parent.mkdir()
    log.write_text(
        "".join(train.format(n) for n in range(11))
        + "\r          \r{'loss': 0.5, 'reward': 0.1, 'epoch': 0.25}\n"
        + train.format(10)
        + "".join(evaluation.format(n) for n in range(9))
        + "\r{'eval_loss': 0.7, 'eval_reward': 0.2, 'epoch': 0.25}\n"
        + "".join(train.format(n) + vllm for n in range(11, 21))
        + train.format(20)
        + "{'loss': 0.4, 'reward': 0.3, 'epoch': 0.5}\n"
        + "".join(evaluation.format(n) for n in range(9))
        + "\r{'eval_loss': 0.6, 'eval_reward': 0.4, 'epoch': 0.5}\n"
        + "".join(train.format(n) for n in range(21, 31))
        + "\r{'loss': 0.3, 'reward': 0.5, 'epoch': 0.75}\n"
        + "".join(train.format(n) for n in range(31, 41))
        + "\nreward_fn: 8 completions scored\n"  # a print between the bar's redraw and the dict
        + "{'loss': 0.2, 'reward': 0.6, 'epoch': 1.0}\n"
    )
    lake_root = tmp_path / "lake"
    assert trainer_logs.ingest(lake_root, [log]).issues == []
    run = run_of(lake_root, "job")
    got = values_by_step(lake_root, run["run_key"])
    assert {step: {k: v[3] for k, v in row.items()} for step, row in got.items()} == {
        10: {"loss": 0.5, "reward": 0.1, "epoch": 0.25, "eval_loss": 0.7, "eval_reward": 0.2},
        20: {"loss": 0.4, "reward": 0.3, "epoch": 0.5, "eval_loss": 0.6, "eval_reward": 0.4},
        30: {"loss": 0.3, "reward": 0.5, "epoch": 0.75},
        40: {"loss": 0.2, "reward": 0.6, "epoch": 1.0},
    }
    assert json.loads(run["config"]) == {"step_source": "progress_bar"}

    ordinal = tmp_path / "ordinal" / "train.log"  # the first dict has no count before it
    ordinal.parent.mkdir()
    ordinal.write_text("{'loss': 0.5, 'epoch': 0.25}\n" + train.format(20) + "\r{'loss': 0.4, 'epoch': 0.5}\n")
    trainer_logs.ingest(lake_root, [ordinal])
    again = run_of(lake_root, "ordinal")
    assert sorted(values_by_step(lake_root, again["run_key"])) == [1, 2]
    assert json.loads(again["config"]) == {"step_source": "ordinal"}


def test_a_log_numbered_by_ordinal_before_bars_were_read_keeps_its_numbering(tmp_path):
    """A live console log read by a grpolens that numbered every dict by its order has a cursor that says nothing
    of bars: its next dicts continue that numbering rather than jumping to the bar's count mid-run."""
    bar = "\r {0}%|#| {0}/100 [00:{0:02d}<01:00, 1.50s/it]"
    log = tmp_path / "live" / "train.log"
    log.parent.mkdir()
    log.write_text(bar.format(5) + "\r{'loss': 0.5, 'epoch': nan}\n")  # (a NaN the strict cursor file still holds)
    lake_root = tmp_path / "lake"
    assert trainer_logs.ingest(lake_root, [log]).issues == []
    state = lake.IngestState.load(lake_root, "trainer_log")
    del state.data["files"][str(log)]["bar"]  # as the earlier version left it (its step was the ordinal, 1)
    state.save(state.data["last_ingest_id"])
    with open(log, "a") as fh:
        fh.write(bar.format(10) + "\r{'loss': 0.4, 'epoch': 0.1}\n")
    trainer_logs.ingest(lake_root, [log])
    got = values_by_step(lake_root, run_of(lake_root, "live")["run_key"])
    assert {step: row["loss"][3] for step, row in got.items() if row["loss"][8] > 1} == {2: 0.4}


def _launch(total: int, body: str) -> str:
    """One `python train_grpo.py` as it lands in a console log captured with `tee -a`: the command, Unsloth's
    banner, then what the training printed."""
    return (
        f"CUDA_VISIBLE_DEVICES=2 python train_grpo.py --max-steps {total}\n"
        "==((====))==  Unsloth - 2x faster free finetuning | Num GPUs used = 1\n"
        f"   \\\\   /|    Num examples = 33 | Num Epochs = 1 | Total steps = {total}\n"
        f"  0%|          | 0/{total} [00:00<?, ?it/s]\n" + body
    )


TRL_STEP = "{{'loss': 0.0, 'grad_norm': {g}, 'learning_rate': {lr}, 'num_tokens': {t}.0, 'epoch': {e}}}\n"
TRL_END = "{{'train_runtime': {s}, 'train_samples_per_second': 0.6, 'train_loss': -3.4e-09, 'epoch': {e}}}\n"
# Two trainings appended to one log: the first numbered by its dicts' order, evaluated after its end; the second's
# dicts follow its bar's count, logging every 2 steps; a third that died before its end-of-training dict.
TWO_LAUNCHES = _launch(
    3,
    TRL_STEP.format(g="nan", lr=5e-06, t=28777, e=0.1)
    + "Unsloth: Will smartly offload gradients to save VRAM!\n"
    + TRL_STEP.format(g="nan", lr=2.5e-06, t=58767, e=0.2)
    + TRL_STEP.format(g=0.3, lr=2.8e-07, t=85501, e=0.3)
    + TRL_END.format(s=1021.5975, e=0.3)
    + "100%|##########| 3/3 [17:01<00:00, 51.08s/it]\n"
    + "{'eval_loss': 0.7, 'eval_runtime': 1.5, 'epoch': 0.3}\n"  # trainer.evaluate() after trainer.train()
    + "[INFO] GRPO done; saving LoRA to outputs/grpo_lora\n\n",
) + _launch(
    4,
    " 50%|#####     | 2/4 [00:10<00:10, 5.0s/it]"
    + TRL_STEP.format(g=0.45, lr=0.0, t=1558, e=0.5)
    + "100%|##########| 4/4 [00:20<00:00, 5.0s/it]"
    + TRL_STEP.format(g=0.21, lr=1.1e-07, t=3116, e=1.0)
    + TRL_END.format(s=798.1488, e=1.0),
)
CRASHED_LAUNCH = _launch(
    50, TRL_STEP.format(g=0.5, lr=1e-06, t=900, e=0.02) + "torch.OutOfMemoryError: CUDA out of memory.\n"
)


def test_a_training_appended_after_another_ends_is_a_run_of_its_own(tmp_path):
    """A console log that a second `python train_grpo.py` appended to after the first printed its end-of-training
    dict: read as one run, its steps went 1…20 then 21…47, and every trend, onset and plot mixed two trainings
    (learning rate from 2.8e-07 to 0 and num_tokens from 139436 to 1558 between "steps" 20 and 21). Each launch is
    a run of its own, with its own steps, step source and state; an evaluation printed after the end stays with
    the training it evaluated. A config file beside the log is one launch's at most, which one nobody can tell: as
    beside several runs' logs, it configures none of them."""
    log = tmp_path / "job" / "train_grpo.log"
    log.parent.mkdir()
    log.write_text(TWO_LAUNCHES + CRASHED_LAUNCH)
    (log.parent / "config.json").write_text('{"max_steps": 50, "learning_rate": 5e-06}')
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [log])
    assert report.issues == []
    first, second, third = (run_of(lake_root, name) for name in ("train_grpo", "train_grpo #2", "train_grpo #3"))
    assert len(runs(lake_root)) == 3 and len({first["run_key"], second["run_key"], third["run_key"]}) == 3
    assert {r["project"] for r in (first, second, third)} == {"job"}
    assert [n for n in report.notes if "new training" in n] == [
        f"{log}: a new training begins at byte {log.read_text().index(start)}, after the end-of-training dict of the "
        f"one before: read as run {run['name']!r} ({run['run_key']})"
        for start, run in ((" 50%|", second), ("{'loss': 0.0, 'grad_norm': 0.5", third))
    ]
    assert any(n.startswith(f"{log.parent / 'config.json'} is beside the logs of 3 runs") for n in report.notes)

    def got(run: dict) -> dict:
        return {s: {k: v[3] for k, v in row.items()} for s, row in values_by_step(lake_root, run["run_key"]).items()}

    lr_tokens = {
        run["name"]: {s: (row.get("learning_rate"), row.get("num_tokens")) for s, row in got(run).items()}
        for run in (first, second, third)
    }
    assert lr_tokens == {
        "train_grpo": {1: (5e-06, 28777), 2: (2.5e-06, 58767), 3: (2.8e-07, 85501), 4: (None, None)},
        "train_grpo #2": {2: (0.0, 1558), 4: (1.1e-07, 3116)},
        "train_grpo #3": {1: (1e-06, 900)},
    }
    assert math.isnan(got(first)[1]["grad_norm"]) and got(first)[4] == {
        "eval_loss": 0.7,
        "eval_runtime": 1.5,
        "epoch": 0.3,
    }
    assert [r["state"] for r in (first, second, third)] == ["finished", "finished", "unknown"]
    assert [json.loads(r["summary"]).get("train_runtime") for r in (first, second, third)] == [
        1021.5975,
        798.1488,
        None,
    ]
    assert [json.loads(r["config"]) for r in (first, second, third)] == [
        {"step_source": "ordinal"},
        {"step_source": "progress_bar"},
        {"step_source": "ordinal"},
    ]
    assert [(r["last_step"], r["history_rows"]) for r in (first, second, third)] == [(4, 4), (4, 2), (1, 1)]


def _lake_rows(lake_root: Path) -> tuple[set, dict]:
    """What a reader of the lake sees of trainer logs: each run's newest row (without when it was written), and the
    history rows staging keeps (those from its reload point on), without which ingest wrote them."""
    latest = runs(lake_root)
    kept = {
        (row[0], row[1], row[2], "nan" if same(row[3], math.nan) else row[3], *row[4:7], row[9])  # NaN == NaN here
        for row in history(lake_root)
        if row[8] >= (latest[row[0]]["history_from_ingest"] or 0)
    }
    skip = {"ingest_id", "ingested_at", "heartbeat_at", "history_from_ingest"}
    return kept, {key: {k: v for k, v in run.items() if k not in skip} for key, run in latest.items()}


def test_a_log_read_across_the_start_of_its_next_launch_reads_as_one_whole_read(tmp_path):
    """The cursor remembers which launch the file is in: read in two ingests, cut anywhere (between the first
    training's end and the second's first dict, inside a line), a log gives the runs and rows one read gives; the
    second launch is finished only once its own end-of-training dict came. A file rewritten shorter starts over from
    its first launch, and the launch it no longer holds keeps no rows."""
    text = TWO_LAUNCHES
    whole_lake = tmp_path / "whole"
    log = tmp_path / "job" / "train_grpo.log"
    log.parent.mkdir()
    log.write_text(text)
    trainer_logs.ingest(whole_lake, [log])
    whole = _lake_rows(whole_lake)
    assert len(whole[1]) == 2 and len(whole[0]) == 5 * 5 + 3
    ends = [n + 1 for n, char in enumerate(text) if char == "\n"]
    cuts = sorted({*ends, *(end - 9 for end in ends)} - {len(text)})
    for cut in cuts:
        lake_root = tmp_path / f"cut-{cut}"
        log.write_text(text[:cut])
        trainer_logs.ingest(lake_root, [log])
        with open(log, "a") as fh:
            fh.write(text[cut:])
        assert trainer_logs.ingest(lake_root, [log]).issues == []
        assert _lake_rows(lake_root) == whole, f"cut at byte {cut}: {text[:cut][-60:]!r}"

    boundary = text.index(" 50%|")  # the second launch's first dict, its end-of-training dict not written yet
    lake_root = tmp_path / "live"
    log.write_text(text[: text.index("{'train_runtime': 798")])
    trainer_logs.ingest(lake_root, [log])
    assert run_of(lake_root, "train_grpo")["state"] == "finished"
    assert run_of(lake_root, "train_grpo #2")["state"] == "unknown"
    with open(log, "a") as fh:
        fh.write(text[text.index("{'train_runtime': 798") :])
    trainer_logs.ingest(lake_root, [log])
    assert _lake_rows(lake_root) == whole

    log.write_text(
        text[:boundary].replace("'learning_rate': 5e-06", "'learning_rate': 6e-06")
    )  # rewritten: the first launch alone, one value changed
    report = trainer_logs.ingest(lake_root, [log])
    assert any("reading it again from the start" in note for note in report.notes)
    kept, latest = _lake_rows(lake_root)
    first, second = run_of(lake_root, "train_grpo"), run_of(lake_root, "train_grpo #2")
    assert {row[1:4] for row in kept if row[0] == first["run_key"] and row[2] == "learning_rate"} == {
        (1, "learning_rate", 6e-06),
        (2, "learning_rate", 2.5e-06),
        (3, "learning_rate", 2.8e-07),
    }
    assert first["state"] == "finished" and first["history_rows"] == 4
    assert not [row for row in kept if row[0] == second["run_key"]] and second["history_rows"] == 0
    log.write_text(text)  # and the second launch appended again
    trainer_logs.ingest(lake_root, [log])
    assert _lake_rows(lake_root) == whole


def _ablation_arm(name: str, reward: float, steps: list[int]) -> str:
    """One arm of an ablation driver that runs a hand-written GRPO trainer once per arm, its console tee'd to one
    file: the arm's settings, a step line per step (``steps``, as the trainer counted them), its end."""
    return (
        f"[ablation] Starting '{name}'\n"
        "Config: steps=3, groups=8, G=8, lr=5e-06, eps=0.2, mu=1, max_tokens=1024, temp=1.0\n"
        + "".join(
            f"[Step {s}/3] loss=0.0000 grad=0.16 clip=0.000 | reward={round(reward + s / 100, 2)} (std=0.459) | "
            f"accuracy=0.297 | t_roll=2.9s t_train=5.0s\n"
            for s in steps
        )
        + f"Training complete. Final model saved to: runs/{name}/final_model\n"
        f"Summary: accuracy=0.2281 best=0.3281@step3 reward={reward}\n"
    )


# Three arms in one file; the second resumed from its checkpoint of step 1 after its step 2 (a resume: the same run).
ABLATION = (
    _ablation_arm("lora_rank_8", 0.2, [1, 2, 3])
    + _ablation_arm("lora_rank_64", 0.7, [1, 2, 2, 3])
    + _ablation_arm("lora_rank_128", 0.8, [1, 2, 3])
)


def test_a_step_count_that_starts_over_in_a_console_log_is_a_new_launch(tmp_path):
    """An ablation driver runs its arms one after the other into one console log: each arm's `[Step N/50]` lines
    start over at 1. Read as one run, the arms' values overwrote each other (history versions up to 3, the last arm's
    values kept), duplicate_steps said "probably restarted", and each arm's `Config:` line was a metric row of the
    last step of the arm before. A step count that goes back to where its launch began (0 or 1) is a new launch,
    `<name> #2`, as after a TRL end-of-training dict; one that goes back less far is a resume of the same run. verl's
    `step:N` lines too: a validation at step 0, then steps 1, 2, then a second launch."""
    log = tmp_path / "ablation" / "ablation_study.log"
    log.parent.mkdir()
    log.write_text(ABLATION)
    verl = tmp_path / "verl" / "train.log"
    verl.parent.mkdir()
    verl.write_text(
        "step:0 - val-core/acc:0.1\nstep:1 - actor/kl:0.01\nstep:2 - actor/kl:0.02 - val-core/acc:0.2\n"
        "Traceback (most recent call last):\nstep:1 - actor/kl:0.03\nstep:2 - actor/kl:0.04\n"
    )
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [log, verl])
    assert report.issues == []
    arms = [run_of(lake_root, name) for name in ("ablation_study", "ablation_study #2", "ablation_study #3")]
    assert len({arm["run_key"] for arm in arms}) == 3 and {arm["origin"] for arm in arms} == {"console_kv"}
    assert [n for n in report.notes if "new training" in n and str(log) in n] == [
        f"{log}: a new training begins at byte {start}, where the step count starts over at 1 after the one "
        f"before reached 3: read as run {arm['name']!r} ({arm['run_key']})"
        for start, arm in zip(
            [m.start() for m in re.finditer(r"^\[Step 1/3\]", ABLATION, re.MULTILINE)][1:], arms[1:], strict=True
        )
    ]
    rewards = [
        {r[1]: r[3] for r in history(lake_root, f"run_key = '{arm['run_key']}' and key = 'reward'")} for arm in arms
    ]
    assert rewards == [{1: 0.21, 2: 0.22, 3: 0.23}, {1: 0.71, 2: 0.72, 3: 0.73}, {1: 0.81, 2: 0.82, 3: 0.83}]
    rows = history(lake_root, f"run_key = '{arms[1]['run_key']}' and key = 'reward' and step = 2")
    assert len(rows) == 2  # the resumed arm logged its step 2 twice, in one run
    keys = {r[2] for arm in arms for r in history(lake_root, f"run_key = '{arm['run_key']}'")}
    assert not {"eps", "g", "steps", "lr", "max_tokens", "temp", "groups", "mu"} & keys  # no Config: line is a row
    first, second = run_of(lake_root, "verl"), run_of(lake_root, "verl #2")
    assert {s: set(row) for s, row in values_by_step(lake_root, first["run_key"]).items()} == {
        0: {"val-core/acc"},
        1: {"actor/kl"},
        2: {"actor/kl", "val-core/acc"},
    }
    assert {s: row["actor/kl"][3] for s, row in values_by_step(lake_root, second["run_key"]).items()} == {
        1: 0.03,
        2: 0.04,
    }


def test_a_count_per_epoch_starts_over_only_in_the_first_epoch_and_an_old_cursor_keeps_its_run(tmp_path):
    """DeepSpeed-Chat counts its steps from 0 in every epoch: epoch 1's step 0 carries on the run, epoch 0's step 0
    after it is a new launch. A log read by a grpolens that did not keep where its launch began (its cursor says
    nothing of it) takes only a count back to 0 or 1 as a new launch: a step back to one it read earlier is a resume."""
    line = "epoch: {}|step: {}|ppo_ep: 1|act_loss: {}|cri_loss: 0.1\n"
    log = tmp_path / "step3" / "training.log"
    log.parent.mkdir()
    log.write_text("".join(line.format(e, s, f"0.{e}{s}") for e, s in [(0, 0), (0, 1), (1, 0), (1, 1), (0, 0)]))
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [log])
    first, second = run_of(lake_root, "step3"), run_of(lake_root, "step3 #2")
    assert {s: row["act_loss"][3] for s, row in values_by_step(lake_root, first["run_key"]).items()} == {
        0: 0.0,
        1: 0.01,
        2: 0.1,
        3: 0.11,
    }
    assert {s: row["act_loss"][3] for s, row in values_by_step(lake_root, second["run_key"]).items()} == {0: 0.0}

    old = tmp_path / "resumed" / "train.log"  # a log that began at step 5, read before launches were told apart
    old.parent.mkdir()
    old.write_text("".join(f"[Step {s}] loss={s / 10} | reward=0.{s}\n" for s in (5, 6, 7)))
    trainer_logs.ingest(lake_root, [old])
    state = lake.IngestState.load(lake_root, "trainer_log")
    del state.data["files"][str(old)]["steps"]
    state.save(state.data["last_ingest_id"])
    with open(old, "a") as fh:
        fh.write("".join(f"[Step {s}] loss={s / 10} | reward=0.{s}\n" for s in (8, 9, 8, 1)))
    trainer_logs.ingest(lake_root, [old])
    resumed = history(lake_root, f"run_key = '{run_of(lake_root, 'resumed')['run_key']}' and key = 'reward'")
    assert [r[1] for r in resumed] == [5, 6, 7, 8, 8, 9]
    assert [r[1] for r in history(lake_root, f"run_key = '{run_of(lake_root, 'resumed #2')['run_key']}'")] == [1, 1]


def test_a_console_log_read_across_a_step_count_that_starts_over_reads_as_one_whole_read(tmp_path):
    """The cursor keeps where the current launch began and how far it got: read in two ingests, cut at any line, the
    ablation log gives the runs and rows one read gives, and a file rewritten shorter starts over from its first
    launch."""
    log = tmp_path / "ablation" / "ablation_study.log"
    log.parent.mkdir()
    log.write_text(ABLATION)
    whole_lake = tmp_path / "whole"
    trainer_logs.ingest(whole_lake, [log])
    whole = _lake_rows(whole_lake)
    assert len(whole[1]) == 3
    for cut in [n + 1 for n, char in enumerate(ABLATION) if char == "\n"][:-1]:
        lake_root = tmp_path / f"cut-{cut}"
        log.write_text(ABLATION[:cut])
        trainer_logs.ingest(lake_root, [log])
        with open(log, "a") as fh:
            fh.write(ABLATION[cut:])
        assert trainer_logs.ingest(lake_root, [log]).issues == []
        assert _lake_rows(lake_root) == whole, f"cut at byte {cut}: {ABLATION[:cut][-60:]!r}"
    log.write_text(ABLATION[: ABLATION.index("[ablation] Starting 'lora_rank_64'")])
    report = trainer_logs.ingest(lake_root, [log])
    assert any("reading it again from the start" in note for note in report.notes)
    kept, latest = _lake_rows(lake_root)
    assert {latest[row[0]]["name"] for row in kept} == {"ablation_study"}
    log.write_text(ABLATION)
    trainer_logs.ingest(lake_root, [log])
    assert _lake_rows(lake_root) == whole


def test_verl_console_wrappers_noise_and_a_cut_line(tmp_path):
    head = "step:3 - actor/entropy:np.float64(0.25) - num_turns/max:np.int32(16) - perf/x:np.int64(7)"
    filler = " - " + " - ".join(f"val-aux/k{i}:np.float64(0.{i:04d})" for i in range(200))
    cut = (head + filler)[:4096]
    assert cut.endswith(") - ")  # cut just after a separator: the pair before it is whole
    cut_mid = ("step:5 - " + "a" * 16 + ":1" + filler)[:4096]
    assert cut_mid.endswith("np.float64(0.01")  # cut inside a value, as W&B does
    log = tmp_path / "run" / "output.log"
    log.parent.mkdir()
    log.write_text(
        "Training Progress:   0%|          | 1/100 [00:03<05:00, 3.00s/it]\n"
        "(\"Initial validation metrics: {'val-core/acc': \"\n"
        ' "np.float64(0.1)}")\n'
        "local_global_step_folder: /ckpt/global_step_2\n"
        "step:1 - actor/loss:tensor(0.5, device='cuda:0') - actor/kl:nan - flag:True - note:hello world\n"
        "step:2 - timing_s/step:12.5 - response_length/mean:np.float64(-inf)\n" + cut + "\n"
        "step:4 - short:1.5\n" + cut_mid + "\n"
    )
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [log])
    run = run_of(lake_root, "run")
    got = values_by_step(lake_root, run["run_key"])
    assert sorted(got) == [1, 2, 3, 4, 5] and run["origin"] == "console_verl"
    assert got[1]["actor/loss"][3] == 0.5 and math.isnan(got[1]["actor/kl"][3])
    assert got[1]["flag"][6] == "bool" and got[1]["note"][5] == "hello world"
    assert got[2]["timing_s/step"][3] == 12.5 and got[2]["response_length/mean"][3] == -math.inf
    complete = cut.split(" - ")[1:-1]
    assert len(got[3]) == len(complete) and got[3]["num_turns/max"][4] == 16 and got[3]["perf/x"][4] == 7
    last_whole = complete[-1].split(":", 1)[0]
    assert last_whole in got[3] and cut.split(" - ")[-1].split(":", 1)[0] not in got[3]
    assert got[4]["short"][3] == 1.5
    whole = cut_mid.split(" - ")[1:-1]
    assert len(got[5]) == len(whole) and whole[-1].split(":", 1)[0] in got[5]
    assert cut_mid.split(" - ")[-1].split(":", 1)[0] not in got[5]


def test_jsonl_step_fields_and_verl_file_logger(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "verl.jsonl").write_text('{"step": 1, "data": {"actor/entropy": 0.5, "val-core/acc": 0.1}}\n')
    (folder / "a.jsonl").write_text('{"global_step": 5, "loss": 1.0}\n')
    (folder / "b.jsonl").write_text('{"_step": 7, "loss": 2.0, "nested": {"x": 1}}\n')
    (folder / "c.jsonl").write_text('{"train/global_step": 9.0, "train/loss": 3.0}\n')
    (folder / "roll.jsonl").write_text('{"actor/pg_loss": 0.2, "system/step": 11}\n')  # ROLL's tracker step
    (folder / "loop.jsonl").write_text('{"iteration": 3, "mean_reward": 0.88}\n')  # a custom trainer's outer loop
    # none of those: the first key named like a step counter that holds an integer (the CS336 GRPO trainer's
    # grpo_step before its optimizer_step; a bound such as max_step, or a text, is not the step)
    write_jsonl(
        folder / "grpo.jsonl",
        [
            {"type": "rollout", "grpo_step": 1, "mean_reward": 0.25},
            {"grpo_step": 1, "optimizer_step": 4, "loss": 0.5},
            {"max_step": 40, "rl_step": "2", "train_step": 2, "loss": 0.25},
        ],
    )
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [folder])
    assert report.issues == []
    rows = {
        (run_of(lake_root, name)["name"], r[1], r[2]): r[3] if r[5] is None else r[5]
        for name in ("verl", "a", "b", "c", "roll", "loop", "grpo")
        for r in history(lake_root, f"run_key = '{run_of(lake_root, name)['run_key']}'")
    }
    assert rows == {
        ("verl", 1, "actor/entropy"): 0.5,
        ("verl", 1, "val-core/acc"): 0.1,
        ("a", 5, "loss"): 1.0,
        ("b", 7, "loss"): 2.0,
        ("b", 7, "nested.x"): 1.0,
        ("c", 9, "train/loss"): 3.0,
        ("roll", 11, "actor/pg_loss"): 0.2,
        ("loop", 3, "mean_reward"): 0.88,
        ("grpo", 1, "type"): "rollout",
        ("grpo", 1, "mean_reward"): 0.25,
        ("grpo", 1, "optimizer_step"): 4,
        ("grpo", 1, "loss"): 0.5,
        ("grpo", 2, "max_step"): 40,
        ("grpo", 2, "rl_step"): "2",
        ("grpo", 2, "loss"): 0.25,
    }


def test_a_jsonl_config_record_is_the_runs_config_not_a_skipped_line(tmp_path):
    """A custom trainer writes its arguments as the first record of its metric log, `{"type": "config", "args":
    {...}}`: it was reported as a line without a step and the run had no config, so a sweep of its arms compared
    nothing. A record holding nothing but a mapping of settings (`{"hparams": {...}}`) is one too; it wins over a
    config file beside the log for the keys both give (it is this run's own word). Any other stepless line is
    still a no_step issue."""
    args = {"model": "Qwen/Qwen2.5-0.5B", "steps": 400, "batch_size": 8, "lr": 1e-05, "entropy_beta": 0.01, "seed": 7}
    argv = ["train_verifier_reward.py", "--steps", "400", "--lr", "1e-5", "--entropy-beta", "0.01"]
    logs = tmp_path / "logs"
    write_jsonl(
        logs / "mitigated" / "training_log_mitigated_seed7.jsonl",
        [
            {"type": "config", "argv": argv, "args": args, "device": "cuda"},
            {"step": 0, "mean_reward": None, "accuracy": 0.475},
            {"note": "eval skipped", "accuracy": 0.5},  # stepless, and no config
            {"step": 20, "mean_reward": 0.1, "accuracy": 0.5},
        ],
    )
    write_jsonl(
        logs / "hparams" / "metrics.jsonl", [{"hparams": {"lr": 3e-06, "kl_coef": 0.05}}, {"step": 1, "loss": 1}]
    )
    (logs / "hparams" / "config.json").write_text(json.dumps({"lr": 1e-06, "model": "Qwen3-4B"}))
    write_jsonl(logs / "typed" / "metrics.jsonl", [{"type": "config", "lr": 2e-05}, {"step": 1, "loss": 1}])
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [logs])
    assert [(Path(i.path).name, i.kind) for i in report.issues] == [("training_log_mitigated_seed7.jsonl", "no_step")]
    assert _config_of(lake_root, "training_log_mitigated_seed7") == args
    assert _config_of(lake_root, "hparams") == {"lr": 3e-06, "kl_coef": 0.05, "model": "Qwen3-4B"}
    assert _config_of(lake_root, "typed") == {"lr": 2e-05}
    run = run_of(lake_root, "training_log_mitigated_seed7")
    assert sorted(values_by_step(lake_root, run["run_key"])) == [0, 20] and run["history_rows"] == 2


def test_a_jsonl_log_of_several_launches_is_a_run_per_launch(tmp_path):
    """A custom GRPO loop's training_history.jsonl (jorahn/rookworld-rlvr) holds five runs appended one after the
    other, each from step 1: read as one run, every step kept its newest value, a series stitched from three runs.
    A step count that starts over where its launch began is a new launch, as in a console log; one that counts per
    epoch (the epoch went up as the step went back) and a resume from a checkpoint (back to step 10) stay one run."""
    logs = tmp_path / "logs"
    history = logs / "chess" / "training_history.jsonl"
    write_jsonl(
        history,
        [{"step": s, "loss": 0.1 * s} for s in (1, 2, 3)] + [{"step": s, "loss": 1 + 0.1 * s} for s in range(1, 6)],
    )
    write_jsonl(
        logs / "epochs" / "metrics.jsonl", [{"epoch": e, "step": s, "loss": e + s / 10} for e in (1, 2) for s in (1, 2)]
    )
    write_jsonl(logs / "resumed" / "metrics.jsonl", [{"step": s, "loss": 0.5} for s in [*range(20), *range(10, 25)]])
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [logs])
    launched = [n for n in report.notes if "a new training begins" in n]
    assert len(launched) == 1 and "starts over at 1 after the one before reached 3" in launched[0], report.notes
    first, second = run_of(lake_root, "chess"), run_of(lake_root, "chess #2")
    assert {s: v["loss"][3] for s, v in values_by_step(lake_root, first["run_key"]).items()} == {
        1: 0.1,
        2: 0.2,
        3: pytest.approx(0.3),
    }
    assert {s: v["loss"][3] for s, v in values_by_step(lake_root, second["run_key"]).items()} == {
        s: pytest.approx(1 + 0.1 * s) for s in range(1, 6)
    }
    names = sorted(r["name"] for r in runs(lake_root).values())
    assert names == ["chess", "chess #2", "epochs", "resumed"]
    with open(history, "a") as fh:  # the second launch goes on
        fh.write(json.dumps({"step": 6, "loss": 1.6}) + "\n")
    more = trainer_logs.ingest(lake_root, [logs])
    assert more.runs_touched == [second["run_key"]]


def test_jsonl_records_at_one_step_repeat_no_value_and_evaluations_are_eval_series(tmp_path):
    """Records that share a step. A recommender's trainer writes an eval record beside its train record at a step,
    `{"step": 200, "epoch": 1, "eval": true, "ndcg@10": …}`: both carry the epoch, which counted as a second version
    and duplicate_steps said the run was probably restarted; a value repeated at its step is written once, as a
    trainer_state.json's epoch is (also when the record comes in the next ingest). The CS336 GRPO trainer types its
    records, and its eval record's reward overwrote the rollout's, mixing validation into the training reward: an
    evaluation's record (marked by type, split, phase or mode, or `"eval": true`) has its values under eval/, as the
    warehouse's eval_summary and the eval/ aliases read them; what says where it was taken (epoch, step counters,
    `_` keys, the marker) and a key already named as an evaluation's stay as written. Two train records of one step
    with different values are two versions of them, the last one the step's (as W&B keeps it)."""
    log = write_jsonl(
        tmp_path / "logs" / "recsys" / "grpo_capinf.jsonl",
        [
            {"step": 190, "epoch": 1, "loss": 0.03, "reward_mean": 0.07},
            {"step": 200, "epoch": 1, "loss": -0.02, "reward_mean": 0.06},
            {"step": 200, "epoch": 1, "eval": True, "ndcg@10": 0.022, "recall@10": 0.042},
        ],
    )
    write_jsonl(
        tmp_path / "logs" / "cs336" / "metrics.jsonl",
        [
            {"type": "rollout", "grpo_step": 5, "reward": 0.42, "answer_accuracy": 0.42, "_timestamp": 1.7e9},
            {"type": "train", "grpo_step": 5, "optimizer_step": 19, "loss": -0.0016, "learning_rate": 4e-05},
            {"type": "train", "grpo_step": 5, "optimizer_step": 20, "loss": -0.0073, "learning_rate": 4e-05},
            {
                "type": "eval",
                "grpo_step": 5,
                "optimizer_step": 20,
                "reward": 0.51,
                "answer_accuracy": 0.51,
                "eval_seconds": 44.3,
                "_timestamp": 1.7e9 + 60,
            },
            {"split": "Validation", "grpo_step": 5, "answer_accuracy": 0.49},
            {"type": "grpo_step_summary", "grpo_step": 5, "optimizer_step": 20, "step_seconds": 106.2},
        ],
    )
    # a trainer that logs each step twice, the same values: a second log call, written again for duplicate_steps
    write_jsonl(
        tmp_path / "logs" / "doubled" / "metrics.jsonl",
        [{"step": 1, "epoch": 1, "loss": 0.5}, {"step": 1, "epoch": 1, "loss": 0.5}, {"step": 2, "loss": 0.4}],
    )
    home = tmp_path / "home"
    lake_root = home / "lake"
    assert trainer_logs.ingest(lake_root, [tmp_path / "logs"]).issues == []
    doubled = history(lake_root, f"run_key = '{run_of(lake_root, 'doubled')['run_key']}'")
    assert sorted((r[1], r[2]) for r in doubled) == [(1, "epoch"), (1, "epoch"), (1, "loss"), (1, "loss"), (2, "loss")]
    recsys = values_by_step(lake_root, run_of(lake_root, "grpo_capinf")["run_key"])  # asserts one row per key
    assert {k: v[3] for k, v in recsys[200].items()} == {
        "epoch": 1,
        "loss": -0.02,
        "reward_mean": 0.06,
        "eval": 1,
        "eval/ndcg@10": 0.022,
        "eval/recall@10": 0.042,
    }
    rows = [
        (r[2], r[3] if r[5] is None else r[5])
        for r in history(lake_root, f"run_key = '{run_of(lake_root, 'cs336')['run_key']}'")
    ]
    assert sorted(rows) == sorted(
        [
            ("type", "rollout"),
            ("reward", 0.42),
            ("answer_accuracy", 0.42),
            ("_timestamp", 1.7e9),
            ("type", "train"),
            ("optimizer_step", 19),
            ("loss", -0.0016),
            ("learning_rate", 4e-05),  # written once: the second train record repeats it
            ("optimizer_step", 20),
            ("loss", -0.0073),
            ("type", "eval"),
            ("eval/reward", 0.51),
            ("eval/answer_accuracy", 0.51),
            ("eval_seconds", 44.3),
            ("_timestamp", 1.7e9 + 60),
            ("split", "Validation"),
            ("eval/answer_accuracy", 0.49),
            ("type", "grpo_step_summary"),
            ("step_seconds", 106.2),
        ]
    )

    # the next evaluation's record arrives in the next ingest, after its step's train record: its epoch is not repeated
    with open(log, "a") as fh:
        fh.write(json.dumps({"step": 400, "epoch": 2, "loss": 0.01, "reward_mean": 0.1}) + "\n")
    trainer_logs.ingest(lake_root, [tmp_path / "logs"])
    with open(log, "a") as fh:
        fh.write(json.dumps({"step": 400, "epoch": 2, "eval": True, "ndcg@10": 0.021}) + "\n")
    trainer_logs.ingest(lake_root, [tmp_path / "logs"])
    recsys = values_by_step(lake_root, run_of(lake_root, "grpo_capinf")["run_key"])
    assert recsys[400]["epoch"][3] == 2 and recsys[400]["eval/ndcg@10"][3] == 0.021

    # a log rewritten from its start is read afresh: its first record repeats nothing of the old content's last step
    again = write_jsonl(tmp_path / "again" / "metrics.jsonl", [{"step": 5, "epoch": 1, "loss": 0.5}])
    trainer_logs.ingest(tmp_path / "again-lake", [again])
    write_jsonl(again, [{"step": 5, "epoch": 1, "loss": 0.25, "kl": 0.0}])  # a second training over it, as long
    restarted = trainer_logs.ingest(tmp_path / "again-lake", [again])
    assert {(r[2], r[3]) for r in history(tmp_path / "again-lake", f"ingest_id = {restarted.ingest_id}")} == {
        ("epoch", 1),
        ("loss", 0.25),
        ("kl", 0.0),
    }

    # the warehouse: one version of each recsys value, no restart; the training reward is the rollout's
    grpolens("refresh", env={"GRPOLENS_HOME": str(home), "GRPOLENS_TRAINER_LOGS": str(tmp_path / "logs")}, check=True)
    con = duckdb.connect(str(home / "grpolens.duckdb"), read_only=True)
    try:
        by_run = "join runs using (run_key) where runs.name = ?"
        assert con.execute(f"select max(versions) from history {by_run}", ["grpo_capinf"]).fetchall() == [(1,)]
        flagged = con.execute(
            f"select anomalies.check_name from anomalies {by_run} and check_name = 'duplicate_steps'", ["grpo_capinf"]
        )
        assert flagged.fetchall() == []
        assert con.execute(f"select key from eval_summary {by_run} order by key", ["grpo_capinf"]).fetchall() == [
            ("eval/ndcg@10",),
            ("eval/recall@10",),
        ]
        metrics = con.execute(
            f"select metric, value from metrics {by_run} and metric in ('reward_mean', 'eval_reward')", ["cs336"]
        )
        assert sorted(metrics.fetchall()) == [("eval_reward", 0.51), ("reward_mean", 0.42)]
        loss = con.execute(f"select value, versions from history {by_run} and key = 'loss'", ["cs336"]).fetchall()
        assert loss == [(-0.0073, 2)]  # sub-steps: the last train record's, and two records said it
    finally:
        con.close()


def test_ingest_takes_the_source_lock(tmp_path):
    lake_root = tmp_path / "lake"
    with lake.ingest_lock(lake_root, trainer_logs.SOURCE), pytest.raises(lake.IngestBusy):
        trainer_logs.ingest(lake_root, [SNIPPETS])
    assert trainer_logs.ingest(lake_root, [SNIPPETS]).changed


def test_checkpoint_tokenizer_files_are_not_logs(tmp_path):
    real = tmp_path / "real"
    (real / "checkpoint-1").mkdir(parents=True)
    (real / "checkpoint-1" / "trainer_state.json").write_text(_trainer_state(1, 1))
    (real / "checkpoint-1" / "merges.txt").write_text("{'loss': 1.0}\n")
    (real / "checkpoint-1" / "notes.log").write_text("{'loss': 1.0}\n")
    skipped: list = []
    found = trainer_logs.discover([real], skipped)
    assert found.logs == [] and list(found.snapshots) == [str(real.resolve())] and skipped == []


def test_a_folder_of_symlinks_to_run_folders_is_followed_each_file_read_once(tmp_path):
    """A sweep assembled as a folder of links to its run folders (or to their logs) read as nothing, then `grpolens
    check` gave an all-clear. Links are followed; a file is known by its real path, so one reached through two
    links, or a link beside the folder it points to (W&B's latest-run), is read once; a link back up the tree ends
    there; a link to nothing is said, once."""
    runs_dir = tmp_path / "runs"
    for name in ("lr-1e-6", "lr-3e-6"):
        (runs_dir / name).mkdir(parents=True)
        (runs_dir / name / "metrics.jsonl").write_text(JSONL_LINE.format(n=1) + JSONL_LINE.format(n=2))
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "a").symlink_to(runs_dir / "lr-1e-6", target_is_directory=True)
    (sweep / "b").symlink_to(runs_dir / "lr-3e-6", target_is_directory=True)
    (sweep / "b-again").symlink_to(runs_dir / "lr-3e-6", target_is_directory=True)
    (sweep / "log.jsonl").symlink_to(runs_dir / "lr-1e-6" / "metrics.jsonl")
    (runs_dir / "lr-1e-6" / "up").symlink_to(sweep, target_is_directory=True)  # a loop
    (sweep / "gone").symlink_to(tmp_path / "deleted-run", target_is_directory=True)
    wandb_run = sweep / "wandb" / "run-20250101_000000-abc123"
    (wandb_run / "files").mkdir(parents=True)
    (wandb_run / "files" / "output.log").write_text("step:1 - actor/entropy:0.5 - critic/score/mean:0.25\n")
    (sweep / "wandb" / "latest-run").symlink_to(wandb_run.name, target_is_directory=True)
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [sweep])
    assert report.files_read == 3 and report.records == 5 and report.values == 10
    assert sorted(r["name"] for r in runs(lake_root).values()) == ["lr-1e-6", "lr-3e-6", wandb_run.name]
    assert [(Path(i.path).name, i.kind) for i in report.issues] == [("gone", "broken_link")]
    assert "deleted-run" in report.issues[0].message
    again = trainer_logs.ingest(lake_root, [sweep])
    assert not again.changed and again.issues == [] and again.files_seen == 3


def test_what_a_folder_scan_does_not_read_is_said_once_per_file(tmp_path):
    """A folder whose files were all of formats not read gave "0 files, 0 read" and no word of them. Each file not
    read is said once, with why, the first time an ingest meets it; a model's, code and prose files go unsaid."""
    run, out = tmp_path / "run", tmp_path / "out"
    run.mkdir()
    (run / "metrics.jsonl").write_text(JSONL_LINE.format(n=1))
    (run / "events.out.tfevents.1700000000.gpu1").write_bytes(b"\x18\x00\x00\x00")
    (run / "results.json").write_text('{"accuracy": 0.5}')
    (run / "dataset.csv").write_text("prompt,answer\nsix times seven,42\n")
    for quiet in ("README.md", "adapter_model.safetensors", "train.py", ".env.txt", "vocab.txt"):
        (run / quiet).write_text("x")
    (run / "config.json").write_text('{"learning_rate": 1e-06}')
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-2" / "trainer_state.json").write_text(_trainer_state(2, 2))
    (out / "checkpoint-2" / "optimizer.bin").write_bytes(b"\0")
    (out / "train.log").write_text("{'loss': 0.0, 'kl': 0.01, 'reward': 0.1}\n")
    lake_root = tmp_path / "lake"
    first = trainer_logs.ingest(lake_root, [tmp_path])
    said = sorted((Path(i.path).name, i.kind) for i in first.issues)
    assert said == [
        ("dataset.csv", "not_read"),
        ("events.out.tfevents.1700000000.gpu1", "not_read"),
        ("results.json", "not_read"),
        ("train.log", "not_read"),
    ]
    why = {Path(i.path).name: i.message for i in first.issues}
    assert "no step column" in why["dataset.csv"] and "trainer state (trainer_state.json)" in why["train.log"]
    assert "not a format trainer logs are read from" in why["events.out.tfevents.1700000000.gpu1"]
    assert len(first.runs_touched) == 2
    again = trainer_logs.ingest(lake_root, [tmp_path])
    assert not again.changed and again.issues == [] and again.notes == []
    (run / "reward_curve.png").write_bytes(b"\x89PNG")  # a new one is said, alone
    later = trainer_logs.ingest(lake_root, [tmp_path])
    assert [Path(i.path).name for i in later.issues] == ["reward_curve.png"] and later.values == 0

    plots = tmp_path / "plots"  # nothing to read: said once file by file, then each time in one note
    plots.mkdir()
    for n in range(25):
        (plots / f"step_{n}.png").write_bytes(b"\x89PNG")
    report = trainer_logs.ingest(tmp_path / "lake2", [plots])
    lines = report.lines()
    assert len(report.issues) == 25 and sum("skipped: " in line for line in lines) == 21
    assert lines[-1] == "  skipped: 5 more files not read (`ingest_issues` lists each, and why)"
    quiet = trainer_logs.ingest(tmp_path / "lake2", [plots])
    assert quiet.issues == [] and [n.split(":")[0] for n in quiet.notes] == ["no trainer log found"]
    assert "the 25 files found were skipped" in quiet.notes[0]


def test_a_csv_metric_log_is_read_row_by_row_from_its_step_column(tmp_path):
    """verl's and custom trainers' CSV loggers, and W&B's history or chart export, write a header with a step column
    and a row per step: read as a metric log (numbers as values, an empty cell as no value), growing by its new rows.
    A CSV without a step column (a dataset) was, like these, "0 files"; it is said not to be one."""
    logs = tmp_path / "logs"
    (logs / "verl").mkdir(parents=True)
    (logs / "wandb").mkdir()
    verl = logs / "verl" / "training_metrics_grpo.csv"
    verl.write_bytes("\ufeffstep,actor_entropy,critic_score_mean,phase\n1,0.04,0,warmup\n2,0.05,,\n".encode())
    (logs / "wandb" / "export.csv").write_text('"Step","_timestamp","train/reward"\n10,1700000000.5,0.25\n20,,nan\n')
    (logs / "prompts.csv").write_text("prompt,answer\nsix times seven,42\n")
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [logs])
    assert [(Path(i.path).name, i.kind) for i in report.issues] == [("prompts.csv", "not_read")]
    run = run_of(lake_root, "training_metrics_grpo")
    assert run["origin"] == "csv" and run["last_step"] == 2
    got = values_by_step(lake_root, run["run_key"])
    assert {step: set(row) for step, row in got.items()} == {
        1: {"actor_entropy", "critic_score_mean", "phase"},
        2: {"actor_entropy"},
    }
    assert got[1]["actor_entropy"][3] == 0.04 and got[1]["critic_score_mean"][4] == 0
    assert got[1]["phase"][5] == "warmup" and got[2]["actor_entropy"][3] == 0.05
    exported = values_by_step(lake_root, run_of(lake_root, "export")["run_key"])
    assert sorted(exported) == [10, 20] and exported[10]["train/reward"][3] == 0.25
    assert exported[10]["train/reward"][7] is not None and exported[20]["train/reward"][7] is None  # _timestamp
    assert exported[20]["train/reward"][3] is None or math.isnan(exported[20]["train/reward"][3])

    with verl.open("a") as fh:  # the trainer logs two more steps, one of them cut short
        fh.write("3,0.06,1,\n4,0.07\n")
    grown = trainer_logs.ingest(lake_root, [logs])
    assert grown.records == 2 and grown.values == 2  # the new rows only
    assert [(i.kind, i.offset > 0) for i in grown.issues] == [("bad_line", True)]
    assert "2 fields where the header has 4" in grown.issues[0].message
    assert sorted(values_by_step(lake_root, run["run_key"])) == [1, 2, 3]


def _notebook(*cells: list[dict]) -> str:
    """An nbformat 4 notebook of code cells with these outputs, as Jupyter saves it."""
    return json.dumps(
        {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3"}},
            "cells": [
                {"cell_type": "code", "execution_count": n, "metadata": {}, "source": ["trainer.train()"], "outputs": o}
                for n, o in enumerate(cells, 1)
            ],
        },
        indent=1,
    )


def _stream(text: str, name: str = "stdout") -> dict:
    return {"output_type": "stream", "name": name, "text": text.splitlines(keepends=True)}


def _progress_table(header: list[str], rows: list[list], value: int, total: int) -> dict:
    """What transformers' NotebookProgressCallback leaves in a saved notebook: its bar, then its table."""
    page = f"<div><progress value='{value}' max='{total}'></progress> [{value}/{total} 01:10, Epoch 1/1]</div>\n"
    page += '<table border="1" class="dataframe">\n  <thead>\n <tr style="text-align: left;">\n'
    page += "".join(f"      <th>{name}</th>\n" for name in header) + "    </tr>\n  </thead>\n  <tbody>\n"
    for row in rows:
        page += "    <tr>\n" + "".join(f"      <td>{cell}</td>\n" for cell in row) + "    </tr>\n"
    page += "  </tbody>\n</table><p>"
    data = {"text/html": page.splitlines(keepends=True), "text/plain": ["<IPython.core.display.HTML object>"]}
    return {"output_type": "display_data", "metadata": {}, "data": data}


def test_a_csv_of_several_arms_is_a_run_per_arm(tmp_path):
    """A public GRPO ablation's curves (memoryoffish/nlp_grpo, grpo_curves.csv): an `arm` column, then each arm's steps
    from 0. Read as one run, the second arm overwrote the first's values at every step and duplicate_steps called it
    a restart. A step that starts over on a row whose labels changed begins a run of its own, as a second launch in
    a console log does, and the rows appended later go on in it; a restart under the same labels stays in its run."""
    logs = tmp_path / "logs"
    logs.mkdir()
    table = logs / "grpo_curves.csv"
    rows = [
        f"{arm},{step},{reward}\n"
        for arm, base in (("pure-GRPO", 0.1), ("SFT-GRPO", 0.5))
        for step, reward in ((0, base), (1, round(base + 0.01, 2)), (2, round(base + 0.02, 2)))
    ]
    table.write_text("arm,step,critic/score/mean\n" + "".join(rows))
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [logs])
    assert [n for n in report.notes if "a new training begins" in n] == [
        f"{table}: a new training begins at byte {len('arm,step,critic/score/mean') + 1 + len(''.join(rows[:3]))}, "
        "where the step count starts over at 0 after the one before reached 2 and arm changed: read as run "
        f"'grpo_curves #2' ({run_of(lake_root, 'grpo_curves #2')['run_key']})"
    ]
    pure = values_by_step(lake_root, run_of(lake_root, "grpo_curves")["run_key"])
    sft = values_by_step(lake_root, run_of(lake_root, "grpo_curves #2")["run_key"])
    assert {s: v["critic/score/mean"][3] for s, v in pure.items()} == {0: 0.1, 1: 0.11, 2: 0.12}
    assert {s: (v["arm"][5], v["critic/score/mean"][3]) for s, v in sft.items()} == {
        0: ("SFT-GRPO", 0.5),
        1: ("SFT-GRPO", 0.51),
        2: ("SFT-GRPO", 0.52),
    }
    with open(table, "a") as fh:
        fh.write("SFT-GRPO,3,0.53\n")
    more = trainer_logs.ingest(lake_root, [logs])
    assert more.runs_touched == [run_of(lake_root, "grpo_curves #2")["run_key"]]
    assert values_by_step(lake_root, run_of(lake_root, "grpo_curves #2")["run_key"])[3]["critic/score/mean"][3] == 0.53

    restarted = logs / "restarted.csv"
    restarted.write_text("phase,step,loss\ntrain,0,0.5\ntrain,1,0.4\ntrain,0,0.45\ntrain,1,0.35\n")
    trainer_logs.ingest(lake_root, [logs])
    assert [r["name"] for r in runs(lake_root).values() if r["name"].startswith("restarted")] == ["restarted"]


def test_a_notebook_is_read_as_its_console_and_its_progress_tables(tmp_path):
    """GRPO runs are often published as the notebook that ran them; one was read as nothing, and named on its own as
    a console log without a metric line. Its cells' printed output is read as the console it was (a dict split over
    two stream outputs joined), and each training-progress table transformers drew (here Unsloth's SFT, then its
    GRPO with every TRL metric) is a training of its own; a DataFrame's table is none."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    dicts = _stream("Loading model...\n{'loss': '0.5', 'reward': '0.1', 'kl': '0.0'")
    rest = _stream(
        ", 'epoch': '0.1'}\n{'loss': '0.4', 'reward': '0.3', 'kl': '0.01', 'epoch': '0.2'}\n"
        "{'train_runtime': '10.0', 'train_loss': '0.45', 'epoch': '0.2'}\n"
    )
    result = {"output_type": "execute_result", "execution_count": 1, "metadata": {}, "data": {"text/plain": ["done"]}}
    sft = _progress_table(["Step", "Training Loss"], [[5, 1.2], [10, 0.9]], 10, 10)
    frame = _progress_table(["", "step", "reward"], [[0, 1, 0.5]], 1, 1)  # a DataFrame shown: no progress table
    header = ["Step", "Training Loss", "reward", "completions / mean_length", "kl"]
    grpo = [[1, "0.001566", "-0.422000", "5.000000", "1.565526"], [2, "No Log", "0.083500", "4.750000", "3.132593"]]
    notebook = folder / "grpo_colab.ipynb"
    notebook.write_text(_notebook([dicts, rest, result], [sft], [frame], [_stream("GRPO\n", "stderr")]))
    with notebook.open("r+") as fh:  # the GRPO cell as it stood when saved mid-training
        doc = json.load(fh)
        doc["cells"][3]["outputs"].append(_progress_table(header, grpo, 2, 300))
        fh.seek(0)
        fh.write(json.dumps(doc))
    assert trainer_logs.discover([notebook]).logs == [(notebook.resolve(), "notebook")]  # named on its own too
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [folder])
    assert report.issues == [] and report.notes == []
    console, first, second = (run_of(lake_root, n) for n in ("grpo_colab", "grpo_colab #2", "grpo_colab #3"))
    assert (console["origin"], console["state"], json.loads(console["config"])) == (
        "console_trl",
        "finished",
        {"step_source": "ordinal"},
    )
    printed = values_by_step(lake_root, console["run_key"])
    assert sorted(printed) == [1, 2] and printed[1]["loss"][3] == 0.5 and printed[2]["kl"][3] == 0.01
    assert (first["origin"], first["state"]) == ("notebook_table", "finished")
    assert {s: {k: v[3] for k, v in row.items()} for s, row in values_by_step(lake_root, first["run_key"]).items()} == {
        5: {"loss": 1.2},
        10: {"loss": 0.9},
    }
    assert second["state"] == "unknown"  # its bar stood at 2 of 300
    table = values_by_step(lake_root, second["run_key"])
    assert {s: sorted(row) for s, row in table.items()} == {
        1: ["completions/mean_length", "kl", "loss", "reward"],
        2: ["completions/mean_length", "kl", "reward"],  # "No Log": no value
    }
    assert table[1]["reward"][3] == -0.422 and table[2]["kl"][3] == 3.132593

    doc["cells"][3]["outputs"][-1] = _progress_table(header, [*grpo, [3, "0.04", "0.5", "4.5", "1.4"]], 3, 300)
    notebook.write_text(json.dumps(doc))  # saved again: read again whole, the earlier read's values give way
    again = trainer_logs.ingest(lake_root, [folder])
    assert again.issues == [] and len(again.runs_touched) == 3
    assert run_of(lake_root, "grpo_colab #3")["history_from_ingest"] == again.ingest_id
    latest = history(lake_root, f"run_key = '{second['run_key']}' and ingest_id = {again.ingest_id}")
    assert sorted({row[1] for row in latest}) == [1, 2, 3] and len(latest) == 11
    assert not trainer_logs.ingest(lake_root, [folder]).changed  # unchanged: one stat, nothing read


def test_a_notebook_with_nothing_to_read_or_none_at_all_is_said(tmp_path):
    folder = tmp_path / "nb"
    folder.mkdir()
    (folder / "eda.ipynb").write_text(_notebook([_stream("rows: 1000\n")]))
    (folder / "broken.ipynb").write_text(_notebook([_stream("x\n")])[:50])  # cut off mid-save
    by_epoch = _progress_table(["Epoch", "Training Loss", "Validation Loss"], [[1, 0.5, 0.6]], 1, 1)
    (folder / "epochs.ipynb").write_text(_notebook([by_epoch]))
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [folder])
    assert sorted((Path(i.path).name, i.kind) for i in report.issues) == [
        ("broken.ipynb", "bad_file"),
        ("epochs.ipynb", "bad_line"),
    ]
    assert sorted(Path(n.split(":")[0]).name for n in report.notes) == ["eda.ipynb", "epochs.ipynb"]
    assert all("no training-progress table" in n for n in report.notes)
    assert not trainer_logs.ingest(lake_root, [folder]).changed  # said once: read again only once saved again


def test_a_log_that_shrank_is_read_again_from_the_start(tmp_path):
    log = tmp_path / "exp" / "metrics.jsonl"
    log.parent.mkdir()
    log.write_text("".join(JSONL_LINE.format(n=n) for n in (1, 2, 3)))
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [log])
    log.write_text(JSONL_LINE.format(n=1))  # restarted, same file
    report = trainer_logs.ingest(lake_root, [log])
    assert any("shrank" in note for note in report.notes)
    run = run_of(lake_root, "exp")
    assert run["history_rows"] == 1 and run["last_step"] == 1
    assert {r[1] for r in history(lake_root, f"ingest_id = {report.ingest_id}")} == {1}


def test_a_console_log_next_to_trainer_state_is_left_to_the_state_file(tmp_path):
    out = tmp_path / "out"
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-2" / "trainer_state.json").write_text(_trainer_state(2, 2))
    (out / "train.log").write_text("{'loss': 0.0, 'kl': 0.01, 'reward': 0.1, 'epoch': 0.1}\n")
    (tmp_path / "other.log").write_text("{'loss': 0.0, 'kl': 0.01}\n")
    found = trainer_logs.discover([tmp_path])
    assert [p.name for p, _kind in found.logs] == ["other.log"] and list(found.snapshots) == [str(out.resolve())]


def test_prose_beside_a_run_is_no_log_in_a_folder_scan(tmp_path):
    """A note of where a log came from ("two lr=1e-4 restarts, then lr=1e-5") became a second run beside it, and
    `grpolens report FOLDER` then asked which of the two was meant. Named on its own, such a file is still read."""
    folder = tmp_path / "custom-run"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text('{"step": 0, "loss": 1.0, "lr": 0.0001}\n')
    note = "four lines with step 0 (two lr=1e-4 restarts, then lr=1e-5), step 1 loss=0.5 kl=0.1\n"
    for name in ("SOURCE.txt", "README.txt", "notes.log", "LICENSE.txt", "CHANGELOG.txt"):
        (folder / name).write_text(note)
    assert [p.name for p, _kind in trainer_logs.discover([tmp_path]).logs] == ["metrics.jsonl"]
    assert [p.name for p, _kind in trainer_logs.discover([folder / "SOURCE.txt"]).logs] == ["SOURCE.txt"]


def test_a_log_named_on_its_own_is_read_whatever_its_suffix(tmp_path):
    """A terminal capture saved as Markdown (a public TRL fork saves run_terminal.md) and a log without a suffix are
    console logs when named as files; a folder scan keeps to the log suffixes (folders hold READMEs), and a binary
    file named on its own is not read but reported."""
    runs = tmp_path / "runs"
    runs.mkdir()
    capture = runs / "run_terminal.md"
    capture.write_text(
        "# Terminal output\n\n```text\n{'loss': 0.1, 'reward': 0.25, 'epoch': 0.1}\n"
        "{'loss': 0.2, 'reward': 0.5, 'epoch': 0.2}\n```\n"
    )
    bare = runs / "train_log"
    bare.write_text("step:1 - critic/score/mean:0.75\n")
    blob = runs / "weights.bin"
    blob.write_bytes(b"\0\1{'loss': 1.0}\n")
    assert trainer_logs.discover([runs]).logs == []
    found = trainer_logs.discover([capture, bare, blob])
    assert sorted((p.name, kind) for p, kind in found.logs) == [
        ("run_terminal.md", "console"),
        ("train_log", "console"),
    ]
    report = trainer_logs.ingest(tmp_path / "lake", [capture, bare, blob])
    assert report.files_read == 2 and [(i.path, i.kind) for i in report.issues] == [(str(blob), "not_a_log")]
    rows = {(r[1], r[2]): r[3] for r in history(tmp_path / "lake")}
    assert rows[(1, "reward")] == 0.25 and rows[(2, "reward")] == 0.5 and rows[(1, "critic/score/mean")] == 0.75


def test_a_trainer_state_under_another_name_or_its_bare_log_history_is_read(tmp_path):
    """Public TRL projects publish the Trainer's state as training_logs.json, or its log_history list on its own
    (a BOM and NaN included): a JSON file is a trainer state by its first bytes, whatever its name, in a folder scan
    or named on its own. Other JSON (a model config, results) is not read, results said to be; the tokenizer's is not
    even opened."""
    renamed, bare, other = tmp_path / "renamed", tmp_path / "bare", tmp_path / "other"
    for folder in (renamed, bare, other):
        folder.mkdir()
    (renamed / "training_logs.json").write_text(_trainer_state(3, 3))
    entries = [{"loss": 0.1, "grad_norm": float("nan") if s == 2 else 0.5, "reward": s / 4, "step": s} for s in (1, 2)]
    (bare / "training_log.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(entries, indent=2).encode())
    (other / "config.json").write_text(json.dumps({"log_history": [], "hidden_size": 64}))
    (other / "all_results.json").write_text(json.dumps({"train_loss": 0.1, "step": 3}))
    (other / "rows.json").write_text(json.dumps([{"text": "a prompt"}]))
    found = trainer_logs.discover([tmp_path])
    assert found.logs == [] and sorted(found.snapshots) == [str(bare.resolve()), str(renamed.resolve())]
    assert trainer_logs.discover([bare / "training_log.json"]).snapshots == {
        str(bare.resolve()): [(bare / "training_log.json").resolve()]
    }
    report = trainer_logs.ingest(tmp_path / "lake", [tmp_path])
    assert sorted(r["name"] for r in runs(tmp_path / "lake").values()) == ["bare", "renamed"]
    said = [(Path(i.path).name, i.kind, i.message) for i in report.issues]  # the results and the rows, not the config
    assert [(n, k) for n, k, _m in said] == [("all_results.json", "not_read"), ("rows.json", "not_read")]
    assert all("without a log_history" in m for _n, _k, m in said)
    values = values_by_step(tmp_path / "lake", run_of(tmp_path / "lake", "bare")["run_key"])
    assert values[2]["reward"][3] == 0.5 and math.isnan(values[2]["grad_norm"][3])
    assert (
        run_of(tmp_path / "lake", "renamed")["state"] == "finished"
        and run_of(tmp_path / "lake", "renamed")["last_step"] == 3
    )
    # no max_steps, no end entry: a bare log_history cannot tell a run still going from one that crashed, as a JSONL
    # log cannot (not "running", which said the run was still being written and then that it had crashed)
    assert run_of(tmp_path / "lake", "bare")["state"] == "unknown"
    # the Trainer's end-of-training entry closes a bare log_history: the training finished
    entries.append({"train_runtime": 671.3, "train_loss": 0.1, "epoch": 1.0, "step": 2})
    (bare / "training_log.json").write_text(json.dumps(entries))
    trainer_logs.ingest(tmp_path / "lake", [tmp_path])
    assert run_of(tmp_path / "lake", "bare")["state"] == "finished"


def test_metrics_saved_as_one_list_per_metric_are_a_run_at_the_lists_positions(tmp_path):
    """A custom GRPO loop saves its curves as `json.dump({"rewards_avg": [...], "kl_avg": [...]})`: a JSON file
    without a log_history, which was "not read" and the run never existed. Entry i of each list of the longest length
    is step i + 1 (the config says step_source ordinal), or the step a step column gives; a null is no value; a list
    of another length (a validation every 5 steps) is at no known step and is said, not read; a value that is no
    list is a setting. A config whose lists are no metric curves (`betas`) is still not read."""
    loop, stepped, other = tmp_path / "arith_grpo", tmp_path / "stepped", tmp_path / "other"
    for folder in (loop, stepped, other):
        folder.mkdir()
    (loop / "grpo_metrics.json").write_text(
        json.dumps(
            {
                "rewards_avg": [0.2, 0.4, None, 0.7],
                "kl_avg": [0.0, 0.01, 0.02, float("nan")],
                "val_acc": [0.3, 0.5],
                "lr": 2e-6,
            },
            indent=2,
        )
    )
    (stepped / "metrics.json").write_text(json.dumps({"loss": [0.9, 0.5, 0.4], "step": [10, 20, 30]}))
    (other / "optimizer.json").write_text(json.dumps({"betas": [0.9, 0.999], "eps": 1e-8}))
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [tmp_path])
    run = run_of(lake_root, "arith_grpo")
    assert json.loads(run["config"]) == {"lr": 2e-6, "step_source": "ordinal"} and run["last_step"] == 4
    got = values_by_step(lake_root, run["run_key"])
    assert {step: {k: v[3] for k, v in row.items() if k != "kl_avg"} for step, row in got.items()} == {
        1: {"rewards_avg": 0.2},
        2: {"rewards_avg": 0.4},
        3: {},
        4: {"rewards_avg": 0.7},
    }
    assert sorted(got[3]) == ["kl_avg"] and math.isnan(got[4]["kl_avg"][3]) and "val_acc" not in got[1]
    assert any("val_acc: lists of another length than its 4 steps" in note for note in report.notes), report.notes
    assert sorted(values_by_step(lake_root, run_of(lake_root, "stepped")["run_key"])) == [10, 20, 30]
    assert json.loads(run_of(lake_root, "stepped")["config"]) == {}
    assert [(Path(i.path).name, i.kind) for i in report.issues] == [("optimizer.json", "not_read")]


def test_state_files_of_different_names_in_one_folder_are_all_read_as_series_of_the_run(tmp_path):
    """A custom trainer saves its training steps and its evaluations as two bare log_history lists in one folder
    (step_stat_history.json, eval_history.json). They were taken for two snapshots of one file and only the newer was
    read: with the evaluations newer, every training step vanished and the run was HEALTHY with nothing logged.
    Snapshots are copies of one file (checkpoint-N/trainer_state.json); files of different names are different series
    of the run: all read, merged by step. The one named as an evaluation's has its keys under eval/, so its accuracy
    is not taken for the training's at that step."""
    run = tmp_path / "gsm8k-baseline"
    run.mkdir()
    train = [{"step": s, "loss": 0.0, "reward_mean": s / 8, "accuracy": s / 10} for s in range(1, 5)]
    evals = [{"accuracy": 0.5 + s / 10, "n_problems": 100, "step": s} for s in (2, 4)]
    (run / "step_stat_history.json").write_text(json.dumps(train, indent=2))
    (run / "eval_history.json").write_text(json.dumps(evals, indent=2))
    stat = (run / "step_stat_history.json").stat()
    os.utime(run / "eval_history.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the evaluations are newer
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [run])
    assert report.issues == [] and report.files_read == 2
    info = run_of(lake_root, "gsm8k-baseline")
    values = values_by_step(lake_root, info["run_key"])
    assert {s: v["reward_mean"][3] for s, v in values.items()} == {e["step"]: e["reward_mean"] for e in train}
    assert {s: v["accuracy"][3] for s, v in values.items()} == {e["step"]: e["accuracy"] for e in train}
    assert {s: v["eval/accuracy"][3] for s, v in values.items() if "eval/accuracy" in v} == {2: 0.7, 4: 0.9}
    assert {s: v["eval/n_problems"][3] for s, v in values.items() if "eval/n_problems" in v} == {2: 100, 4: 100}
    assert sorted(info["source_files"]) == sorted(str(p.resolve()) for p in run.glob("*.json"))
    assert info["state"] == "unknown" and info["last_step"] == 4  # bare lists: no max_steps, no end entry

    # one series grows: the run is reloaded with both, and the other's entries keep their file_offsets (moved, each
    # would count as a second version of its values: a repeated step)
    offsets = {(r[1], r[2]): r[9] for r in history(lake_root)}
    evals.append({"accuracy": 0.95, "n_problems": 100, "step": 6})
    (run / "eval_history.json").write_text(json.dumps(evals))
    again = trainer_logs.ingest(lake_root, [run])
    assert again.runs_touched == [info["run_key"]]
    newest = {(r[1], r[2]): r[3] for r in history(lake_root, f"ingest_id = {again.ingest_id}")}
    assert newest[(6, "eval/accuracy")] == 0.95 and newest[(4, "reward_mean")] == 0.5
    moved = {(r[1], r[2]): r[9] for r in history(lake_root, f"ingest_id = {again.ingest_id}")}
    assert {k: moved[k] for k in offsets} == offsets
    assert not trainer_logs.ingest(lake_root, [run]).changed

    # a lake whose cursor still names the one file read before this fix: the series it left out is read
    state = lake.IngestState.load(lake_root, "trainer_log")
    [cursor] = state.data["snapshots"].values()
    cursor["chosen"] = str((run / "eval_history.json").resolve())
    state.save(state.data["last_ingest_id"])
    assert trainer_logs.pending_files(lake_root, [run]) != []
    upgraded = trainer_logs.ingest(lake_root, [run])
    assert upgraded.runs_touched == [info["run_key"]]
    newest = {(r[1], r[2]): r[3] for r in history(lake_root, f"ingest_id = {upgraded.ingest_id}")}
    assert newest[(1, "reward_mean")] == 0.125 and newest[(6, "eval/accuracy")] == 0.95
    assert not trainer_logs.ingest(lake_root, [run]).changed

    # one series caught mid-rewrite: reported, the run's values stand, and it is read once it is whole
    whole = json.dumps([*evals, {"accuracy": 0.97, "n_problems": 100, "step": 8}])
    (run / "eval_history.json").write_text(whole[: len(whole) // 2])
    caught = trainer_logs.ingest(lake_root, [run])
    assert [i.kind for i in caught.issues] == ["bad_file"] and caught.runs_touched == []
    assert not trainer_logs.ingest(lake_root, [run]).changed  # waits for the file to change, does not fall back
    (run / "eval_history.json").write_text(whole)
    done = trainer_logs.ingest(lake_root, [run])
    newest = {(r[1], r[2]): r[3] for r in history(lake_root, f"ingest_id = {done.ingest_id}")}
    assert newest[(8, "eval/accuracy")] == 0.97 and newest[(4, "reward_mean")] == 0.5


def test_a_log_history_that_holds_steps_twice_keeps_both_records(tmp_path):
    """Entries appended twice, whole (a trainer that logged steps 3-4 again after a restart), are two records of those
    values at distinct file_offsets, which history.versions counts; the `epoch` a train and an eval entry of one step
    share, or an entry the file's earlier snapshot also held, is one."""
    run = tmp_path / "out"
    run.mkdir()
    train = [{"loss": 0.5 - s / 10, "epoch": s / 5, "step": s} for s in range(1, 6)]
    log = [*train[:4], *train[2:4], train[4], {"eval_loss": 0.2, "epoch": 1.0, "step": 5}]
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 5, "max_steps": 5, "log_history": log}))
    lake_root = tmp_path / "lake"
    first = trainer_logs.ingest(lake_root, [run])
    records = {}
    for row in history(lake_root):
        records.setdefault((row[1], row[2]), []).append(row[9])
    assert {k: len(v) for k, v in records.items() if len(v) > 1} == {
        (3, "loss"): 2,
        (3, "epoch"): 2,
        (4, "loss"): 2,
        (4, "epoch"): 2,
    }
    assert records[(3, "loss")] == [2, 4] and records[(5, "eval_loss")] == [7]
    # rewritten at the next checkpoint with one more step: the same entries at the same offsets
    (run / "trainer_state.json").write_text(
        json.dumps({"global_step": 6, "max_steps": 6, "log_history": [*log, {"loss": 0.0, "epoch": 1.2, "step": 6}]})
    )
    again = trainer_logs.ingest(lake_root, [run])
    reread = [r for r in history(lake_root, f"ingest_id = {again.ingest_id}") if (r[1], r[2]) in records]
    assert {(r[1], r[2], r[9]) for r in reread} == {(k[0], k[1], o) for k, v in records.items() for o in v}
    assert first.ingest_id < again.ingest_id


def test_a_console_log_with_no_metric_line_says_so_once(tmp_path):
    """A trainer's own print format with no step on its metric lines is not one the reader knows: the ingest says the
    file gave nothing, on its first read only (a log that grows is read from its cursor on), and still reads the
    logs it knows."""
    custom = tmp_path / "rl_grpo.log"
    custom.write_text("2025-09-23 09:01:00,984 - train - INFO - rl_loss: -0.0027, time: 109.1, l2_norm: 0.14\n")
    known = tmp_path / "train.log"
    known.write_text("{'loss': 0.1, 'reward': 0.25, 'epoch': 0.1}\n")
    report = trainer_logs.ingest(tmp_path / "lake", [tmp_path])
    assert report.files_read == 2 and len(runs(tmp_path / "lake")) == 1
    assert [n for n in report.notes if "no metric line found" in n] == [
        f"{custom}: no metric line found (read as a console log: a TRL/HF dict per line, verl's "
        "`step:N - key:value - …`, or `key: value` pairs with a step); nothing taken from it"
    ]
    with open(custom, "a") as fh:
        fh.write("2025-09-23 09:05:16,843 - train - INFO - rl_loss: 0.0, time: 115.3, l2_norm: 0.17\n")
    again = trainer_logs.ingest(tmp_path / "lake", [tmp_path])
    assert again.files_read == 1 and not any("no metric line" in n for n in again.notes)


def test_hand_written_key_value_lines_with_a_step(tmp_path):
    """Custom trainers print `key: value` pairs with a step of their own: MiniMind's per-epoch `(i/N)`, a
    `[Step N]` prefix after a timestamp. Keys are kept lower case with `_` for spaces; progress and housekeeping
    lines around them (a step with one number, sizes with units, a tqdm bar, a DEBUG dump) are not metrics."""
    minimind = tmp_path / "minimind" / "r1_main.log"
    minimind.parent.mkdir()
    minimind.write_text(
        "nohup: ignoring input\n"
        "Model Params: 30.03M\n"
        "Epoch:[1/2](1/3), Reward: 0.3846, Fmt: 1.00, KL_ref: 0.0004, Actor Loss: 0.0000, Avg Len: 129, LR: 1e-06\n"
        "[DEBUG] step 2 completion: The answer is 42, reward: 1.0\n"
        "Epoch:[1/2](2/3), Reward: 0.3004, Fmt: 1.00, KL_ref: -0.0050, Actor Loss: 0.0005, Avg Len: 176, LR: 1e-06\n"
        "Epoch:[1/2](3/3), Reward: nan, Fmt: 0.62, KL_ref: 0.0042, Actor Loss: 1.7809, Avg Len: 198, LR: 1e-06\n"
        "Epoch:[2/2](1/3), Reward: 0.4360, Fmt: 1.00, KL_ref: 0.0081, Actor Loss: 0.0015, Avg Len: 214, LR: 1e-06\n"
    )
    pipes = tmp_path / "ppo" / "train.log"
    pipes.parent.mkdir()
    pipes.write_text(
        "2025-12-12 13:39:10,001 | [Rank 0] step=10, skipped=4, lr=[5.79e-07, 5.79e-07]\n"
        "2025-12-12 13:39:17,669 | [Step 20] loss=1.5565 | kl=-0.0615 | mean_reward=-5.4102 | clipfrac=0.625\n"
        "  Step 21: generated 8 completions in 374.3s\n"
        "  5%|5         | 21/400 [00:10<03:10,  1.99it/s]\n"
        "2025-12-12 13:39:50,358 | [Step 40] loss=-0.0455 | kl=-0.1610 | mean_reward=-0.8989 | clipfrac=0.500\n"
        "MemAllocated=10.77GB, MaxMemAllocated=20.55GB, step 41\n"
    )
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [minimind, pipes])
    assert report.issues == [] and not any("no metric line" in n for n in report.notes)
    run = run_of(lake_root, "r1_main")
    got = values_by_step(lake_root, run["run_key"])
    assert sorted(got) == [1, 2, 3, 4] and run["origin"] == "console_kv"  # epoch 2's step 1 is the 4th step
    assert set(got[1]) == {"reward", "fmt", "kl_ref", "actor_loss", "avg_len", "lr"}
    assert got[2]["kl_ref"][3] == -0.005 and got[1]["avg_len"][4] == 129 and math.isnan(got[3]["reward"][3])
    ppo = values_by_step(lake_root, run_of(lake_root, "ppo")["run_key"])
    assert sorted(ppo) == [20, 40] and set(ppo[20]) == {"loss", "kl", "mean_reward", "clipfrac"}
    assert ppo[40]["mean_reward"][3] == -0.8989


def test_a_step_line_with_pipes_and_equals_signs_is_no_verl_line(tmp_path):
    """A custom trainer (PyTorch Monarch's GRPO example) prints ``step:0 | policy_loss=-0.0005 | kl_divergence=…``:
    it starts as verl's lines do, but holds no ``key:value`` pair between `` - ``. Read as a verl line it gave
    nothing and the file was "no metric line"; it is a line of ``key=value`` pairs with its step."""
    log = tmp_path / "monarch" / "training.log"
    log.parent.mkdir()
    log.write_text(
        "Training: 7473 problems, 32 prompts/step, 233 steps/epoch, 233 total steps\n"
        "step:0 | policy_loss=-0.0005 | kl_divergence=0.0006 | mean_reward=0.1406 | grad_norm=90.7500 | epoch=0\n"
        "step:1 | policy_loss=0.0012 | kl_divergence=0.0032 | mean_reward=0.1172 | grad_norm=15.5977 | epoch=0\n"
        "step:2 | policy_loss=0.0003 | kl_divergence=36.3034 | mean_reward=0.2656 | grad_norm=9.1289 | epoch=0\n"
    )
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [log.parent])
    assert report.issues == [] and report.notes == []
    run = run_of(lake_root, "monarch")
    got = values_by_step(lake_root, run["run_key"])
    assert run["origin"] == "console_kv" and sorted(got) == [0, 1, 2]
    assert set(got[0]) == {"policy_loss", "kl_divergence", "mean_reward", "grad_norm", "epoch"}
    assert got[2]["kl_divergence"][3] == 36.3034


def test_the_trainers_dicts_after_a_scripts_own_metric_lines_are_a_second_training(tmp_path):
    """A script that fine-tunes with its own loop (`step 10/611  loss=12.1  lr=1.97e-04`) and then runs TRL's
    GRPOTrainer in the same process: the file was a key/value log from its first metric line on, and every dict of
    the GRPO phase was passed over. The first Trainer dict (its `loss` and `epoch`) begins a second run; a dict
    that is no step's log (a config) stays a line the key/value log passes over."""
    log = tmp_path / "sft-then-grpo" / "train.log"
    log.parent.mkdir()
    log.write_text(
        "SFT: 1631 samples, 3 epochs, 611 steps\n"
        "  step 10/611  loss=12.1181  lr=1.97e-04\n"
        "{'lora_r': 16, 'lora_alpha': 32, 'max_len': 128}\n"
        "  step 20/611  loss=7.6132  lr=1.93e-04\n"
        "PHASE: GRPO\n"
        "{'loss': 0.0019, 'grad_norm': 421403.0, 'learning_rate': 4.5e-06, 'kl': 10832.9, 'epoch': 0.01}\n"
        "{'loss': 0.0004, 'grad_norm': 0.5, 'learning_rate': 4.9e-06, 'reward': 0.0, 'kl': 0.41, 'epoch': 0.02}\n"
    )
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [log])
    assert (
        report.issues == [] and len(report.notes) == 1 and "where the Trainer's printed dicts take" in report.notes[0]
    )
    sft, grpo = run_of(lake_root, "sft-then-grpo"), run_of(lake_root, "sft-then-grpo #2")
    assert sft["origin"] == "console_kv" and sorted(values_by_step(lake_root, sft["run_key"])) == [10, 20]
    got = values_by_step(lake_root, grpo["run_key"])
    assert grpo["origin"] == "console_trl" and sorted(got) == [1, 2] and got[1]["kl"][3] == 10832.9


def test_llama_factory_trainer_log_is_a_run_where_that_is_all_there_is(tmp_path):
    """LLaMA-Factory's LogCallback writes `trainer_log.jsonl` with the step as `current_steps`: read alone it was
    "none of its records has a step". Beside the trainer_state.json the Trainer saves it copies a few keys of each
    log_history entry, so there the trainer state is the run and the copy is said not read."""
    records = [
        {"current_steps": s, "total_steps": 30, "loss": 2.0 - 0.01 * s, "reward": -2.7 + 0.01 * s, "epoch": s / 30}
        for s in range(10, 31, 10)
    ]
    live, done = tmp_path / "live", tmp_path / "done"
    for folder in (live, done):
        write_jsonl(folder / "trainer_log.jsonl", records)
    (done / "trainer_state.json").write_text(
        json.dumps({"global_step": 30, "log_history": [{**r, "step": r["current_steps"]} for r in records]})
    )
    lake_root = tmp_path / "lake"
    report = trainer_logs.ingest(lake_root, [tmp_path])
    assert [issue.kind for issue in report.issues] == ["not_read"], report.issues
    assert "LLaMA-Factory's log beside its run's trainer state" in report.issues[0].message
    assert report.issues[0].path == str(done / "trainer_log.jsonl")
    run = run_of(lake_root, "live")
    got = values_by_step(lake_root, run["run_key"])
    assert run["origin"] == "jsonl" and sorted(got) == [10, 20, 30] and got[30]["reward"][3] == pytest.approx(-2.4)
    assert run_of(lake_root, "done")["origin"] == "trainer_state"


def test_a_pair_alone_in_parentheses_after_a_value_is_a_statistic_of_it(tmp_path):
    """`reward=0.300 (std=0.459)`: the spread is the reward's, `reward_std` (the alias seed's reward_std), not a bare
    `std` that no alias can map without guessing whose it is. Parentheses holding more than one pair, or none, name
    nothing."""
    log = tmp_path / "gsm8k" / "train.log"
    log.parent.mkdir()
    log.write_text(
        "[Step 1/50] loss=0.0000 grad=0.4418 clip=0.000 | reward=0.125 (std=0.333) | accuracy=0.125 | t_roll=2.5s\n"
        "[Step 2/50] loss=0.0001 grad=0.3 | reward=0.25 ( std = 0.5 ) | kl=0.1 (n=8, max=0.3) (x) y=1\n"
    )
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [log])
    got = values_by_step(lake_root, run_of(lake_root, "gsm8k")["run_key"])
    assert {k: v[3] for k, v in got[1].items()} == {
        "loss": 0.0,
        "grad": 0.4418,
        "clip": 0.0,
        "reward": 0.125,
        "reward_std": 0.333,
        "accuracy": 0.125,
    }
    assert {k: v[3] for k, v in got[2].items()} == {
        "loss": 0.0001,
        "grad": 0.3,
        "reward": 0.25,
        "reward_std": 0.5,
        "kl": 0.1,
        "n": 8,
        "max": 0.3,
        "y": 1,
    }


def test_a_per_epoch_step_count_continues_across_epochs_and_appends(tmp_path):
    """DeepSpeed-Chat prints `epoch: E|step: S|…` with S counted from 0 in each epoch: epoch 1's step 0 follows
    epoch 0's last step. Lines appended later are read from the cursor and carry on the count."""
    log = tmp_path / "step3" / "training.log"
    log.parent.mkdir()
    log.write_text("".join(f"epoch: 0|step: {s}|ppo_ep: 1|act_loss: 0.{s}1|cri_loss: 0.{s}2\n" for s in range(3)))
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [log])
    with open(log, "a") as fh:
        fh.write("".join(f"epoch: 1|step: {s}|ppo_ep: 1|act_loss: 1.{s}1|cri_loss: 1.{s}2\n" for s in range(2)))
    trainer_logs.ingest(lake_root, [log])
    got = values_by_step(lake_root, run_of(lake_root, "step3")["run_key"])
    assert sorted(got) == [0, 1, 2, 3, 4] and got[3]["act_loss"][3] == 1.01 and got[4]["epoch"][4] == 1


def test_a_value_on_a_line_of_its_own_belongs_to_the_step_line_before_it(tmp_path):
    """DeepSpeed-Chat prints its reward under the step line, alone: `average reward score: v`. A line of nothing but
    pairs takes the step of the metric line before it, across ingests too; one before any metric line, prose around
    a number, a value with a unit, an assignment in a printed completion and DeepSpeed's own step counter are not
    values of a step."""
    log = tmp_path / "step3" / "training.log"
    log.parent.mkdir()
    overflow = "[INFO] [loss_scaler.py:181:update_scale] OVERFLOW! Attempted loss scale: 65536, reducing to 32768\n"
    log.write_text(
        "average reward score: 9.9\n"  # no step yet
        + overflow
        + "epoch: 0|step: 0|ppo_ep: 1|act_loss: 0.21|cri_loss: 0.12|unsuper_loss: 0.0\n"
        "average reward score: -0.68\n"
        "-------------------------------------------------------------------------------------\n"
        "|E2E latency=7.99s |Generate time=5.26s (65.81%) |Others=0.22 (2.73%)|CurSamplesPerSec=8.01\n"
        + overflow
        + "epoch: 0|step: 1|ppo_ep: 1|act_loss: 0.30|cri_loss: 0.17|unsuper_loss: 0.0\n"
        "average reward score: -0.06\n"
        "[INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=4, lr=[5.79e-07, 5.79e-07]\n"
        "act_loss: 0.5\n"  # the step line's own key: not a value of step 1
        "x = 8\n"  # a completion the trainer printed: LaTeX and code assign, spaced, they do not log
        "    test_index = 1\n"
    )
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [log])
    with open(log, "a") as fh:
        fh.write("epoch: 0|step: 2|ppo_ep: 1|act_loss: 0.22|cri_loss: 0.14|unsuper_loss: 0.0\n")
        fh.write("average reward score: 0.20\n")
    trainer_logs.ingest(lake_root, [log])
    got = values_by_step(lake_root, run_of(lake_root, "step3")["run_key"])
    assert sorted(got) == [0, 1, 2]
    assert {step: values["average_reward_score"][3] for step, values in got.items()} == {0: -0.68, 1: -0.06, 2: 0.2}
    assert set(got[0]) == {"epoch", "ppo_ep", "act_loss", "cri_loss", "unsuper_loss", "average_reward_score"}
    assert got[1]["act_loss"][3] == 0.30 and not {"x", "test_index"} & set(got[1])


def test_a_summary_printed_again_after_the_last_step_is_no_second_version_of_it(tmp_path):
    """A segmentation trainer prints its evaluation after the last step line, once per evaluation pass: `Mean IoU:
    0.903` twice. The first is a value of that step, as DeepSpeed-Chat's reward under its step line is; the second,
    here in a later ingest, repeats a value the step already took from a line of its own, and was read as a second
    version of it, which duplicate_steps reported. The next step line takes such values again."""
    log = tmp_path / "seg" / "train.log"
    log.parent.mkdir()
    log.write_text(
        "[Step 1/3] loss=0.9 reward=0.1\n"
        "[Step 2/3] loss=0.7 reward=0.2\n"
        "mean_r=0.15\n"
        "[Step 3/3] loss=0.5 reward=0.4\n"
        "Evaluating on the validation split\n"
        "Mean IoU: 0.903\n"
    )
    lake_root = tmp_path / "lake"
    trainer_logs.ingest(lake_root, [log])
    with open(log, "a") as fh:
        fh.write("Evaluating on the test split\nMean IoU: 0.871\n")
    trainer_logs.ingest(lake_root, [log])
    got = values_by_step(lake_root, run_of(lake_root, "seg")["run_key"])  # asserts each key once a step
    assert got[3]["mean_iou"][3] == 0.903 and got[2]["mean_r"][3] == 0.15
    with open(log, "a") as fh:
        fh.write("[Step 4/4] loss=0.4 reward=0.5\nMean IoU: 0.910\n")
    trainer_logs.ingest(lake_root, [log])
    got = values_by_step(lake_root, run_of(lake_root, "seg")["run_key"])
    assert {step: values["mean_iou"][3] for step, values in got.items() if "mean_iou" in values} == {3: 0.903, 4: 0.91}


def test_a_line_of_pairs_after_a_bullet_or_a_label_is_no_value_of_the_step_before(tmp_path):
    """A hand-written trainer prints sampled completions between its step lines: their markdown bullets
    (`* Number of sweaters: 4`, `- Dogs: 80`) became values of the step before (`number_of_sweaters`, `dogs`), as did
    the `Config: steps=50, lr=5e-06, …` line a driver prints before its next launch. A line of values is nothing but
    its pairs; its indentation is no text."""
    log = tmp_path / "ppo" / "train.log"
    log.parent.mkdir()
    log.write_text(
        "Config: steps=3, groups=8, lr=5e-06, eps=0.2\n"
        "Step: 1 | Loss: -0.0011 | KL: -0.0002\n"
        "Average Critic Gradient Magnitude: 0.0000571418\n"
        "**Calculate the total cost:**\n"
        "* Number of sweaters: 4\n"
        "   - Dogs: 80\n"
        "2. Frogs: 160\n"
        "Step: 2 | Loss: 0.0003 | KL: -0.0005\n"
        "    average critic gradient magnitude: 0.0000295349\n"
        "Config: steps=3, groups=8, lr=5e-06, eps=0.2\n"
    )
    lake_root = tmp_path / "lake"
    assert trainer_logs.ingest(lake_root, [log]).issues == []
    got = values_by_step(lake_root, run_of(lake_root, "ppo")["run_key"])
    assert {step: {k: v[3] for k, v in row.items()} for step, row in got.items()} == {
        1: {"loss": -0.0011, "kl": -0.0002, "average_critic_gradient_magnitude": 0.0000571418},
        2: {"loss": 0.0003, "kl": -0.0005, "average_critic_gradient_magnitude": 0.0000295349},
    }


def test_a_step_counted_out_of_its_total_beside_an_outer_loop_is_the_step(tmp_path):
    """A GRPO written from scratch (a textbook's notebook) prints `Iteration 1/1, Step 37/500, GRPO iter 1/1,
    loss: 0.0004` with its average reward on a line of its own: the step is the one counted out of 500, not the
    outer iteration, and a step counted out of its total needs no second value to be a metric line."""
    log = tmp_path / "scratch" / "train_stdout.log"
    log.parent.mkdir()
    log.write_text(
        "".join(
            f"Average Reward: {1.0 + step / 10}\nIteration 1/1, Step {step}/500, GRPO iter 1/1, loss: 0.00{step}\n"
            for step in range(1, 4)
        )
        + "Step 4/500\n"  # a progress line: no value
    )
    trainer_logs.ingest(tmp_path / "lake", [log])
    got = values_by_step(tmp_path / "lake", run_of(tmp_path / "lake", "scratch")["run_key"])
    assert {step: got[step]["loss"][3] for step in got} == {1: 0.001, 2: 0.002, 3: 0.003}
    # a value on a line of its own belongs to the step line before it (the first one, before any, has no step)
    assert {step: got[step].get("average_reward", (None,) * 4)[3] for step in got} == {1: 1.2, 2: 1.3, 3: None}
    # a script's stage counted out of its total, with a number in its prose, is no metric line: the TRL dicts after
    # it are the log (a file's first metric line fixes its format)
    staged = tmp_path / "staged" / "output1.txt"
    staged.parent.mkdir()
    staged.write_text(
        "[Step 3/6] Loading model: Qwen/Qwen3-8B (bf16 + LoRA r=16)...\n"
        "[Step 5/6] GRPO Training (200 steps)...\n"
        "{'loss': 0.1, 'reward': 0.25, 'epoch': 0.1}\n{'loss': 0.2, 'reward': 0.5, 'epoch': 0.2}\n"
    )
    trainer_logs.ingest(tmp_path / "lake2", [staged])
    got = values_by_step(tmp_path / "lake2", run_of(tmp_path / "lake2", "output1")["run_key"])
    assert {step: got[step]["reward"][3] for step in got} == {1: 0.25, 2: 0.5}


def test_ray_tagged_verl_lines_and_slurm_out_files_are_read(tmp_path):
    """verl's driver prints through Ray: its metric lines start with a colour code and the printing process's tag.
    A SLURM job's captured stdout is a .out file."""
    ray = tmp_path / "verl" / "train.log"
    ray.parent.mkdir()
    ray.write_text(
        "\x1b[36m(TaskRunner pid=678203)\x1b[0m step:1 - critic/score/mean:0.5 - actor/entropy:1.2\n"
        "\x1b[36m(main_task pid=28294, ip=10.0.0.7)\x1b[0m step:2 - critic/score/mean:0.6 - actor/entropy:1.1\n"
        "(WorkerDict pid=99) some other message\n"
    )
    slurm = tmp_path / "slurm" / "job_1639580.out"
    slurm.parent.mkdir()
    slurm.write_text(
        "loading model...\n{'loss': 0.1, 'reward': 0.25, 'epoch': 0.1}\n{'loss': 0.2, 'reward': 0.5, 'epoch': 0.2}\n"
    )
    report = trainer_logs.ingest(tmp_path / "lake", [tmp_path])
    assert report.files_read == 2 and not report.issues
    rows = {(r[1], r[2]): r[3] for r in history(tmp_path / "lake")}
    assert rows[(1, "critic/score/mean")] == 0.5 and rows[(2, "actor/entropy")] == 1.1
    assert rows[(1, "reward")] == 0.25 and rows[(2, "reward")] == 0.5


TINKER_LINE = '{{"step": {n}, "env/all/reward/total": 0.{n}, "optim/lr": 1e-05, "progress/done_frac": 0.{n}}}\n'


def _config_of(lake_root: Path, name: str) -> dict:
    return json.loads(run_of(lake_root, name)["config"])


# a W&B run's files/config.yaml as wandb writes it: each setting wrapped, wandb's own settings beside them
WANDB_CONFIG_YAML = """wandb_version: 1

_wandb:
  desc: null
  value:
    cli_version: 0.16.6
    python_version: 3.10.12
learning_rate:
  desc: null
  value: 1.0e-06
beta:
  value: 0.04
trainer:
  desc: null
  value:
    num_generations: 8
"""


def test_a_config_file_beside_a_log_is_its_runs_config(tmp_path):
    """The Tinker cookbook writes config.json beside metrics.jsonl (a W&B run's files/ and OmegaConf trainers write
    config.yaml): that is the run's config, nested as written, and `runs.config` was {} for every such run, so a
    sweep of them saw no hyper-parameter. Beside several runs' logs a config is no one's; a broken one is an issue,
    a model's config.json no run config; a rewritten or deleted one is seen at the next ingest."""
    logs = tmp_path / "logs"
    tinker = {"learning_rate": 1e-05, "model_name": "meta-llama/Llama-3.2-3B", "dataset_builder": {"batch_size": 64}}
    folders = {
        "tinker": ("config.json", json.dumps(tinker, indent=2)),
        "hydra": ("config.yaml", "trainer:\n  lr: 3.0e-6\n  kl_coef: 0.05\nstarted: 2025-01-02\n"),
        "broken": ("config.json", '{"learning_rate": 1e-05,'),
        "model": ("config.json", json.dumps({"architectures": ["LlamaForCausalLM"], "transformers_version": "4.5"})),
        "wandb": ("config.yaml", WANDB_CONFIG_YAML),
        "own": ("config.yaml", "reward:\n  value: 1.0\n  desc: exact match\n"),
    }
    for folder, (name, text) in folders.items():
        (logs / folder).mkdir(parents=True)
        (logs / folder / "metrics.jsonl").write_text("".join(TINKER_LINE.format(n=n) for n in (1, 2)))
        (logs / folder / name).write_text(text)
    (logs / "shared").mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (logs / "shared" / name).write_text(TINKER_LINE.format(n=1))
    (logs / "shared" / "config.json").write_text(json.dumps(tinker))
    lake_root = tmp_path / "lake"

    report = trainer_logs.ingest(lake_root, [logs])
    assert _config_of(lake_root, "tinker") == tinker
    assert _config_of(lake_root, "hydra") == {"trainer": {"lr": 3e-06, "kl_coef": 0.05}, "started": "2025-01-02"}
    assert _config_of(lake_root, "broken") == {} and _config_of(lake_root, "model") == {}
    assert _config_of(lake_root, "wandb") == {"learning_rate": 1e-06, "beta": 0.04, "trainer": {"num_generations": 8}}
    assert _config_of(lake_root, "own") == {"reward": {"value": 1.0, "desc": "exact match"}}
    assert _config_of(lake_root, "a") == {} and _config_of(lake_root, "b") == {}
    [bad] = [(i.path, i.kind) for i in report.issues]
    assert bad == (str(logs / "broken" / "config.json"), "bad_config")
    assert any("beside the logs of 2 runs" in note for note in report.notes)
    assert not trainer_logs.ingest(lake_root, [logs]).changed  # nothing rewritten: nothing read

    (logs / "tinker" / "config.json").write_text(json.dumps({**tinker, "learning_rate": 4e-05}))
    (logs / "broken" / "config.json").write_text('{"learning_rate": 2e-05}')
    (logs / "hydra" / "config.yaml").unlink()
    pending = sorted(p.name for p in trainer_logs.pending_files(lake_root, [logs]))
    assert pending == ["config.json", "config.json", "config.yaml"]
    again = trainer_logs.ingest(lake_root, [logs])
    assert again.issues == [] and len(again.runs_touched) == 3
    assert _config_of(lake_root, "tinker")["learning_rate"] == 4e-05
    assert _config_of(lake_root, "broken") == {"learning_rate": 2e-05} and _config_of(lake_root, "hydra") == {}
    assert run_of(lake_root, "tinker")["history_rows"] == 2  # the log was not read again

    (logs / "tinker" / "more.jsonl").write_text(TINKER_LINE.format(n=3))  # a second run's log beside it
    trainer_logs.ingest(lake_root, [logs])
    assert _config_of(lake_root, "tinker") == {} and _config_of(lake_root, "more") == {}
