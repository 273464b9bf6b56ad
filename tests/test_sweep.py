"""`grpolens sweep` and `grpolens compare` on sweeps whose answers are known (tests/sweep_runs.py, written by the
real wandb library in offline mode): the ranking, the effects, the confounding call, the recommendations, and one
line for a sweep that cannot be compared."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pipeline import warehouse
from pipeline.report import sweep, sweep_report, sweep_stats
from pipeline.settings import Settings
from tests.conftest import grpolens, write_jsonl
from tests.sweep_runs import sweep_specs, write_all


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweeps")
    write_all(root / "wandb")
    home = root / "home"
    grpolens("refresh", env={"GRPOLENS_HOME": str(home), "GRPOLENS_WANDB_DIRS": str(root / "wandb")}, check=True)
    return Settings(home=home), sweep_specs()


def run_sweep(settings: Settings, *args: str) -> dict:
    proc = grpolens(*args, "--format", "json", env={"GRPOLENS_HOME": str(settings.home)}, check=True)
    return json.loads(proc.stdout)


def test_lr_sweep_ranking_effects_confounding_and_next_experiments(sweeps):
    settings, specs = sweeps
    truth = specs["lr-sweep"].truth
    doc = run_sweep(settings, "sweep", "--group", "lr-sweep")
    assert set(doc) >= {
        "selection",
        "metric",
        "higher_is_better",
        "runs",
        "effects",
        "pareto",
        "power_law",
        "recommendations",
        "files",
    }
    assert doc["metric"] == "task_score" and doc["higher_is_better"]
    order = [r["run"] for r in doc["runs"]]
    assert order[0] == truth["best"] and [r["rank"] for r in doc["runs"]] == list(range(1, 7))
    assert doc["runs"][-1]["run"] in truth["order"][-2:]
    for run in doc["runs"]:
        assert set(run) >= {"run", "run_key", "rank", "score", "ci", "tied_with_best", "config", "cost", "flags"}
        assert run["ci"][0] <= run["score"] <= run["ci"][1]
    for run in doc["runs"][1:]:
        assert run["tied_with_best"] == (run["ci"][1] >= doc["runs"][0]["ci"][0])
    assert doc["runs"][0]["tied_with_best"] == any(run["tied_with_best"] for run in doc["runs"][1:])
    effects = {e["param"]: e for e in doc["effects"]}
    assert set(effects) == set(truth["varying"])  # seed, run_name and output_dir are not hyper-parameters
    lr = effects["learning_rate"]
    assert lr["kind"] == "numeric" and math.isclose(lr["peak"], truth["peak"]) and lr["best_value"] == truth["peak"]
    assert not effects["lora_rank"]["significant"]
    a, b = truth["confounded"][0]
    assert effects[a]["confounded_with"] == [b] and effects[b]["confounded_with"] == [a]
    assert lr["confounded_with"] == [] and effects["lora_rank"]["confounded_with"] == []
    recs = " | ".join(doc["recommendations"])
    assert 3 <= len(doc["recommendations"]) <= 6
    assert "Refine learning_rate around its peak 3e-05" in recs
    assert "Stop sweeping lora_rank" in recs and f"Ablate {a} against {b}" in recs
    assert doc["suggested_config"]["learning_rate"] == truth["peak"]
    assert doc["pareto"] and doc["pareto_cost"] == "tokens"
    assert {p["compute_basis"] for p in doc["power_law"]} == {"tokens"} and len(doc["power_law"]) == 6
    assert doc["power_law_summary"].startswith("steepest: ")
    for plot in doc["files"]["plots"]:
        assert Path(plot).read_bytes()[:4] == b"\x89PNG"
    text = Path(doc["files"]["markdown"]).read_text()
    assert text.startswith("# Sweep: group lr-sweep") and f"**Winner: {truth['best']}**" in text


def test_monotone_effect_at_the_edge_suggests_going_further(sweeps):
    settings, specs = sweeps
    doc = run_sweep(settings, "sweep", "--prefix", "tiny-")
    assert doc["runs"][0]["run"] == specs["tiny"].truth["best"]
    assert any(r.startswith("Extend learning_rate past 0.0001") for r in doc["recommendations"])


def test_runs_of_different_lengths_and_a_crash(sweeps):
    settings, specs = sweeps
    truth = specs["ragged"].truth
    doc = run_sweep(settings, "sweep", "--group", "ragged")
    assert doc["runs"][0]["run"] == truth["best"]
    by_name = {r["run"]: r for r in doc["runs"]}
    for name, steps in truth["steps"].items():
        assert by_name[name]["last_step"] == steps  # each run judged on its own tail
    crashed = truth["crashed"][0]
    assert by_name[crashed]["state"] == "failed"
    assert any(line.startswith(f"{crashed} failed at step 25") for line in doc["good_bad_ugly"]["ugly"])
    assert doc["effects"][0]["param"] == "num_generations" and doc["effects"][0]["spearman"] > 0


@pytest.mark.parametrize(
    "args, said",
    [
        (("sweep", "--group", "solo"), "group solo has one run (solo-0): a sweep needs two or more"),
        (("compare", "solo-0"), "only one run to compare (solo-0): a comparison needs two or more"),
        (("compare", "flat-0", "flat-0"), "only one run to compare (flat-0)"),
        (("sweep", "--group", "flat"), "nothing varies"),
        (("sweep", "--group", "no-shared-metric"), "share no metric"),
        (("sweep", "--group", "no-such-group"), "no runs with group no-such-group"),
    ],
)
def test_sweeps_that_cannot_be_compared_say_so_in_one_line(sweeps, args, said):
    settings, _ = sweeps
    proc = grpolens(*args, env={"GRPOLENS_HOME": str(settings.home)})
    assert proc.returncode == 1 and said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_task_scores_of_different_tasks_are_not_ranked_against_each_other(sweeps):
    """One run's task score is GSM8K accuracy, the other's a Diplomacy supply-centre count: both are `task_score`,
    from different logged keys. No winner on it; the reward, named, still ranks them; asked for by name, the task
    score ranks them under a note that says which key each came from."""
    settings, specs = sweeps
    truth = specs["two-tasks"].truth
    proc = grpolens("sweep", "--group", "two-tasks", env={"GRPOLENS_HOME": str(settings.home)})
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "task scores are different measures" in proc.stderr
    assert all(f"{key}: {run}" in proc.stderr for run, key in truth["task_keys"].items())
    on_reward = run_sweep(settings, "compare", *truth["task_keys"], "--metric", "reward_mean")
    assert on_reward["metric"] == "reward_mean" and not on_reward.get("note")
    assert on_reward["runs"][0]["run"] == truth["best"]
    on_task = run_sweep(settings, "compare", *truth["task_keys"], "--metric", "task_score")
    assert "task_score is logged as different keys" in on_task["note"]
    text = Path(on_task["files"]["markdown"]).read_text()
    assert text.index("Note: task_score is logged as different keys") < text.index("**Winner:")
    same_task = run_sweep(settings, "sweep", "--group", "lr-sweep")
    assert same_task["metric"] == "task_score" and not same_task.get("note")
    # one accuracy over 16 or 30 samples per problem is one measure; a count of supply centres is another
    assert not sweep.different_measures({"a": "val-core/aime_2024/acc/mean@16", "b": "val-core/aime_2024/acc/mean@30"})
    assert sweep.different_measures({"a": "val-core/aime_2024/acc/mean@16", "b": "val-core/math/acc/mean@16"})


def test_compare_ranks_repeats_and_overlays_curves(sweeps):
    settings, _ = sweeps
    doc = run_sweep(settings, "compare", "flat-0", "flat-1", "flat-2")
    assert len(doc["runs"]) == 3 and "repeats" in doc["note"] and doc["effects"] == []
    assert all(r["tied_with_best"] for r in doc["runs"])  # same configuration: nothing separates them
    assert any(Path(p).name == "curves.png" for p in doc["files"]["plots"])


def test_run_outcomes_holds_the_same_numbers(sweeps):
    settings, _ = sweeps
    doc = run_sweep(settings, "sweep", "--group", "lr-sweep")
    con = warehouse.connect_readonly(settings)
    try:
        rows = {
            name: rest
            for name, *rest in con.execute(
                "select name, score, ci_low, ci_high, primary_metric from run_outcomes where group_name = 'lr-sweep'"
            ).fetchall()
        }
    finally:
        con.close()
    for run in doc["runs"]:
        score, low, high, metric = rows[run["run"]]
        assert metric == doc["metric"] and math.isclose(score, run["score"])
        assert math.isclose(low, run["ci"][0]) and math.isclose(high, run["ci"][1])


def test_statistics_on_known_inputs():
    assert sweep_stats.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert sweep_stats.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert sweep_stats.spearman([1, 1, 1], [1, 2, 3]) is None
    assert list(sweep_stats.ranks([3.0, 1.0, 3.0])) == [2.5, 1.0, 2.5]
    levels = sweep_stats.levels([1, 2, 3, 1, 2, 3], [0.1, 0.9, 0.2, 0.1, 0.9, 0.2], numeric=True)
    assert [lv["n"] for lv in levels] == [2, 2, 2] and sweep_stats.peak(levels, True)["value"] == 2
    assert sweep_stats.peak(levels, False) is None  # the lowest mean sits at an edge
    binned = sweep_stats.levels(list(range(9)), list(range(9)), numeric=True)
    assert len(binned) == 3 and [lv["n"] for lv in binned] == [3, 3, 3]
    params = {"lr": {"a": 1, "b": 2, "c": 3}, "kl": {"a": 10, "b": 20, "c": 30}, "opt": {"a": "x", "b": "y", "c": "x"}}
    together = sweep_stats.confounded(params, ["a", "b", "c"])
    assert together == {"lr": ["kl"], "kl": ["lr"], "opt": []}
    assert sweep_stats.pareto_front([1.0, 2.0, 1.5], [1.0, 3.0, 4.0], True) == [0, 1]
    assert set(
        sweep_stats.varying(
            {
                "a": {"seed": 1, "lr": 1, "output_dir": "/a", "x": 1},
                "b": {"seed": 2, "lr": 2, "output_dir": "/b", "x": 1},
            }
        )
    ) == {"lr"}


def _effects(values: list, scores: list[float]) -> dict:
    """sweep.effects on runs r0, r1, … configured with ``param`` = each value and scoring each score."""
    keys = [f"r{i}" for i in range(len(values))]
    configs = [{"param": v} for v in values]
    runs = pl.DataFrame({"run_key": keys, "config": configs}, schema_overrides={"config": pl.Object})
    ranked = sweep.rank(pl.DataFrame({"run_key": keys, "score": scores}), higher_is_better=True)
    (effect,) = sweep.effects(sweep.Selection("test", runs), ranked, higher_is_better=True)
    return effect


def test_an_effect_that_rests_on_one_run_is_not_significant():
    """Four runs, three at one value and one at the other (the demo's verl compare): the bootstrap resamples that
    leave the lone run out have no rho, and keeping only those that hold it made rho's interval [-1, rho] and the
    effect "significant". Too few runs for an interval; and a categorical level of one run has no interval to clear."""
    x, y = [1024, 1024, 1024, 2048], [0.80, 0.65, 0.28, 0.0016]
    assert sweep_stats.spearman(x, y) == pytest.approx(-0.7746, abs=1e-4)
    assert sweep_stats.spearman_interval(x, y) is None
    lone = _effects(x, y)
    assert lone["ci"] is None and not lone["significant"]
    assert not any("param" in line for line in _advice(lone))  # neither "extend" nor "no effect found" from one run
    five = [1, 1, 1, 1, 2], [0.80, 0.65, 0.70, 0.75, 0.0]  # five runs, still one of them at 2: no interval
    assert sweep_stats.spearman_interval(*five) is None
    optimiser = _effects(["adam", "adam", "adam", "sgd"], [0.80, 0.81, 0.82, 0.1])
    assert optimiser["kind"] == "categorical" and not optimiser["significant"]
    # enough runs at each value: an interval that holds its estimate, and a real effect
    x, y = [1, 1, 1, 1, 2, 2, 2, 2], [0.1, 0.2, 0.15, 0.12, 0.8, 0.7, 0.75, 0.9]
    rho, ci = sweep_stats.spearman(x, y), sweep_stats.spearman_interval(x, y)
    assert ci is not None and ci[0] <= rho <= ci[1] and ci[0] > 0
    assert _effects(x, y)["significant"]
    assert _effects(["a"] * 4 + ["b"] * 4, y)["significant"]


def _edge_advice(values: list, means: list[float]) -> list[str]:
    """The recommendations for one numeric parameter whose best level is at an edge of the values tried."""
    effect = {
        "param": "p",
        "kind": "numeric",
        "spearman": -1.0 if means[0] > means[-1] else 1.0,
        "significant": False,
        "confounded_with": [],
        "levels": [{"value": v, "n": 1, "mean": m, "ci": None} for v, m in zip(values, means, strict=True)],
        "best_value": values[means.index(max(means))],
        "peak": None,
        "spread": max(means) - min(means),
    }
    return _advice(effect)


def _advice(effect: dict) -> list[str]:
    """sweep_report.recommendations for a sweep of one varying parameter."""
    doc = {"runs": [{"run": "a", "config": {effect["param"]: effect["best_value"]}, "tied_with_best": True}]}
    doc["good_bad_ugly"] = {"bad": [], "ugly": []}
    return sweep_report.recommendations(doc, [effect])[0]


def test_the_next_value_past_an_edge_stays_in_the_parameters_domain():
    """A length tried at 1024, 2048 and 3072 and best at 1024: one more linear step down is 0 tokens. A parameter
    tried only at positive values is at most halved toward zero; a count already at 1 has nothing below it."""
    (line, *_) = _edge_advice([1024, 2048, 3072], [0.8, 0.5, 0.2])
    assert line.startswith("Extend p past 1024, the lowest value tried and the best: try 512;"), line
    (line, *_) = _edge_advice([0.2, 0.5, 0.8], [0.8, 0.5, 0.2])
    assert "try 0.1;" in line  # a linear step (-0.1) would cross zero
    (line, *_) = _edge_advice([4, 5, 6], [0.8, 0.5, 0.2])
    assert "try 3;" in line  # the linear step when it stays well above zero
    (line, *_) = _edge_advice([1, 2, 3], [0.8, 0.5, 0.2])
    assert line.startswith("Keep p at 1, the lowest value tried and the best: no smaller positive whole value"), line
    (line, *_) = _edge_advice([1024, 2048, 3072], [0.2, 0.5, 0.8])
    assert "try 4096;" in line  # upward: one more step, a whole number
    (line, *_) = _edge_advice([1e-6, 1e-5, 1e-4], [0.8, 0.5, 0.2])
    assert "try 1e-07;" in line  # log-spaced: one more ratio


def test_dagster_sweep_reports_asset_shows_each_groups_ranking(sweeps):
    import dagster as dg

    from pipeline.assets.reports import sweep_reports
    from pipeline.resources import GrpolensResource

    settings, specs = sweeps
    result = dg.materialize(
        [sweep_reports],
        resources={"grpolens": GrpolensResource(home=str(settings.home))},
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    (metadata,) = [m.event_specific_data.materialization.metadata for m in result.get_asset_materialization_events()]
    assert f"| 1 | {specs['lr-sweep'].truth['best']} |" in metadata["group lr-sweep"].value
    assert "nothing varies" in metadata["group flat"].value
    assert "group solo" not in metadata  # a group of one run is not a sweep
    assert (settings.reports_dir / "_sweeps" / "group_lr-sweep" / "sweep.md").is_file()


@pytest.mark.slow
def test_compare_real_runs_whose_varying_config_is_a_list(tmp_path):
    """The two vendored verl runs differ in list-valued config entries: their effect plots show the lists as text."""
    from tests.conftest import LENGTH_COLLAPSE, REAL_RUNS

    env = {"GRPOLENS_HOME": str(tmp_path / "home")}
    for path in (LENGTH_COLLAPSE, REAL_RUNS / "verl-opd-qwen2-3b-stable"):
        grpolens("report", str(path), "--format", "json", env=env, check=True)
    out = tmp_path / "compare"
    done = grpolens(
        "compare",
        "qwen2_3b_opd",
        "verl-opd-qwen2-3b-stable",
        "--out",
        str(out),
        "--format",
        "json",
        env=env,
        check=True,
    )
    doc = json.loads(done.stdout)
    listed = [e["param"] for e in doc["effects"][:4] if any(str(lv["value"]).startswith("[") for lv in e["levels"])]
    assert listed, "the fixture pair no longer varies a list-valued config entry among its first effects"
    safe = "".join(c if c.isalnum() else "_" for c in listed[0])[:60]
    assert (out / "curves.png").exists() and (out / f"effect_{safe}.png").exists()


# ------------------------------------------------------------------------------------------ trainer-log sweeps

TINKER_LRS = {1e-05: 0.45, 4e-05: 0.7, 1.6e-04: 0.55}  # learning rate -> where its reward levels off (a peak at 4e-05)


def _tinker_run(folder: Path, level: float, seed: int, config: dict | None) -> None:
    """A Tinker cookbook run folder: metrics.jsonl (its keys; `reward/g` a project's own, mapped onto nothing) and,
    unless ``config`` is None, the config.json ml_log writes beside it."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    with open(folder / "metrics.jsonl", "w") as fh:
        for step in range(40):
            reward = level - (level - 0.1) * math.exp(-step / 6) + rng.normal(0, 0.02)
            row = {"step": step, "env/all/reward/total": reward, "reward/g": reward / 2, "optim/lr": 1e-05}
            fh.write(json.dumps(row) + "\n")
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config, indent=2))


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """Runs described only by what their trainer wrote: six Tinker folders whose config.json varies the learning
    rate over two seeds (with what such configs also hold: chz's raw `X_` copies of each key, the run's own log path,
    the sampling service's URL), and three folders with no config at all."""
    root = tmp_path_factory.mktemp("logged")
    for i, (lr, level) in enumerate(sorted(TINKER_LRS.items()) * 2):
        name = f"tk-{i}"
        config = {
            "learning_rate": lr,
            "X_learning_rate": lr,
            "seed": i,
            "log_path": f"/tmp/tinker/{name}",
            "base_url": f"http://localhost:{8000 + i}",
            "dataset_builder": {"group_size": 8, "batch_size": 64},
        }
        _tinker_run(root / "logs" / name, level, i, config)
    for i in range(3):
        _tinker_run(root / "logs" / f"bare-{i}", 0.5, 10 + i, None)
    home = root / "home"
    grpolens("refresh", env={"GRPOLENS_HOME": str(home), "GRPOLENS_TRAINER_LOGS": str(root / "logs")}, check=True)
    return Settings(home=home)


