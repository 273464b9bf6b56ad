"""The independent synthetic run generator (pipeline.evaluation.synthetic_runs): deterministic, its labels agree with
the data it wrote (read back from the files, the way a user would read them), every labelled check exists and every
run logs the canonical metrics its labelled checks need under keys the alias seed maps."""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pipeline import checks
from pipeline.evaluation import synthetic_runs as sr

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ROOT / "sql" / "checks"
ALIASES = ROOT / "dbt_project" / "seeds" / "metric_aliases.csv"
STEP_FIELDS = ("step", "global_step", "_step", "train/global_step")  # the trainer-log ingest's order
SEEDS = [int(s) for s in os.environ.get("SYNTHETIC_SEEDS", "0,1").split(",")]


# ------------------------------------------------------------------------------------------------------ reading


def read_run(out: Path, label: dict) -> tuple[list[tuple[int, dict]], dict]:
    """(rows as (trainer step, values) in file order, config) of one written run. ``_step`` exports are put on the
    trainer step (``train/global_step``), as the labels are."""
    path = out / label["path"]
    if label["format"] == "trainer_state":
        doc = json.loads((path / "trainer_state.json").read_text())
        rows = [(e["step"], {k: v for k, v in e.items() if k != "step"}) for e in doc["log_history"]]
        return rows, {k: v for k, v in doc.items() if k != "log_history"}
    rows = []
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        field = next(f for f in STEP_FIELDS if f in obj)
        values = {k: v for k, v in obj.items() if k != field}
        if isinstance(values.get("data"), dict):
            values = {**{k: v for k, v in values.items() if k != "data"}, **values.pop("data")}
        step = values["train/global_step"] if field == "_step" else obj[field]
        rows.append((step, values))
    return rows, {}