def test_a_sweep_of_trainer_logs_compares_the_configs_saved_beside_them(logged):
    doc = run_sweep(logged, "sweep", "--prefix", "tk-")
    assert doc["metric"] == "reward_mean"
    # one parameter: not its X_ copy, the seed, the log path or the service URL
    assert [e["param"] for e in doc["effects"]] == ["learning_rate"]
    (lr,) = doc["effects"]
    assert lr["kind"] == "numeric" and lr["best_value"] == 4e-05 and lr["peak"] == 4e-05
    assert doc["runs"][0]["config"] == {"learning_rate": 4e-05}
    assert doc["suggested_config"] == {"learning_rate": 4e-05}


def test_runs_without_any_config_are_not_called_repeats(logged):
    """Nothing says how runs without a config differ: they are not "repeats of one configuration"."""
    proc = grpolens("sweep", "--prefix", "bare-", env={"GRPOLENS_HOME": str(logged.home)})
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "no config was found for name prefix bare-'s 3 runs" in proc.stderr and "repeats" not in proc.stderr
    assert "config.json or config.yaml saved beside it" in proc.stderr
    doc = run_sweep(logged, "compare", "bare-0", "bare-1", "bare-2")
    assert doc["note"].startswith("no config was found for these runs") and doc["effects"] == []
    assert not any("suggested config" in line for line in doc["recommendations"])  # there is none


@pytest.fixture(scope="module")
def namesakes(tmp_path_factory):
    """Three runs of one name: a trainer that writes `grpo_metrics.jsonl` into each run's folder, its config.json
    beside it (the layout of a public LoRA sweep QA ingested, whose six runs were all called after their log file;
    `train_metrics` is generic words: such a run is named after its folder)."""
    root = tmp_path_factory.mktemp("namesakes")
    for i, (lr, level) in enumerate(sorted(TINKER_LRS.items())):
        rng = np.random.default_rng(i)
        rewards = [level - (level - 0.1) * math.exp(-step / 6) + rng.normal(0, 0.02) for step in range(40)]
        folder = root / "logs" / f"lr-{lr:g}"
        write_jsonl(folder / "grpo_metrics.jsonl", [{"step": s, "mean_reward": r} for s, r in enumerate(rewards)])
        (folder / "config.json").write_text(json.dumps({"learning_rate": lr}))
    home = root / "home"
    grpolens("refresh", env={"GRPOLENS_HOME": str(home), "GRPOLENS_TRAINER_LOGS": str(root / "logs")}, check=True)
    con = warehouse.connect_readonly(Settings(home=home))
    try:
        ids = [i for (i,) in con.execute("select run_id from runs where name = 'grpo_metrics' order by 1").fetchall()]
    finally:
        con.close()
    assert len(ids) == 3
    return Settings(home=home), ids