def series(rows, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one key, the last value written for each step (a resumed run's second pass wins)."""
    last: dict[int, float] = {}
    for step, values in rows:
        if key in values and isinstance(values[key], (int, float)):
            last[step] = float(values[key])
    steps = sorted(last)
    return np.asarray(steps), np.asarray([last[s] for s in steps])


def aliases() -> list[tuple[str, str]]:
    with open(ALIASES) as fh:
        return [(r["source_key"], r["metric"]) for r in csv.DictReader(fh)]


def canonical(key: str, table: list[tuple[str, str]]) -> set[str]:
    """The canonical metrics a logged key maps to: exact aliases, or LIKE patterns with %."""
    out = set()
    for source, metric in table:
        if "%" in source:
            if re.fullmatch(".*".join(re.escape(part) for part in source.split("%")), key):
                out.add(metric)
        elif source == key:
            out.add(metric)
    return out


# ------------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module", params=SEEDS)
def written(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"synthetic-{request.param}")
    labels = sr.write_runs(out, request.param, 32, wandb_runs=0)
    return out, labels


# --------------------------------------------------------------------------------------------------------- tests


def test_same_seed_same_runs_other_seed_other_runs(tmp_path):
    a = sr.write_runs(tmp_path / "a", 5, 10, wandb_runs=0)
    b = sr.write_runs(tmp_path / "b", 5, 10, wandb_runs=0)
    c = sr.write_runs(tmp_path / "c", 6, 10, wandb_runs=0)
    strip = lambda labels: [{k: v for k, v in r.items() if k != "run_id"} for r in labels]  # noqa: E731
    assert strip(a) == strip(b)
    assert strip(a) != strip(c)
    files_a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert files_a == files_b
    for rel in files_a:
        if rel.name != "labels.json":  # labels.json differs only in the path-derived run ids
            assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
    with pytest.raises(FileExistsError):
        sr.write_runs(tmp_path / "a", 5, 10, wandb_runs=0)


def test_composition(written):
    out, labels = written
    assert json.loads((out / "labels.json").read_text()) == labels
    assert len(labels) == 32 and len({r["name"] for r in labels}) == 32
    healthy = [r for r in labels if not r["problems"]]
    assert len(healthy) == 16
    assert all(1 <= len(r["problems"]) <= 2 for r in labels if r["problems"])
    assert {"jsonl", "trainer_state"} <= {r["format"] for r in labels}
    assert sum(r["format"] == "jsonl" for r in labels) > len(labels) / 2
    assert len({r["step_field"] for r in labels}) >= 4
    assert {"trl", "verl"} == {r["framework"] for r in labels}
    assert len({p["check"] for r in labels for p in r["problems"]}) >= 14
    for r in labels:
        assert 30 <= r["n_steps"] <= 2000 and r["logging_steps"] in (1, 5, 10) and r["logged_points"] >= 25
        for p in r["problems"]:
            assert p["severity"] in ("warn", "error")
            assert p["end_step"] is None or p["end_step"] >= p["onset_step"]
    assert any(r["logged_points"] <= 50 for r in labels)
    assert any(r["n_steps"] >= 500 for r in labels)


def test_every_labelled_check_exists_and_its_metrics_are_logged(written):
    out, labels = written
    table = aliases()
    for label in labels:
        rows, config = read_run(out, label)
        keys = {k for _, values in rows for k in values}
        logged = set().union(*(canonical(k, table) for k in keys))
        # Canonical metrics only under mapped keys: every key of a known metric family maps.
        for key in keys:
            if re.fullmatch(
                r"(train/)?(reward|reward_std|kl|entropy|grad_norm|loss|learning_rate)", key
            ) or key.startswith(("critic/score/mean", "response_length/", "timing_s/step", "actor/kl_loss")):
                assert canonical(key, table), f"{label['name']}: {key} maps to nothing"
        for problem in label["problems"]:
            check = problem["check"]
            assert (CHECKS / f"{check}.sql").is_file(), check
            missing = checks.lacking(checks.parse_check(CHECKS / f"{check}.sql"), logged)
            assert not missing, f"{label['name']}: {check} needs {missing}"
            if problem["metric"] not in ("history.versions", "train/global_step"):
                assert problem["metric"] in keys, (label["name"], problem)
            if check == "response_truncation" and "response_clip_ratio" not in logged:
                assert config.get("max_completion_length") or "response_length_max" in logged
            if check == "throughput_drop":
                assert "step_time_s" in logged


def test_component_names_follow_the_task_pattern():
    """Task components must be recognised as such, shaping ones not (the dbt var, or the check's own param)."""
    var = re.search(r'task_component_pattern:\s*"(.*?)"', (ROOT / "dbt_project" / "dbt_project.yml").read_text())
    param = re.search(r"task_pattern = (\(.*?\))\s", (CHECKS / "reward_component_dominant.sql").read_text())
    task = re.compile((var or param).group(1))
    assert all(task.search(name) for name in sr.TASK_FUNCS)
    assert not any(task.search(name) for name in sr.SHAPING_FUNCS + (sr.DEAD_FUNC,))


def _reward_key(keys):
    return next(k for k in ("reward", "train/reward", "critic/score/mean") if k in keys)


def _task_key(keys):
    return next((k for k in keys if k == "eval/accuracy" or re.fullmatch(r"val-core/.*/acc/mean@.*", k)), None)


def test_labels_agree_with_the_written_data(written):
    out, labels = written
    for label in labels:
        rows, config = read_run(out, label)
        keys = {k for _, values in rows for k in values}
        name = label["name"]
        if not label["problems"]:
            values = [v for _, row in rows for v in row.values() if isinstance(v, float)]
            assert all(math.isfinite(v) for v in values), f"{name}: non-finite value in a healthy run"
            if label["format"] == "jsonl" and label["step_field"] != "_step":
                seen = Counter((s, k) for s, row in rows for k in row)
                assert max(seen.values()) == 1, f"{name}: a (step, key) logged twice in a healthy run"
            continue
        for p in label["problems"]:
            check, onset, metric = p["check"], p["onset_step"], p["metric"]
            why = f"{name}: {check}@{onset}"
            if metric in keys:
                steps, vals = series(rows, metric)
                assert onset in steps, why
                pre, post = vals[steps < onset], vals[steps >= onset]
            if check == "reward_collapse":
                assert np.median(post[3:]) < np.percentile(pre, 10) and post[3:].max() < np.median(pre), why
            elif check == "entropy_collapse":
                assert (post[8:] < 0.1).all() and np.median(pre) > 0.2, why
            elif check == "response_length_collapse":
                assert np.median(post[3:]) < 0.2 * np.median(pre), why
            elif check == "response_length_growth":
                tail = post[-max(3, len(post) // 10) :]
                assert np.median(tail) > 1.8 * np.median(pre[-10:]), why
            elif check == "response_truncation":
                if metric in (
                    "completions/clipped_ratio",
                    "train/completions/clipped_ratio",
                    "response_length/clip_ratio",
                ):
                    assert np.median(post) >= 0.05 and (len(pre) == 0 or np.median(pre[-10:]) < 0.05), why
                else:
                    limit = config.get("max_completion_length") or max(
                        series(rows, k)[1].max() for k in keys if k.endswith(("completions/max_length",))
                    )
                    assert np.median(post[3:]) >= 0.95 * limit, why
            elif check == "kl_spike":
                assert post[0] > 0.2 and post[0] > 5 * np.median(pre[-20:]), why
            elif check == "kl_drift":
                assert np.median(post[-10:]) > 0.1 and np.median(post[-10:]) > 2 * np.median(pre[-10:]), why
            elif check == "grad_norm_spike":
                assert post[0] >= 4 * np.median(pre[-20:]), why
            elif check == "loss_nonfinite":
                assert not math.isfinite(post[0]) and np.isfinite(pre).all(), why
                if p["end_step"] is not None:
                    assert np.isfinite(post[steps[steps >= onset] > p["end_step"]]).all(), why
            elif check == "reward_zero_variance":
                assert np.median(post) >= 0.5 and np.median(pre) < 0.5, why
            elif check == "reward_plateau":
                q = max(3, len(vals) // 4)
                assert abs(vals[-q:].mean() - vals[:q].mean()) < 1.5 * vals.std(), why
            elif check == "too_conservative":
                assert np.median(vals) < 0.005, why
            elif check == "reward_hacking":  # the task metric, or without one the task component, stays flat
                task_key = _task_key(keys) or next(
                    k for k in keys if re.search(r"rewards/(" + "|".join(sr.TASK_FUNCS) + r")(/mean)?$", k)
                )
                task_steps, task = series(rows, task_key)
                after = task[task_steps >= onset]
                assert post[-len(post) // 5 :].mean() > post[: max(3, len(post) // 10)].mean(), why
                assert len(after) >= 10, why
                assert np.polyfit(task_steps[task_steps >= onset], after, 1)[0] * (steps[-1] - onset) < 0.06, why
            elif check == "reward_component_dead":
                assert vals.max() - vals.min() == 0, why
            elif check == "reward_component_dominant":
                task_key = next(k for k in keys if re.search(r"rewards/(" + "|".join(sr.TASK_FUNCS) + r")(/mean)?$", k))
                _, task = series(rows, task_key)
                q = max(3, len(task) // 4)
                assert abs(task[-q:].mean() - task[:q].mean()) < 0.1, why
                assert vals[-q:].mean() - vals[:q].mean() > 0.4, why
            elif check == "duplicate_steps":
                if metric == "history.versions":
                    seen = Counter((s, k) for s, row in rows for k in row)
                    repeated = sorted({s for (s, _k), c in seen.items() if c > 1})
                    assert repeated[0] == onset and repeated[-1] == p["end_step"], why
                else:
                    by_step = Counter(s for s, row in rows if "train/loss" in row)
                    assert min(s for s, c in by_step.items() if c > 1) == onset, why
            elif check == "throughput_drop":
                assert np.median(post[:8]) > 1.8 * np.median(pre[-20:]), why
            elif check == "clip_fraction_high":
                assert np.median(post[3:]) > 0.3 and np.median(pre) < 0.1, why
            else:
                raise AssertionError(f"no consistency rule for {check}")


def test_cli_writes_and_summarises(tmp_path, capsys):
    assert sr.main([str(tmp_path / "out"), "--seed", "2", "--runs", "6", "--wandb", "0"]) == 0
    line = capsys.readouterr().out.strip()
    assert "\n" not in line and line.startswith("6 runs (3 healthy")
    assert (tmp_path / "out" / "labels.json").is_file() and (tmp_path / "out" / "trainer_logs").is_dir()
    assert sr.main([str(tmp_path / "out"), "--seed", "2", "--runs", "6"]) == 2  # will not mix two sets


def test_wandb_runs_are_real_offline_runs(tmp_path):
    labels = sr.write_runs(tmp_path, 4, 6, wandb_runs=1)
    runs = [r for r in labels if r["format"] == "wandb"]
    assert len(runs) == 1
    folders = list((tmp_path / "wandb").rglob(f"offline-run-*-{runs[0]['run_id']}"))
    assert len(folders) == 1 and list(folders[0].glob("run-*.wandb"))


@pytest.mark.parametrize("seed", [0, 4, 5, 20])
def test_the_checks_score_on_a_seed_of_the_second_generator(tmp_path, capsys, seed):
    """End to end through ingest, dbt and every rule, as `python -m pipeline.evaluation.check_eval --synthetic 1
    --first-seed SEED` scores it: a guard against a rule change that trades these runs for the demo's shapes. Seed 0
    scored 1.00 / 1.00 when this was written; seeds 4 and 5 hold the shapes that made rules fail once (a jump of the
    length to its limit, a rise that collapsed below its start, a plateau gaining 5%, dense evaluations under a slow
    hack): 1.00 / 1.00 since; seed 20, held out until it showed a format-carried reward over a task drifting 0.044 ->
    0.058 and a length growth in a restarted run: 1.00 / 1.00 since."""
    from pipeline.evaluation.check_eval import format_table, main

    assert main(["--synthetic", "1", "--first-seed", str(seed), "--home", str(tmp_path), "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    total = scored["seeds"][str(seed)]
    assert total["error"] is None and total["labels"] >= 15, format_table(scored["pooled"])
    assert total["precision"] >= 0.95 and total["recall"] >= 0.95, format_table(scored["pooled"])