def test_a_name_several_runs_share_is_refused_and_runs_that_share_one_are_told_apart(namesakes, tmp_path):
    """`compare grpo_metrics grpo_metrics` compared all the runs of that name, and every line, table row, plot
    label and legend entry called each of them grpo_metrics (the curves one line for all). A name is read as
    `grpolens report` reads it; runs that share one are named with their run ids, as `grpolens check` names them."""
    settings, ids = namesakes
    env = {"GRPOLENS_HOME": str(settings.home)}
    for args in (("grpo_metrics", "grpo_metrics"), ("grpo_metrics",), (ids[0], "grpo_metrics")):
        proc = grpolens("compare", *args, env=env)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert "'grpo_metrics' names 3 runs; use one of: trainer_log:" in proc.stderr
    proc = grpolens("compare", ids[0], ids[0], env=env)  # two or more runs, after reading each
    assert proc.returncode == 1 and f"only one run to compare (grpo_metrics [{ids[0]}])" in proc.stderr
    assert f"`grpolens report {ids[0]}`" in proc.stderr  # what report reads: not the label
    labels = [f"grpo_metrics [{i}]" for i in ids]
    doc = run_sweep(settings, "compare", *ids, "--out", str(tmp_path / "compare"))
    assert sorted(r["run"] for r in doc["runs"]) == labels
    assert sorted(p["run"] for p in doc["power_law"]) == labels and set(doc["pareto"]) <= set(labels)
    text = Path(doc["files"]["markdown"]).read_text()
    assert f"**Winner: {doc['runs'][0]['run']}**" in text and all(f"| {label} |" in text for label in labels)
    # the overlaid curves: a line, and a legend entry, in each run's colour (one for all three before)
    from pipeline.report.plots import _colours

    image = plt_image(tmp_path / "compare" / "curves.png")
    for colour in _colours(3):
        assert (np.abs(image - np.asarray(colour[:3])).max(axis=2) < 0.02).sum() > 200, colour
    swept = run_sweep(settings, "sweep", "--prefix", "grpo")
    assert sorted(r["run"] for r in swept["runs"]) == labels and swept["runs"][0]["config"] == {"learning_rate": 4e-05}


def test_a_winner_no_interval_reaches_is_tied_with_nobody(namesakes):
    """The ranking table marked the winner's row "tied: yes" while the text said no other run's interval reached it:
    the leader counted as tied with itself."""
    settings, ids = namesakes
    doc = run_sweep(settings, "compare", *ids)
    assert [r["tied_with_best"] for r in doc["runs"]] == [False, False, False]
    text = Path(doc["files"]["markdown"]).read_text()
    assert "no other run's interval reaches it." in text and "| yes |" not in text
    assert "| yes |" not in sweep_report.ranking_table(doc)  # the Dagster asset's table
    assert not any(r.startswith("Repeat the tied leaders") for r in doc["recommendations"])


def test_runs_whose_rewards_add_up_different_functions_get_no_winner_on_the_reward(tmp_path):
    """A public TRL sweep: one run adds a language-consistency reward that is 1 on nearly every step, so its total
    reward is ~1 + correctness and it was named the decisive winner, on correctness the three are tied. Runs whose
    reward functions differ are not ranked on the reward; the advice (map a function they share onto task_score)
    works; runs with one set of functions are ranked as before, whatever the reward_components mart leaves out."""
    logs = tmp_path / "logs"
    for name, language, extra in (("xl-a", "vi", False), ("xl-b", "en", False), ("xl-c", "en", True)):
        rng = np.random.default_rng(len(name) + ord(name[-1]))
        rows = []
        for step in range(1, 41):
            row = {"step": step, "rewards/r1_correctness": float(np.clip(rng.normal(0.3, 0.05), 0, 1))}
            # xl-a's format reward never fires: its correctness is its total, which the mart then drops as such
            row["rewards/r2_format"] = 0.0 if name == "xl-a" else float(rng.uniform(0, 0.05))
            if extra:
                row["rewards/r5_lang_consistency"] = 1.0
            row["reward"] = sum(v for k, v in row.items() if k.startswith("rewards/"))
            rows.append(row)
        write_jsonl(logs / name / "metrics.jsonl", rows)
        (logs / name / "config.json").write_text(json.dumps({"train_language": language}))
    home = tmp_path / "home"
    env = {"GRPOLENS_HOME": str(home)}
    grpolens("refresh", env={**env, "GRPOLENS_TRAINER_LOGS": str(logs)}, check=True)
    proc = grpolens("sweep", "--prefix", "xl-", env=env)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "rewards add up different reward functions (r5_lang_consistency only in xl-c)" in proc.stderr
    assert "(`aliases: {rewards/r1_correctness: task_score}`) and refresh" in proc.stderr
    named = run_sweep(Settings(home=home), "sweep", "--prefix", "xl-", "--metric", "reward_mean")
    assert named["runs"][0]["run"] == "xl-c" and "r5_lang_consistency only in xl-c" in named["note"]
    same = run_sweep(Settings(home=home), "compare", "xl-a", "xl-b")  # one set of functions: one quantity
    assert same["metric"] == "reward_mean" and "note" not in same
    (home / "grpolens.yaml").write_text("aliases: {rewards/r1_correctness: task_score}\n")  # the advice, followed
    grpolens("build", env=env, check=True)
    doc = run_sweep(Settings(home=home), "sweep", "--prefix", "xl-")
    assert doc["metric"] == "task_score" and all(r["tied_with_best"] for r in doc["runs"])


def plt_image(path: Path) -> np.ndarray:
    """A PNG's pixels as RGB floats in [0, 1]."""
    import matplotlib.pyplot as plt

    return plt.imread(path)[..., :3]


def test_a_logged_key_no_alias_maps_is_said_to_be_logged_and_how_to_map_it(logged, tmp_path):
    """`--metric reward/g` named a key every run logs, and was told it is not logged."""
    runs = ["tk-0", "tk-1", "tk-2"]
    proc = grpolens("compare", *runs, "--metric", "reward/g", env={"GRPOLENS_HOME": str(logged.home)})
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "'reward/g' is logged by 3 of these runs but is no canonical metric" in proc.stderr
    assert "aliases: {reward/g: task_score}" in proc.stderr and "not logged" not in proc.stderr
    home = tmp_path / "home"  # the advice, followed, works
    shutil.copytree(logged.home, home)
    (home / "grpolens.yaml").write_text("aliases: {reward/g: task_score}\n")
    grpolens("build", env={"GRPOLENS_HOME": str(home)}, check=True)
    doc = run_sweep(Settings(home=home), "compare", *runs, "--metric", "reward/g")
    assert doc["metric"] == "task_score" and doc["runs"][0]["run"] == "tk-1"


def test_one_setting_written_twice_is_one_parameter():
    """chz writes `X_reward_type` beside `reward_type`, W&B configs repeat `args.lr` as `lr`: the same values under a
    longer name are not a second parameter "confounded" with the first. Two settings that merely took the same
    values (train and eval batch sizes) stay two."""
    configs = {
        "a": {"reward_type": "g", "X_reward_type": "g", "args.lr": 1e-5, "lr": 1e-5, "train_bs": 8, "eval_bs": 8},
        "b": {"reward_type": "f", "X_reward_type": "f", "args.lr": 2e-5, "lr": 2e-5, "train_bs": 16, "eval_bs": 16},
        "c": {"reward_type": "f", "X_reward_type": "g", "args.lr": 3e-5, "lr": 3e-5, "train_bs": 8, "eval_bs": 8},
    }
    assert set(sweep_stats.varying(configs)) == {"reward_type", "X_reward_type", "lr", "train_bs", "eval_bs"}


def _diagnosed(runs: list[dict], rates: dict | None = None, penalties: dict | None = None) -> tuple[dict, list[str]]:
    """good_bad_ugly and the recommendations for ranked runs given as {run, flags, errors} (no effects)."""
    doc = {
        "metric": "reward_mean",
        "effects": [],
        "runs": [
            {"score": 0.5, "ci": [0.4, 0.6], "tied_with_best": i == 0, "config": {}, "state": "finished", **r}
            for i, r in enumerate(runs)
        ],
    }
    doc["good_bad_ugly"] = sweep_report.good_bad_ugly(doc)
    return doc["good_bad_ugly"], sweep_report.recommendations(doc, [], rates, penalties)[0]


def test_a_run_that_collapsed_is_not_too_conservative():
    """The rho sweep's collapsed runs (reward to 0, entropy collapsed) were filed as "too conservative" for the
    vanishing gradients and flat reward that followed their collapse, and the advice was to raise the learning rate."""
    vanished = ["grad_norm_vanishing", "reward_plateau"]
    timid = {"run": "timid", "flags": vanished, "errors": []}
    runs = [
        timid,
        {"run": "collapsed", "flags": [*vanished, "reward_collapse"], "errors": ["reward_collapse"]},
        {"run": "no-entropy", "flags": ["entropy_collapse", "grad_norm_vanishing"], "errors": ["entropy_collapse"]},
        {"run": "cut", "flags": ["grad_norm_vanishing", "response_truncation"], "errors": ["response_truncation"]},
    ]
    gbu, advice = _diagnosed(runs)
    (conservative,) = [line for line in gbu["bad"] if line.startswith("too conservative")]
    assert conservative == "too conservative (the policy barely moves): timid (grad_norm_vanishing; reward_plateau)"
    assert any(line.startswith("instability and collapse: collapsed") for line in gbu["ugly"])
    (line,) = [a for a in advice if a.startswith("For the runs flagged too conservative")]
    assert "lower the KL penalty rather than raise the learning rate" in line
    assert "collapsed, no-entropy collapsed or went unstable" in line and "cut" not in line.split(":", 1)[1]
    # at known learning rates: raise it, below the one that broke down; or not at all if it broke down there
    _, advice = _diagnosed(runs, {"timid": 1e-6, "collapsed": 1e-5, "no-entropy": 3e-5, "cut": 1e-6})
    assert "raise the learning rate, staying below 1e-05 where collapsed, no-entropy" in " ".join(advice)
    _, advice = _diagnosed(runs, {"timid": 1e-5, "collapsed": 1e-5, "no-entropy": 3e-5, "cut": 1e-6})
    assert "collapsed or went unstable at 1e-05, a learning rate they already use" in " ".join(advice)
    _, advice = _diagnosed([timid, {"run": "fine", "flags": [], "errors": []}])
    assert "For the runs flagged too conservative: raise the learning rate or lower the KL penalty" in advice
    # each run's learning rate, as the sweep reads it from the config: the policy's, whatever the trainer calls it
    verl = {"actor_rollout_ref.actor.optim.lr": 1e-06, "critic.optim.lr": 1e-05}
    assert sweep_stats.learning_rate(verl) == 1e-06 and sweep_stats.learning_rate({"lr": "auto"}) is None
    assert sweep_stats.learning_rate({"X_learning_rate": 2e-05, "learning_rate": 2e-05, "lr_warmup": 10}) == 2e-05


def test_no_advice_to_lower_a_kl_penalty_the_runs_do_not_have():
    """A CS336 sweep trained with kl_coef 0 was told to "lower the KL penalty rather than raise the learning rate"
    for its timid run: the advice names only what the configs leave to change."""
    timid = {"run": "timid", "flags": ["grad_norm_vanishing"], "errors": []}
    broken = {"run": "broken", "flags": ["reward_collapse"], "errors": ["reward_collapse"]}
    none = {"timid": 0.0, "broken": 0.0}
    _, advice = _diagnosed([timid, {"run": "fine", "flags": [], "errors": []}], penalties={"timid": 0.0})
    assert "For the runs flagged too conservative: raise the learning rate" in advice
    (line,) = [a for a in _diagnosed([timid, broken], penalties=none)[1] if "too conservative" in a]
    assert "KL penalty is already 0" in line and "lower the KL penalty" not in line
    (line,) = [a for a in _diagnosed([timid, broken], {"timid": 1e-6, "broken": 1e-5}, none)[1] if "conservative" in a]
    assert line.endswith("staying below 1e-05 where broken collapsed or went unstable")
    (line,) = [a for a in _diagnosed([timid, broken], {"timid": 1e-5, "broken": 1e-5}, none)[1] if "conservative" in a]
    assert "nor the KL penalty (already 0)" in line and "lower the KL penalty" not in line
    assert sweep_stats.kl_penalty({"trainer.kl_coef": 0.0, "adam_beta1": 0.9}) == 0.0
    assert sweep_stats.kl_penalty({"beta": 0.04}) == 0.04 and sweep_stats.kl_penalty({"lr": 1e-5}) is None


def test_the_suggested_config_is_pointed_to_only_when_there_is_one():
    """ "Start the next sweep from X's configuration (the suggested config below)" with nothing below it."""
    _, advice = _diagnosed([{"run": "a", "flags": [], "errors": []}, {"run": "b", "flags": [], "errors": []}])
    assert "Start the next sweep from a's configuration" in advice
    effect = {
        "param": "p",
        "kind": "categorical",
        "spearman": None,
        "significant": False,
        "confounded_with": [],
        "levels": [],
        "best_value": "x",
        "peak": None,
        "spread": 0.0,
    }
    assert "Start the next sweep from a's configuration (the suggested config below)" in _advice(effect)
    # every run tied with the leader and no effect to follow: no configuration is the one to start from
    doc = {"runs": [{"run": run, "config": {}, "tied_with_best": True} for run in "abc"]}
    doc["good_bad_ugly"] = {"bad": [], "ugly": []}
    advice = sweep_report.recommendations(doc, [])[0]
    assert advice[0].startswith("Repeat the tied leaders (a, b, c)") and not any("Start the next" in a for a in advice)


# ------------------------------------------------------------------------------------------ the score's interval


def _simulated(folder: Path, level: float, steps: int, phi: float, seed: int) -> None:
    """A run whose reward rises from 0.1 to ``level`` (settled long before its tail) under AR(1) noise of sd 0.05."""
    rng = np.random.default_rng(seed)
    noise = np.empty(steps)
    noise[0] = rng.normal(0, 0.05)
    for i in range(1, steps):
        noise[i] = phi * noise[i - 1] + rng.normal(0, 0.05 * math.sqrt(1 - phi * phi))
    curve = level - (level - 0.1) * np.exp(-np.arange(steps) / 8)
    folder.mkdir(parents=True)
    lines = [json.dumps({"step": s, "env/all/reward/total": float(v)}) for s, v in enumerate(curve + noise)]
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_the_score_interval_covers_the_true_level_and_is_not_absurd(tmp_path):
    """Runs whose level is known: 300 of 40 points with independent noise and 300 of 60 points with AR(1) noise
    (r1 = 0.5), 5 and 6 tail points. With r1 estimated from those few tail points, the second kind's intervals held
    their level 84% of the time (r1 too low), and one in ten of the first kind's, given df = 1 (t = 12.7) by a
    chance r1, were over 5 noise sds wide. (Both kinds of run hold the level 95-97% of the time over 2,000 seeds.)"""
    logs = tmp_path / "logs"
    for i in range(300):
        _simulated(logs / f"iid-{i}", 0.5, 40, 0.0, i)
        _simulated(logs / f"ar-{i}", 0.6, 60, 0.5, 1000 + i)
    home = tmp_path / "home"
    grpolens("refresh", env={"GRPOLENS_HOME": str(home), "GRPOLENS_TRAINER_LOGS": str(logs)}, check=True)
    con = warehouse.connect_readonly(Settings(home=home))
    try:
        rows = con.execute(
            "select split_part(r.name, '-', 1), t.tail_points, t.tail_ci_low, t.tail_ci_high "
            "from int_metric__tails as t join runs as r using (run_key) where t.metric = 'reward_mean'"
        ).fetchall()
    finally:
        con.close()
    for kind, level, tail, widest in (("iid", 0.5, 5, 8), ("ar", 0.6, 6, 15)):
        got = [(low, high) for k, points, low, high in rows if k == kind and points == tail]
        assert len(got) == 300
        covered = sum(low <= level <= high for low, high in got) / len(got)
        widths = np.array([high - low for low, high in got]) / 0.05  # in noise sds
        assert 0.92 <= covered <= 0.99, (kind, covered)
        assert np.percentile(widths, 95) < widest, (kind, np.percentile(widths, 95))
