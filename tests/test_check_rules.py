"""Every anomaly rule in sql/checks against ground truth.

- The demo (pipeline.demo.runs, written by the real wandb library) injects known problems into noisy runs next to
  healthy twins: each rule with a labelled case must fire on it near the labelled onset, and no rule may flag a
  healthy run at all. The scores over the whole suite (pipeline.evaluation.check_eval) must stay at precision and
  recall >= 0.9.
- The real W&B run whose responses collapse (SOURCE.txt: steps ~31-41) must be flagged for that, and for nothing
  at warn/error level that its SOURCE.txt does not describe.
- Rules without a demo case get a tiny targeted run with the problem, written with wandb offline like a trainer
  would (or, for a repeated step, a JSONL metric log as a trainer appends it).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline import checks, warehouse
from pipeline.demo.runs import write_demo_runs
from pipeline.evaluation import check_eval
from pipeline.ingest import ingest
from pipeline.settings import SQL_DIR, Settings
from pipeline.sources import trainer_logs, wandb_offline
from tests.conftest import REAL_RUNS, write_jsonl
from tests.wandb_writer import write_run

# DESIGN.md "Check names": one sql/checks/<name>.sql each.
DESIGN_CHECKS = {
    "kl_spike",
    "kl_drift",
    "grad_norm_spike",
    "grad_norm_vanishing",
    "loss_nonfinite",
    "entropy_collapse",
    "response_length_collapse",
    "response_length_growth",
    "response_truncation",
    "reward_zero_variance",
    "reward_plateau",
    "reward_collapse",
    "reward_hacking",
    "reward_component_dead",
    "reward_component_dominant",
    "too_conservative",
    "clip_fraction_high",
    "extraction_rate_low",
    "extraction_empty_high",
    "rollout_p95_slow",
    "rollout_failures",
    "error_rate_high",
    "phase_bottleneck",
    "checkpoint_save_slow",
    "throughput_drop",
    "cache_hit_low",
    "elo_base_model_not_declining",
    "elo_gap_shrinking",
    "duplicate_steps",
    "stale_heartbeat",
}

HEALTHY = ("league-main", "sweep-lr-kl-1", "sweep-lr-kl-2", "trl-gsm8k-healthy", "verl-healthy")
# (check, demo run) for every labelled problem in the demo (seed 7): kept in step with labels.json by a test below.
LABELLED = [
    ("reward_plateau", "league-stalled"),
    ("elo_base_model_not_declining", "league-stalled"),
    ("too_conservative", "sweep-lr-kl-0"),
    ("reward_plateau", "sweep-lr-kl-0"),
    ("reward_plateau", "sweep-lr-kl-3"),
    ("kl_drift", "sweep-lr-kl-3"),
    ("clip_fraction_high", "sweep-lr-kl-3"),
    ("extraction_rate_low", "sweep-lr-kl-3"),
    ("entropy_collapse", "trl-entropy-collapse"),
    ("reward_hacking", "trl-reward-hacking"),
    ("reward_component_dominant", "trl-reward-hacking"),
    ("reward_zero_variance", "trl-zero-variance"),
    ("response_length_growth", "verl-kl-blowup"),
    ("response_truncation", "verl-kl-blowup"),
    ("kl_drift", "verl-kl-blowup"),
    ("kl_spike", "verl-kl-blowup"),
    ("grad_norm_spike", "verl-kl-blowup"),
    ("response_length_collapse", "verl-length-collapse"),
    ("grad_norm_spike", "verl-length-collapse"),
    ("reward_collapse", "verl-length-collapse"),
    ("reward_plateau", "verl-plateau"),
]
# How late (W&B steps after the labelled onset) a flag may start; trend and window rules need evidence first.
LATE = {
    "kl_drift": 50,
    "reward_plateau": 30,
    "too_conservative": 35,
    "reward_hacking": 25,
    "elo_base_model_not_declining": 60,
    # judged over the whole run, reported where the shaping term passed half its gain (a slow saturation here)
    "reward_component_dominant": 80,
}
# A rise that stops and then drifts down within the noise: flat enough to flag on about half of the demo seeds only.
WEAK = {("reward_plateau", "sweep-lr-kl-3")}


def _flags(outcomes: dict, check: str, run_key: str) -> list[dict]:
    return [row for row in outcomes[check].rows if row["run_key"] == run_key]


# --------------------------------------------------------------------------- the demo suite


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    home = tmp_path_factory.mktemp("demo-home")
    out = home / "demo_runs"
    write_demo_runs(out, seed=7, scale=1.0)
    settings = Settings(home=home, wandb_dirs=(out,))
    ingest(settings)
    warehouse.build(settings)
    labels = json.loads((out / "labels.json").read_text())
    con = warehouse.connect_readonly(settings)
    rules = checks.load_checks()
    found = checks.run_checks(con, rules)
    keys = dict(con.sql("select name, run_key from runs").fetchall())
    yield SimpleNamespace(
        con=con,
        rules=rules,
        found=found,
        outcomes={o.check.name: o for o in found},
        labels=labels,
        keys=keys,
    )
    con.close()


def test_one_file_per_design_check_and_each_parses_and_runs(demo):
    files = sorted((SQL_DIR / "checks").glob("*.sql"))
    assert {f.stem for f in files} == DESIGN_CHECKS
    for path in files:
        rule = checks.parse_check(path)
        assert rule.name == path.stem and rule.description and rule.reads, path.name
        unused = [name for name in rule.params if not re.search(rf"\${name}\b", rule.sql)]
        assert not unused, f"{path.name}: declared parameters {unused} are never used"
    for outcome in demo.found:
        assert outcome.error is None, f"{outcome.check.name}: {outcome.error}"
        for row in outcome.rows:
            assert row["severity"] in checks.SEVERITIES and row["step"] is not None and row["message"], row
            assert row["step_end"] is None or row["step_end"] >= row["step"], row


def test_the_labelled_cases_are_the_demo_labels(demo):
    got = sorted((p["check"], run["name"]) for run in demo.labels for p in run["problems"])
    assert got == sorted(LABELLED)


# A labelled case the rule is known to catch on only about half of the seeds (a rise, then a slow decline
# within the reward noise): it is not asserted one by one; it counts in the suite's recall below.
DETECTED = [case for case in LABELLED if case not in WEAK]


@pytest.mark.parametrize("check,run", DETECTED, ids=[f"{c}-{r}" for c, r in DETECTED])
def test_fires_on_its_labelled_case_near_the_onset(demo, check, run):
    (problem,) = [p for r in demo.labels if r["name"] == run for p in r["problems"] if p["check"] == check]
    run_key = demo.keys[run]
    onset = problem["onset_step"]  # the trainer's step, as the flags (trainer_steps)
    steps = [row["step"] for row in _flags(demo.outcomes, check, run_key)]
    late = LATE.get(check, 15)
    assert any(onset - check_eval.TOLERANCE <= s <= onset + late for s in steps), (onset, steps)


@pytest.mark.parametrize("run", HEALTHY)
def test_no_rule_flags_a_healthy_run(demo, run):
    run_key = demo.keys[run]
    flagged = [
        (o.check.name, row["step"], row["message"]) for o in demo.found for row in o.rows if row["run_key"] == run_key
    ]
    assert flagged == []


def test_trl_runs_are_on_the_trainer_step(demo):
    """TRL's eval rows are separate W&B rows, so W&B's _step runs ahead of train/global_step: metrics (and every
    flag) are on train/global_step, as W&B's own charts of a TRL run; verl logs with step=, which stays."""
    con = demo.con
    trl = demo.keys["trl-entropy-collapse"]
    counter = con.execute(
        "select list(distinct value::bigint order by value::bigint), max(step) from history "
        "where run_key = ? and key = 'train/global_step'",
        [trl],
    ).fetchone()
    steps = con.execute("select list(distinct step order by step) from metrics where run_key = ?", [trl]).fetchone()
    assert steps[0] == counter[0] and counter[1] > max(counter[0])  # every trainer step, and only those
    assert con.execute("select last_step from runs where run_key = ?", [trl]).fetchone()[0] == max(counter[0])
    verl = demo.keys["verl-healthy"]
    logged = con.execute(
        "select list(distinct step order by step) from history where run_key = $run "
        "and key in (select source_key from metrics where run_key = $run)",
        {"run": verl},
    ).fetchone()
    on_metrics = con.execute("select list(distinct step order by step) from metrics where run_key = ?", [verl])
    assert on_metrics.fetchone() == logged


def test_precision_and_recall_over_the_suite(demo):
    results = check_eval.evaluate(demo.con, demo.labels, demo.found)
    total = results[-1]
    assert total["check"] == "TOTAL" and total["error"] is None
    assert total["precision"] >= 0.95 and total["recall"] >= 0.95, check_eval.format_table(results)
    table = check_eval.format_table(results)
    assert "reward_plateau" in table and "TOTAL" in table


# --------------------------------------------------------------------------- the real length-collapse run


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    settings = Settings(home=tmp_path_factory.mktemp("real-home"))
    wandb_offline.ingest(settings.lake, [REAL_RUNS])
    warehouse.build(settings)
    con = warehouse.connect_readonly(settings)
    try:
        (run_key,) = con.sql("select run_key from runs where run_id = 'gjvwlq13'").fetchone()
        yield run_key, checks.run_checks(con, checks.load_checks())
    finally:
        con.close()


def test_real_collapse_is_flagged_where_its_source_says(real):
    run_key, found = real
    rows = {(o.check.name): [r for r in o.rows if r["run_key"] == run_key] for o in found}
    assert not [o.error for o in found if o.error]
    for check in ("response_length_collapse", "grad_norm_spike"):
        assert any(31 <= r["step"] <= 41 for r in rows[check]), (check, rows[check])
    (collapse,) = rows["response_length_collapse"]
    assert collapse["severity"] == "error" and collapse["value"] < 15 and collapse["step_end"] is None


def test_real_collapse_has_no_unsupported_alarm(real):
    """SOURCE.txt: length 578 -> 12, grad norm 0.9 -> 13.7, reward_kl_penalty 0.56 -> ~2.0 and score -> ~-0.9, all
    within steps ~31-41; entropy rises. Nothing else is wrong with the run, so nothing else may warn."""
    run_key, found = real
    supported = {"response_length_collapse", "grad_norm_spike", "kl_spike", "kl_drift", "reward_collapse"}
    alarms = [
        (o.check.name, r["step"]) for o in found for r in o.rows if r["run_key"] == run_key and r["severity"] != "info"
    ]
    assert alarms and {c for c, _ in alarms} <= supported, alarms
    assert all(28 <= step <= 41 for _, step in alarms), alarms
    # the copy has no exit record and was last written long ago: a finished story, not an outage
    info = [r for o in found for r in o.rows if r["run_key"] == run_key and r["severity"] == "info"]
    assert [r["check_name"] for r in info] == ["stale_heartbeat"]


@pytest.fixture(scope="module")
def real_trainer_logs(tmp_path_factory):
    """The real runs that only have trainer logs: the Unsloth trainer_state.json and the healthy verl console log."""
    settings = Settings(home=tmp_path_factory.mktemp("real-logs-home"))
    trainer_logs.ingest(
        settings.lake, [REAL_RUNS / "unsloth-llama31-8b-grpo-gsm8k", REAL_RUNS / "verl-opd-qwen2-3b-stable"]
    )
    warehouse.build(settings)
    con = warehouse.connect_readonly(settings)
    try:
        names = dict(con.sql("select run_key, name from runs").fetchall())
        yield names, checks.run_checks(con, checks.load_checks())
    finally:
        con.close()


def test_real_trainer_log_runs_get_only_the_alarms_their_sources_support(real_trainer_logs):
    """verl stable is the healthy control: no alarm at all. Unsloth (SOURCE.txt): the isolated KL spike with its
    grad-norm jump at step 206, format rewards that stay 0 the whole run, many zero-variance groups, and truncation:
    max_completion_length is 200 and the mean completion_length sits exactly on 200 (all 6 samples cut) on 13
    steps, so at least 78 of 1,500 samples (5.2%) were cut: the reference's warning line."""
    names, found = real_trainer_logs
    assert not [o.error for o in found if o.error]
    alarms = {(names[r["run_key"]], o.check.name, r["step"]) for o in found for r in o.rows if r["severity"] != "info"}
    assert not [a for a in alarms if a[0] == "verl-opd-qwen2-3b-stable"], alarms
    unsloth = {(check, step) for name, check, step in alarms if name.startswith("unsloth")}
    assert {("kl_spike", 206), ("grad_norm_spike", 206)} <= unsloth
    assert {check for check, _ in unsloth} <= {
        "kl_spike",
        "grad_norm_spike",
        "reward_component_dead",
        "reward_zero_variance",
        "response_truncation",
    }, unsloth


# --------------------------------------------------------------------------- targeted runs for the other rules


def _length_run(root: Path, name: str, lengths: list[float], rewards: list[float]) -> None:
    """A TRL run (W&B, on train/global_step) logging only its reward and mean completion length."""
    write_run(
        root,
        [
            {"train/reward": r, "train/completions/mean_length": n, "train/global_step": i + 1}
            for i, (n, r) in enumerate(zip(lengths, rewards, strict=True))
        ],
        run_id=f"{name[:6]}{len(lengths):02d}"[:8],
        name=name,
    )


def _reward_dip_run(root: Path, name: str, run_id: str, steps: int, dip: range) -> None:
    """A TRL run whose noisy reward around 0.5 drops to ~0.22 on the ``dip`` steps and comes back."""
    write_run(
        root,
        [
            {"train/reward": (0.22 if i in dip else 0.5) + 0.04 * math.sin(1.7 * i), "train/global_step": i + 1}
            for i in range(steps)
        ],
        run_id=run_id,
        name=name,
    )


def _tiny_runs(root: Path, logs: Path) -> None:
    quiet = {"train/reward": 0.5, "train/kl": 0.02}
    # a 40-point log (TRL's dicts, logging_steps apart): three good points, then the reward falls to 0 and stays
    write_run(
        root,
        [{**quiet, "train/reward": [0.9, 0.75, 0.95][i] if i < 3 else 0.02 * (i % 2)} for i in range(40)],
        run_id="earlyfal",
        name="earlyfall",
    )
    # entropy: falls from ~0.4 to ~0.015 within the first 4% of a 600-step run (the first tenth is mostly collapsed)
    write_run(
        root,
        [{**quiet, "train/entropy": 0.015 + 0.4 * 0.8**i * (1 + 0.05 * math.sin(i))} for i in range(600)],
        run_id="entearly",
        name="entearly",
    )
    # entropy: noisy around 0.05 on a long run, with one five-step dip that recovers at once (a dip, not a collapse)
    write_run(
        root,
        [
            {**quiet, "train/entropy": 0.0004 if 700 <= i < 705 else 0.05 * (1 + 0.3 * math.sin(1.7 * i))}
            for i in range(1000)
        ],
        run_id="entdip01",
        name="entdip",
    )
    # entropy: from 0.17 down to the bar (a quarter of it) at step 100, then hovering across it (0.040/0.044)
    write_run(
        root,
        [
            {**quiet, "train/entropy": 0.17 - 0.00127 * i if i < 100 else (0.040 if i % 2 else 0.044)}
            for i in range(200)
        ],
        run_id="enthover",
        name="enthover",
    )
    # grad norm vanishes from step 15
    write_run(
        root,
        [
            {
                **quiet,
                "train/loss": 0.01,
                "train/grad_norm": 0.3 * (1 + 0.1 * math.sin(i)) if i < 15 else 1e-6 * (1 + 0.1 * math.sin(i)),
            }
            for i in range(40)
        ],
        run_id="vanish01",
        name="vanish",
    )
    # every reward group tied on steps 15-24 (reward_std 0): no advantage, so no gradient; a reward signal elsewhere
    write_run(
        root,
        [
            {
                **quiet,
                "train/reward_std": 0.0 if 15 <= i < 25 else 0.3,
                "train/grad_norm": 0.0 if 15 <= i < 25 else 0.3 * (1 + 0.1 * math.sin(i)),
            }
            for i in range(40)
        ],
        run_id="tiedzero",
        name="tiedzero",
    )
    # loss NaN at steps 12-14, inf at 20
    losses = [
        float("nan") if 12 <= i <= 14 else float("inf") if i == 20 else 0.01 * (1 + 0.1 * math.sin(i))
        for i in range(30)
    ]
    write_run(
        root, [{**quiet, "train/loss": x, "train/grad_norm": 0.3} for x in losses], run_id="nanloss1", name="nanloss"
    )
    # printed Trainer dicts whose gradient norm is not finite while the loss is: NaN on 12 in a row (lines 11-22, a
    # broken update); an fp16 loss scaler's overflows (6 in a row at the start as the scale comes down, then one or
    # two at a time); NaN on two of every three lines, never 10 in a row; and NaN loss and gradient together
    nan, inf = math.nan, math.inf
    for name, grads, losses in (
        ("nangrads", [nan if 10 <= i < 22 else 0.3 for i in range(40)], [0.01] * 40),
        ("fp16grads", [inf if i < 6 or i in (37, 80, 81, 150) else 0.3 for i in range(200)], [0.01] * 200),
        ("mostlynan", [0.3 if i % 3 == 0 else nan for i in range(30)], [-0.0] * 30),
        (
            "nanboth",
            [nan if 10 <= i < 25 else 0.3 for i in range(30)],
            [nan if 10 <= i < 25 else 0.01 for i in range(30)],
        ),
    ):
        (logs.parent / name).mkdir(parents=True)
        (logs.parent / name / "train.log").write_text(
            "".join(
                f"{{'loss': {loss!r}, 'grad_norm': {grad!r}, 'reward': 0.5, 'epoch': {0.01 * (i + 1):.2f}}}\n"
                for i, (grad, loss) in enumerate(zip(grads, losses, strict=True))
            )
        )
    # Diplomacy trainer: slow rollouts from 20, failures at 25-27, empty responses and a cold cache from 20
    rows = []
    for i in range(40):
        late = i >= 20
        rows.append(
            (
                {
                    "benchmark/reward_mean": 0.3,
                    "benchmark/kl": 0.02,
                    "benchmark/trajectories": 64,
                    "benchmark/rollout_time_s": 70.0 + (i % 3),
                    "benchmark/training_time_s": 40.0,
                    "rollout/max_total_s": (160.0 if late else 80.0) + (i % 5),
                    "rollout/failed_count": 3 if 25 <= i <= 27 else 0,
                    "extraction/orders_expected": 600,
                    "extraction/orders_extracted": 590,
                    "extraction/empty_responses": 60 if late else 3,
                    "cache/hit_rate": 0.1 + 0.01 * (i % 3) if late else 0.7,
                },
                {"step": i},
            )
        )
    write_run(
        root,
        rows,
        run_id="rollout1",
        name="rollouts",
        project="diplomacy-grpo",
        config={"samples_per_group": 8, "num_groups_per_step": 8},
    )
    # verl timing: steps get twice as slow from 31 (generation dominates), a 40 s save every 4 steps
    rows = []
    for step in range(1, 61):
        total = (60.0 if step <= 30 else 130.0) + (step % 3)
        timing = {
            "timing_s/step": total,
            "timing_s/gen": total - 30.0,
            "timing_s/update_actor": 20.0,
            "timing_s/ref": 8.0,
        }
        if step % 4 == 0:
            timing["timing_s/save_checkpoint"] = 40.0
        rows.append(({"critic/score/mean": 0.5, "actor/kl_loss": 0.01, **timing}, {"step": step}))
    write_run(root, rows, run_id="timing01", name="timing", project="verl-grpo")
    # verl timing at a constant 60 s a step: from step 21 the actor update takes 42 s of it (70%), generation 10 s
    rows = []
    for step in range(1, 41):
        late = step >= 21
        timing = {
            "timing_s/step": 60.0,
            "timing_s/gen": 10.0 if late else 25.0,
            "timing_s/update_actor": 42.0 if late else 20.0,
            "timing_s/ref": 5.0 if late else 12.0,
        }
        rows.append(({"critic/score/mean": 0.5, "actor/kl_loss": 0.01, **timing}, {"step": step}))
    write_run(root, rows, run_id="actorbnd", name="actorbound", project="verl-grpo")
    # TRL: the format reward never fires (deadcomp), or gives every completion 1.0 (constcomp: a checker that
    # accepts anything)
    for run_id, name, format_reward in (("deadcomp", "deadcomp", 0.0), ("constcmp", "constcomp", 1.0)):
        write_run(
            root,
            [
                {
                    "train/reward": 0.3 + format_reward + 0.01 * i,
                    "train/rewards/accuracy_reward/mean": 0.3 + 0.01 * i,
                    "train/rewards/format_reward/mean": format_reward,
                    "train/global_step": i + 1,
                }
                for i in range(30)
            ],
            run_id=run_id,
            name=name,
        )
    # TRL with a learning rate far too high: KL is 0 at the first step (policy = reference), 3.8 by the third, and
    # stays at 4-5 over 200 steps (no trend to detect, and the blow-up is inside the first twentieth of the run)
    write_run(
        root,
        [
            {
                "train/reward": 0.5,
                "train/kl": (0.0, 0.17, 3.8)[i] if i < 3 else 4.5 + 0.3 * math.sin(i),
                "train/global_step": i + 1,
            }
            for i in range(200)
        ],
        run_id="klearly1",
        name="klearly",
    )
    # KL 0.01 -> 0.16 over 500 steps, +-25% noise: 3% more a 20-step window, so no window shows a drift; over the
    # run it is 16x, past the warning line (0.1); it is reported where it left twice its level after the warm-up
    # (~0.033 over steps 51-100), near step 185
    write_run(
        root,
        [
            {
                "train/reward": 0.5 + 0.01 * math.sin(i),
                "train/kl": (0.01 + 0.15 * i / 500) * (1 + 0.25 * math.sin(2.7 * i)),
                "train/global_step": i + 1,
            }
            for i in range(500)
        ],
        run_id="klslow01",
        name="klslow",
    )
    # KL at 0.05 for 60 steps that jumps to 0.5 within four (61-64) and holds; and one that climbs steadily from
    # 0.02 to 0.4 over 100 steps: both drift, and the message says where the middle half of each climb happened
    write_run(
        root,
        [
            {"train/reward": 0.5, "train/kl": (0.05 + 0.45 * min(1, max(0, i - 59) / 4)) * (1 + 0.05 * math.sin(i))}
            for i in range(100)
        ],
        run_id="kljump01",
        name="kljump",
    )
    write_run(
        root,
        [{"train/reward": 0.5, "train/kl": (0.02 + 0.38 * i / 99) * (1 + 0.05 * math.sin(i))} for i in range(100)],
        run_id="klsteady",
        name="klsteady",
    )

    # a length of ~10 tokens that collapses to ~2 and then climbs to a cap of 32 while the reward stays flat
    def regrow_length(i: int) -> float:
        if i < 40:
            return 10.0 + 0.5 * math.sin(i)
        if i < 50:
            return 2.0 + 0.1 * (i % 3)
        return min(32.0, 2.0 + 1.5 * (i - 50)) + 0.1 * math.sin(i)

    write_run(
        root,
        [{"train/reward": 0.5 + 0.01 * math.sin(i), "train/completion_length": regrow_length(i)} for i in range(90)],
        run_id="regrow01",
        name="regrow",
    )
    # a real TRL run made on CPU (entropy collapse): the length jumps from ~8 to its cap of 32 at step 6 while the
    # reward starts to rise: a jump to the length limit (response_truncation's finding), and paid for, not verbosity
    lengths = [11.5, 8.3, 8.5, 7.4, 8.2, 31.6, 32.0, 32.0, 32.0, 32.0, 32.0, 32.0, 30.6, 32.0, 32.0, 30.8, 32.0, 30.3]
    rewards = [0.059, 0.062, 0.087, 0.101, 0.068, 0.115, 0.123, 0.148, 0.184, 0.193, 0.266, 0.291, 0.338, 0.426, 0.465]
    rewards += [0.528, 0.562, 0.635]
    lengths += [32.0 - (i % 3) for i in range(22)]
    rewards += [min(1.0, 0.7 + 0.03 * i) for i in range(22)]
    write_run(
        root,
        [
            {"train/reward": r, "train/completions/mean_length": n, "train/global_step": i + 1}
            for i, (n, r) in enumerate(zip(lengths, rewards, strict=True))
        ],
        run_id="capjump1",
        name="capjump",
    )
    # no length limit known and a mean length that wanders 205-240 tokens: its three longest means (239.6, 238.8 and
    # 238.6) are within half a percent of each other, which a noisy series does by chance; a cap repeats one value
    _length_run(
        root,
        "noisytop",
        [208.2, 214.2, 208.9, 235.6, 238.6, 219.3, 227.3, 230.2, 226.1, 239.6, 236.0, 224.8, 220.3, 223.8, 221.9, 211.3]
        + [225.4, 216.7, 211.5, 213.0, 204.9, 215.0, 221.5, 238.8, 230.2, 225.0, 236.7, 230.7, 222.4, 204.9, 224.7]
        + [232.1, 231.6, 218.4],
        [0.5 + 0.02 * math.sin(i) for i in range(34)],
    )
    # a short answer of a fixed length (an arithmetic task: 5 tokens) that the policy settles on: its mean length is
    # on its own maximum at nearly every step and was never far below it, so it shows no cap
    _length_run(
        root,
        "shortanswer",
        [4.92, 4.93, 4.96, 4.99, 4.995] + [5.0] * 40,
        [0.7 + 0.3 * min(i, 5) / 5 for i in range(45)],
    )
    # a burst (540 -> 720 over 15 steps) that drops back at once, and much later an unrelated jump to ~1150 (answers
    # cut at a limit): the burst did not hold, whatever the length did 100 steps on
    _length_run(
        root,
        "burstthenjump",
        [
            1150 + 40 * math.sin(i) if i >= 200 else 540 + 12 * (i - 95) if 95 <= i <= 110 else 540 + 20 * math.sin(i)
            for i in range(300)
        ],
        [0.5 + 0.02 * math.sin(1.3 * i) for i in range(300)],
    )
    # a jump from ~560 to ~1220 between two steps, the new level noisy enough (down to 950) that some of it falls in
    # the middle half of the rise: the step that makes the whole rise says it is a jump
    _length_run(
        root,
        "noisylevel",
        [560 + 30 * math.sin(i) if i <= 60 else 1220 - 180 * (i % 5 == 0) - 90 * (i % 3 == 0) for i in range(120)],
        [0.5 + 0.02 * math.sin(1.3 * i) for i in range(120)],
    )
    # the reward rises 0.6 -> 1.15 over the first 80 steps with the length flat at ~770; from step 100 the length
    # climbs to ~1750 while the reward stays where it got to: the rise came before the growth and did not pay for it
    _length_run(
        root,
        "latelength",
        [770 * (1 + 0.04 * math.sin(1.9 * i)) + 6.5 * max(0, i - 100) for i in range(250)],
        [0.6 + 0.55 * min(i, 80) / 80 + 0.05 * math.sin(2.3 * i) for i in range(250)],
    )
    # answers pinned at the length limit from step 62 (two steps of ramp), a few cut shorter every seventh step: the
    # dips reach below 90% of the new level, which is noise on a jump, not lengths on their way up
    _length_run(
        root,
        "noisyjump",
        [
            220 + 15 * math.sin(i) if i < 60 else 680.0 if i == 60 else 1100.0 if i == 61 else 1540 - 190 * (i % 7 == 0)
            for i in range(200)
        ],
        [0.5 + 0.02 * math.sin(1.3 * i) for i in range(200)],
    )
    # the length climbs steadily from ~8 to ~40 over the first 12 steps and stays while the reward stays flat: the
    # growth shows in a window shorter than 20 points, at the start of the run
    _length_run(root, "earlygrow", [min(40.0, 8.0 + 2.7 * i) + 0.3 * (i % 3) for i in range(40)], [0.1] * 40)
    # the length jumps from ~300 to ~900 between two steps and stays there, the reward flat: a new level, not a
    # steady growth (the OLS slope of every window over the jump is significant)
    _length_run(root, "jumplevel", [(300.0 if i < 30 else 900.0) + 7 * math.sin(i) for i in range(60)], [0.5] * 60)
    # the length climbs 250 -> 400 over 20 steps while the reward is still flat, then the reward follows (+60%): by
    # the end of the run the reward has outgrown the length (longer reasoning that pays, a little later)
    _length_run(
        root,
        "paidgrowth",
        [250.0 + 7.5 * min(max(i - 40, 0), 20) + 4 * math.sin(i) for i in range(140)],
        [0.5 + 0.3 * min(max(i - 60, 0), 40) / 40 + 0.01 * math.sin(i) for i in range(140)],
    )
    # a policy that answers in 2 tokens and then in 5 (a real TRL run collapsed to a letter): +150%, 3 tokens
    _length_run(
        root, "fewtokens", [2.0 + 0.15 * min(max(i - 20, 0), 20) + 0.05 * (i % 3) for i in range(60)], [0.5] * 60
    )
    # a burst at the start of the run (450 -> 600 over its first 15 steps) that falls back to the start: noise, with
    # no earlier steps to measure the growth against but its own first ones
    _length_run(
        root,
        "startbump",
        [450.0 + (10.0 * i if i < 15 else 0.0) + 5 * math.sin(i) for i in range(60)],
        [0.5 + 0.01 * math.sin(i) for i in range(60)],
    )
    # older TRL without a truncation metric: the mean completion length sits at max_completion_length from step 10
    write_run(
        root,
        [
            {"train/reward": 0.5, "train/completion_length": 508.0 + (i % 3) if i >= 10 else 300.0 + i}
            for i in range(30)
        ],
        run_id="pinned01",
        name="pinned",
        config={"max_completion_length": 512},
    )
    # the same, but the mean reaches the limit on one logged step in four only (every response cut on those)
    write_run(
        root,
        [{"train/reward": 0.5, "train/completion_length": 510.0 if i % 4 == 3 else 300.0 + i} for i in range(40)],
        run_id="pinned02",
        name="sometimes",
        config={"max_completion_length": 512},
    )
    # TRL: two log calls per trainer step with the same keys
    rows = []
    for g in range(1, 21):
        rows += [{"train/loss": 0.01 * g, "train/global_step": g}, {"train/loss": 0.011 * g, "train/global_step": g}]
    write_run(root, rows, run_id="double01", name="doublelog")
    # TRL's profiling: each timed call logs its own row with the step counter, several a step, by design
    rows = []
    for g in range(1, 21):
        rows += [{"profiling/Time taken: GRPOTrainer._prepare_inputs": 0.1 * k, "train/global_step": g} for k in (1, 2)]
        rows.append({"train/loss": 0.01 * g, "train/global_step": g})
    write_run(root, rows, run_id="profile1", name="profiled")
    # a benchmark loop logging twice per its own counter (benchmark/step, no *global_step*); timing_s/step is a
    # duration whose whole values go up and down: not a counter
    rows = []
    for b in range(1, 16):
        rows += [
            {"benchmark/reward_mean": 0.3, "benchmark/step": b, "timing_s/step": 50.0 + (b % 4)},
            {"benchmark/reward_mean": 0.31, "benchmark/step": b, "timing_s/step": 49.0 + (b % 3)},
        ]
    write_run(root, rows, run_id="benchdup", name="benchdouble")
    # TRL on prompts the model mostly solves: on ~60 % of the steps every group is tied, and the grad norm is the KL
    # term's alone (~0.004 against ~3); one real spike (40) at trainer step 50. Once with frac_reward_zero_std, once
    # (older TRL) with reward_std only.
    for run_id, name, tied_key in (("tiedgrd1", "tiedgrads", "frac"), ("tiedstd1", "tiedstd", "std")):
        rows = []
        for i in range(80):
            tied = (i * 7) % 10 < 6 and i != 49
            grad = 40.0 if i == 49 else 0.004 * (1 + 0.5 * math.sin(i)) if tied else 3.0 * (1 + 0.3 * math.sin(i))
            row = {"train/reward": 0.9, "train/grad_norm": grad, "train/global_step": i + 1}
            if tied_key == "frac":
                row["train/frac_reward_zero_std"] = 1.0 if tied else 0.25
            else:
                row["train/reward_std"] = 0.0 if tied else 0.3
            rows.append(row)
        write_run(root, rows, run_id=run_id, name=name)
    # a grad norm that swings between ~10 and ~200 from step to step (a log-normal spread so wide that six robust
    # SDs above its median is past 10^4), then 1927 at trainer step 68: 60x its median, 8x anything before it
    spread = [math.exp(math.log(10) + math.log(20) * ((i * 37) % 11) / 10) for i in range(90)]
    write_run(
        root,
        [
            {"train/reward": 0.5, "train/grad_norm": 1927.0 if i == 67 else spread[i], "train/global_step": i + 1}
            for i in range(90)
        ],
        run_id="noisygn1",
        name="noisyspike",
    )
    # ms-swift logging every step: on a fifth of the steps every group tied (reward_std 0) and the grad norm is the
    # KL term's alone (~0.0005 against ~0.15). Tied trainer step 81 jumps 6x the tied steps (0.003, still 50x below
    # the ordinary ones); ordinary step 56 spikes to 0.9 (6x), tied step 104 to 1.8 (12x the ordinary steps)
    rows = []
    for i in range(120):
        tied = i % 10 in (0, 3)
        grad = 0.0005 * (1 + 0.2 * math.sin(i)) if tied else 0.15 * (1 + 0.1 * math.sin(i))
        grad = {80: 0.003, 55: 0.9, 103: 1.8}.get(i, grad)
        rows.append({"train/reward_std": 0.0 if tied else 0.3, "train/grad_norm": grad, "train/global_step": i + 1})
    write_run(root, rows, run_id="kltied01", name="kltied")
    # TRL logging every 10 steps with no KL term: the grad norm is the last optimizer step's, the tied share the mean
    # over all 10 (50-90 % of the groups tied), and the last step tied whole on every other log (grad norm 0), as
    # ties explain. Once as TRL's trainer steps, once with a reward signal in nearly every group (0-20 % tied), once
    # logging every step (each zero that step's own), and once as TRL's console (the lines carry no step)
    for run_id, name, every, tied_share in (
        ("tiedwin1", "tiedwindows", 10, lambda i: 0.5 + 0.1 * (i % 5)),
        ("zerowin1", "zerowindows", 10, lambda i: 0.1 * (i % 3)),
        ("zerostp1", "zerosteps", 1, lambda i: 0.5 + 0.1 * (i % 5)),
    ):
        rows = [
            {
                "train/reward": 0.8,
                "train/frac_reward_zero_std": tied_share(i),
                "train/grad_norm": 0.0 if i % 2 == 0 else 2.0 * (1 + 0.2 * math.sin(i)),
                "train/global_step": every * (i + 1),
            }
            for i in range(60)
        ]
        write_run(root, rows, run_id=run_id, name=name)
    (logs.parent / "tiedconsole").mkdir(parents=True)
    (logs.parent / "tiedconsole" / "train.log").write_text(
        "".join(
            f"{{'loss': 0.01, 'grad_norm': {0.0 if i % 2 == 0 else 2.0 * (1 + 0.2 * math.sin(i))}, 'reward': 0.8, "
            f"'frac_reward_zero_std': {0.5 + 0.1 * (i % 5):.1f}, 'epoch': {0.01 * (i + 1):.2f}}}\n"
            for i in range(60)
        )
    )
    # a run that has solved its prompts: every group tied at every step, a grad norm of ~0.25 all the same (this
    # trainer's tied steps are not the KL term's alone), and a spike to 2.1 at trainer step 60
    write_run(
        root,
        [
            {
                "train/reward": 1.0,
                "train/frac_reward_zero_std": 1.0,
                "train/grad_norm": 2.1 if i == 59 else 0.25 * (1 + 0.2 * math.sin(i)),
                "train/global_step": i + 1,
            }
            for i in range(100)
        ],
        run_id="alltied1",
        name="alltied",
    )
    # older TRL on a task it always solves: reward_std 0 on every step (every group tied, read from reward_std only)
    write_run(
        root,
        [{"train/reward": 1.0, "train/reward_std": 0.0, "train/global_step": i + 1} for i in range(40)],
        run_id="stdtied1",
        name="stdalltied",
    )
    # a run that starts to solve every prompt at trainer step 41 (all groups tied from there, the grad norm as
    # before) and spikes to 20 on its sixth tied step: too few tied steps for a baseline of their own, so the spike
    # is judged against every step
    write_run(
        root,
        [
            {
                "train/reward": 0.6 if i < 40 else 1.0,
                "train/frac_reward_zero_std": 0.05 if i < 40 else 1.0,
                "train/grad_norm": 20.0 if i == 45 else 0.5 * (1 + 0.2 * math.sin(i)),
                "train/global_step": i + 1,
            }
            for i in range(60)
        ],
        run_id="newtied1",
        name="newlytied",
    )
    # a reward that starts at 0.40, settles flat at 0.38 and only rises (to ~0.51) over its last 90 steps: it
    # improved, but the flat stretch sits below where it started, so that stretch is not where it converged
    noise = random.Random(3)
    write_run(
        root,
        [
            {"train/reward": (0.40 if i < 30 else 0.38 + max(0, i - 210) * 0.0015) + noise.gauss(0, 0.008)}
            for i in range(300)
        ],
        run_id="laterise",
        name="laterise",
    )
    # TRL: the format reward fires until step 19, then the policy drops the format for good; accuracy stays high
    write_run(
        root,
        [
            {
                "train/reward": 0.9 + (0.8 if i < 20 else 0.0),
                "train/rewards/accuracy_reward/mean": 0.9 + 0.01 * math.sin(i),
                "train/rewards/format_reward/mean": 0.8 if i < 20 else 0.0,
                "train/global_step": i + 1,
            }
            for i in range(60)
        ],
        run_id="fmtdrop1",
        name="formatdrop",
    )
    # TRL: an anti-cheating penalty that is 0 except on three steps, where the policy tried the exploit; and the same
    # shape in a term that scores the task itself (a trading environment's risk cost): no guard
    for name, function, cost in (("penalty", "no_cheating_penalty", 1.0), ("riskcost", "risk_reward_fn", 0.2)):
        write_run(
            root,
            [
                {
                    "train/reward": 0.5 + 0.01 * math.sin(i) - (cost if i in (15, 33, 47) else 0.0),
                    "train/rewards/accuracy_reward/mean": 0.5 + 0.01 * math.sin(i),
                    f"train/rewards/{function}/mean": -cost if i in (15, 33, 47) else 0.0,
                    "train/global_step": i + 1,
                }
                for i in range(60)
            ],
            run_id="penalty1" if name == "penalty" else name,
            name=name,
        )
    # TRL, 240 steps: the format reward climbs 0.1 -> 0.9 and carries the reward while correctness drifts 0.100 ->
    # 0.108, a gain of many standard errors on a log this dense that is still nothing learnt; beside it a run whose
    # correctness triples (0.01 -> 0.03) under the same format climb, which did learn something; and the drifting
    # one again with an evaluation accuracy that climbs 0.3 -> 0.6: the answers got better, whatever the training
    # prompts scored
    for name, run_id, task_from, task_gain, evals in (
        ("formdrift", "fmtdrift", 0.1, 0.008, False),
        ("tasktriples", "tasktrip", 0.01, 0.02, False),
        ("formeval", "fmteval1", 0.1, 0.008, True),
    ):
        rows = []
        for i in range(240):
            fmt = 0.1 + 0.8 / (1 + math.exp(-(i - 100) / 15)) + 0.02 * math.sin(1.7 * i)
            acc = task_from + task_gain * i / 240 + 0.04 * task_from * math.sin(2.3 * i)
            rows.append(
                {
                    "train/reward": fmt + acc,
                    "train/rewards/format_reward/mean": fmt,
                    "train/rewards/correctness_reward/mean": acc,
                    "train/global_step": i + 1,
                    **({"eval/accuracy": 0.3 + 0.3 * i / 240 + 0.03 * math.sin(i)} if evals and i % 10 == 9 else {}),
                }
            )
        write_run(root, rows, run_id=run_id, name=name)
    # TRL, 120 steps: the answers and the format are learnt together in the first twenty steps (correctness 0.2 ->
    # 0.65, then a sag to 0.5), after which the format goes on creeping up 0.3 -> 0.6: the thirds see a flat task
    # beside a format gain, the run's start shows the task learnt; and a reward that rose 4% on a quiet log, a
    # significant and immaterial gain carried by the format
    for name, run_id, early_task, late_format in (
        ("earlylearn", "erlylrn1", 0.45, 0.3),
        ("smallrise", "smllrse1", 0, 0.05),
    ):
        rows = []
        for i in range(120):
            acc = 0.2 + early_task * (1 - math.exp(-i / 8)) - 0.3 * early_task * i / 120 + 0.01 * math.sin(2.3 * i)
            acc += 0.15 if not early_task else 0.0
            fmt = 0.2 + 0.1 * (1 - math.exp(-i / 8)) * (early_task > 0) + late_format * i / 120
            fmt += 0.005 * math.sin(1.7 * i) + (0.4 if not early_task else 0.0)
            rows.append(
                {
                    "train/reward": fmt + acc,
                    "train/rewards/format_reward/mean": fmt,
                    "train/rewards/correctness_reward/mean": acc,
                    "train/global_step": i + 1,
                }
            )
        write_run(root, rows, run_id=run_id, name=name)
    # TRL, 240 steps: the answers are learnt over the first 120 steps (correctness 0.2 -> 0.45), then stay there while
    # the format term, flat at 0.1 until then, climbs to 0.9 over the last 90: a late hack the thirds cannot see
    # (the task rose from the first third to the last), and with the evaluation still rising, none
    for name, run_id, evals in (("latehack", "latehck1", False), ("lateeval", "lateevl1", True)):
        rows = []
        for i in range(240):
            acc = 0.2 + 0.25 * min(i, 120) / 120 + 0.01 * math.sin(2.3 * i)
            fmt = 0.1 + 0.8 / (1 + math.exp(-(i - 190) / 10)) + 0.01 * math.sin(1.7 * i)
            rows.append(
                {
                    "train/reward": fmt + acc,
                    "train/rewards/format_reward/mean": fmt,
                    "train/rewards/correctness_reward/mean": acc,
                    "train/global_step": i + 1,
                    **({"eval/accuracy": 0.2 + 0.4 * i / 240 + 0.01 * math.sin(i)} if evals and i % 5 == 4 else {}),
                }
            )
        write_run(root, rows, run_id=run_id, name=name)
    # no component named for the task: a format term carries the gain beside flat tool terms (judged on those), and
    # a tool term carries it beside another (no form term: nothing to call form over task)
    for name, run_id, rising in (
        ("formtool", "fmttool1", "format_reward"),
        ("tooltool", "tooltoo1", "tool_use_reward"),
    ):
        rows = []
        for i in range(240):
            up = 0.1 + 0.8 / (1 + math.exp(-(i - 100) / 15)) + 0.02 * math.sin(1.7 * i)
            flat = -0.2 + 0.01 * math.sin(2.3 * i)
            other = "tool_trace_reward" if rising == "tool_use_reward" else "tool_use_reward"
            rows.append(
                {
                    "train/reward": up + flat,
                    f"train/rewards/{rising}/mean": up,
                    f"train/rewards/{other}/mean": flat,
                    "train/global_step": i + 1,
                }
            )
        write_run(root, rows, run_id=run_id, name=name)
    # evaluations every 5 steps: the reward climbs 0.3 -> 0.8 over the first 100 steps while the accuracy stays at
    # 0.3, then the accuracy climbs to 0.6 while the reward holds: the task lagged the reward, it was not left behind
    noise = random.Random(5)
    write_run(
        root,
        [
            {
                "train/reward": 0.3 + 0.5 * min(i, 100) / 100 + noise.gauss(0, 0.03),
                "train/global_step": i + 1,
                **(
                    {"eval/accuracy": 0.3 + 0.3 * min(max(i - 100, 0), 50) / 50 + noise.gauss(0, 0.03)}
                    if i % 5 == 4
                    else {}
                ),
            }
            for i in range(200)
        ],
        run_id="tasklag1",
        name="tasklag",
    )
    # verl on GSM8K near its ceiling: the training score creeps 0.947 -> 0.975 (t ~ 20 on so quiet a log) while
    # validation stays at 0.69: a train/validation gap, not a reward gained without the task (a 3% rise)
    write_run(
        root,
        [
            {
                "train/reward": 0.947 + 0.028 * i / 200 + 0.002 * math.sin(1.3 * i),
                "train/global_step": i + 1,
                **({"eval/accuracy": 0.69 + 0.005 * math.sin(i)} if i % 10 == 9 else {}),
            }
            for i in range(200)
        ],
        run_id="ceiling1",
        name="ceiling",
    )
    # the same lead, but the accuracy follows late and slowly: 0.30 until step 250, then up to 0.45 by step 400. Its
    # mean over everything after the episode is within noise of its level during it; where it ended up is well above
    write_run(
        root,
        [
            {
                "train/reward": 0.3 + 0.5 * min(i, 100) / 100 + noise.gauss(0, 0.03),
                "train/global_step": i + 1,
                **({"eval/accuracy": 0.3 + 0.15 * max(i - 250, 0) / 150 + noise.gauss(0, 0.04)} if i % 5 == 4 else {}),
            }
            for i in range(400)
        ],
        run_id="taskramp",
        name="taskramp",
    )
    # logging_steps=10: the reward collapses at step 150, between two logged points, 14 points into the run
    write_run(
        root,
        [
            (
                {
                    "train/reward": (0.6 + 0.02 * math.sin(s)) if s < 150 else 0.01 * (1 + math.sin(s)) / 2,
                    "train/kl": 0.02,
                },
                {"step": s},
            )
            for s in range(10, 310, 10)
        ],
        run_id="coarse01",
        name="coarse",
    )
    # a k1 estimate of KL hovering just below 0 under a flat reward for 300 steps: one stretch of a policy that
    # barely moves, not one per window whose fitted KL rise happened to be positive
    write_run(
        root,
        [
            {
                "train/reward": 0.4 + 0.01 * math.sin(2.1 * i),
                "train/kl": -0.0003 + 0.0001 * math.sin(1.3 * i),
                "train/global_step": i + 1,
            }
            for i in range(300)
        ],
        run_id="k1kl0001",
        name="k1kl",
    )
    # an adaptive KL controller with a target near 0 pushes KL from 0.02 down to 0.0004 over steps 61-70; the reward
    # still creeps up to step 120, then stays flat: the policy stopped moving where KL fell, before the reward showed it
    write_run(
        root,
        [
            {
                "train/reward": 0.2 + 0.06 * min(i, 120) / 120 + 0.004 * math.sin(2.3 * i),
                "train/kl": (0.02 if i < 60 else max(0.0004, 0.02 - 0.002 * (i - 59))) * (1 + 0.1 * math.sin(1.7 * i)),
                "train/global_step": i + 1,
            }
            for i in range(300)
        ],
        run_id="klsettle",
        name="klsettles",
    )
    # 8 samples a step: one step in ten has a mean of ~40 tokens against a median of ~250, so three such steps in a
    # row (45, 50, 45 at steps 300-302) are the run's noise, not a collapse to lengths it never produced
    _length_run(
        root,
        "lengthdips",
        [
            (45.0 + 5 * (i % 2) if 300 <= i <= 302 else 40.0 if i % 10 == 3 else 250.0 + 50 * math.sin(0.9 * i))
            for i in range(400)
        ],
        [0.5 + 0.01 * math.sin(i) for i in range(400)],
    )
    # 80 logged points: the length grows steadily from 600 to 1,800 tokens over 36 of them (steps 31-66) while the
    # reward rose with it only at first (0.25 -> 0.55 by step 40), then stayed. Judged over the whole run; 20 points
    # on either side of a step span half of this run, and made the steady growth look like a jump
    _length_run(
        root,
        "growscoarse",
        [600.0 + 1200.0 * min(max(i - 30, 0), 36) / 36 + 15 * math.sin(1.9 * i) for i in range(80)],
        [0.25 + 0.3 * min(max(i - 30, 0), 10) / 10 + 0.01 * math.sin(2.7 * i) for i in range(80)],
    )
    # a third of the responses cut on the first 8 steps (0.30 -> 0.37), none after: the worst share is the mean of
    # those 8 steps, not of a 20-step window the run did not have yet
    write_run(
        root,
        [
            {
                "train/reward": 0.5,
                "train/completions/clipped_ratio": 0.30 + 0.01 * i if i < 8 else 0.0,
                "train/global_step": i + 1,
            }
            for i in range(48)
        ],
        run_id="earlyclp",
        name="earlyclip",
    )
    # answers collapse to 9 tokens at trainer step 31 and stay there, but for one normal answer at step 41: one
    # step is no recovery, the episode goes on to the end of the run
    _length_run(
        root,
        "staysdown",
        [300.0 + 20 * math.sin(i) if i < 30 or i == 40 else 9.0 for i in range(60)],
        [0.5] * 60,
    )
    # evaluations every 2 steps: the reward climbs 0.005 a step under noise of sd 0.08 while the accuracy slips; a
    # window of 5 evaluations (10 steps) holds a rise of 0.05, lost in the noise; one of 40 holds 0.4
    noise = random.Random(11)
    write_run(
        root,
        [
            {
                "train/reward": 0.3 + 0.005 * i + noise.gauss(0, 0.08),
                "train/global_step": i + 1,
                **({"eval/accuracy": 0.55 - 0.0003 * i + noise.gauss(0, 0.03)} if i % 2 else {}),
            }
            for i in range(200)
        ],
        run_id="denseev1",
        name="denseevals",
    )
    # a noisy reward around 0.5 that dips to ~0.22 for six steps (40-45) and comes back: a dip, not a collapse
    _reward_dip_run(root, "rewarddip", "rewdip01", steps=120, dip=range(40, 46))
    # the same dip on a run of 400 steps, for 15 of them (200-214): longer than min_low, a twentieth of the run
    _reward_dip_run(root, "longdip", "longdip1", steps=400, dip=range(200, 215))
    # the reward climbs 0.3 -> 0.8 over 60 steps, then falls back to where it started: it did improve (the fall is
    # reward_collapse's), so "never improved" would be false
    write_run(
        root,
        [
            {"train/reward": (0.3 + 0.5 * i / 60 if i < 60 else 0.3) + 0.02 * math.sin(i), "train/global_step": i + 1}
            for i in range(90)
        ],
        run_id="risefal1",
        name="risecollapse",
    )
    # 300 steps that sag from a lucky start: ~0.38 over the first 20, ~0.31 after (-13% against the first tenth,
    # significant), no rise ever
    write_run(
        root,
        [
            {"train/reward": (0.38 if i < 20 else 0.31) + 0.03 * math.sin(1.9 * i), "train/global_step": i + 1}
            for i in range(300)
        ],
        run_id="sagged01",
        name="sagged",
    )
    # a trivial task: the reward saturates in four steps (0.68 to 0.98), then sits at 0.998 +- 0.002 for 96 steps,
    # so its first tenth is already near the top; and a noisy plateau (0.5 +- 0.035) whose first three steps came
    # in low (0.45): a start a standard deviation or two down is no rise
    write_run(
        root,
        [
            {"train/reward": [0.676, 0.795, 0.933, 0.982][i] if i < 4 else 0.998 + 0.002 * math.sin(i)}
            for i in range(100)
        ],
        run_id="saturat1",
        name="saturated",
    )
    write_run(
        root,
        [{"train/reward": 0.45 if i < 3 else 0.5 + 0.05 * math.sin(1.7 * i)} for i in range(200)],
        run_id="lowstart",
        name="lowstart",
    )
    # the reward climbs 0.2 -> 0.6 over 100 steps, then sits flat for 200 while the grad norm is 0: its groups still
    # differ (reward_std 0.3), so nothing explains the missing update; the twin's groups all tie from step 100 on (a
    # saturated task, whose GRPO advantages are all 0)
    for name, tied_std in (("frozen", 0.3), ("tiedflat", 0.0)):
        write_run(
            root,
            [
                {
                    "train/reward": (0.2 + 0.004 * i if i < 100 else 0.6) + 0.02 * math.sin(1.7 * i),
                    "train/grad_norm": 0.3 + 0.05 * math.sin(i) if i < 100 else 0.0,
                    "train/reward_std": 0.3 if i < 100 else tied_std,
                }
                for i in range(300)
            ],
            run_id=f"{name}01",
            name=name,
        )
    # a log every 10 steps (33 points) whose quiet start (4 points at ~0.35) is followed by a dip to ~0.25 for a
    # third of the run, then a climb to ~0.75: the noise of four quiet points is not the reward's (a second
    # generator's healthy run, seed 104); and a public TRL run (every 5 steps): 0.2 -> 0.7 within its first tenth,
    # ~0.85 for 100 steps, then a collapse to 0
    dip = """0.354 0.345 0.343 0.349 0.247 0.209 0.27 0.301 0.258 0.237 0.271 0.201 0.263 0.252 0.423 0.499 0.492
             0.572 0.668 0.671 0.712 0.693 0.775 0.77 0.771 0.736 0.702 0.779 0.74 0.836 0.567 0.666 0.679"""
    rose = """0.2 0.288 0.7 0.713 0.875 0.75 0.713 0.838 0.925 0.913 0.763 0.888 0.925 0.825 0.9 0.85 0.8 0.825 0.513
              0.738 0.85 0.313 0.288 0.263 0.55 0.8 0.788 0.975 0.938 0.875 0.413 0.025 0 0 0.025 0 0.063 0 0 0.013"""
    for name, every, rewards in (("dipback", 10, dip), ("rosefell", 5, rose)):
        write_run(
            root,
            [{"train/reward": float(r), "train/global_step": every * (i + 1)} for i, r in enumerate(rewards.split())],
            run_id=f"{name[:7]}1",
            name=name,
        )
    # mean length ~290 tokens for 130 steps, then sliding to 35 over 30 steps and staying there
    write_run(
        root,
        [
            {
                "train/completions/mean_length": 290 + 8 * math.sin(1.3 * i)
                if i < 130
                else 290 * (35 / 290) ** ((i - 130) / 30)
                if i < 160
                else 35 + 1.5 * math.sin(i),
                "train/reward": 0.5 + 0.05 * math.sin(1.7 * i),
            }
            for i in range(300)
        ],
        run_id="lenslid1",
        name="lenslide",
    )
    # entropy drifting 0.92 -> 0.77 over 95 steps (healthy), then falling to 0.08 within 40 (the blind generator's
    # shape, logged every 5 steps)
    write_run(
        root,
        [
            {
                "train/entropy": 0.92 - 0.0016 * i * 5 if i < 19 else 0.08 + 0.69 * math.exp(-(i - 19) * 5 / 8),
                "train/global_step": 5 * (i + 1),
            }
            for i in range(60)
        ],
        run_id="entfall1",
        name="entfall",
    )
    # 40 logs, every 5 steps: a learning rate 100x too small leaves KL at ~1e-5 and the reward flat; its twin learns
    for name, rise in (("shortstill", 0.0), ("shortlearns", 0.4)):
        write_run(
            root,
            [
                {
                    "train/reward": 0.3 + rise * i / 40 + 0.02 * math.sin(1.7 * i),
                    "train/kl": 1e-5 * (1 + 0.3 * math.sin(i)) + 1e-4 * rise * i,
                    "train/global_step": 5 * (i + 1),
                }
                for i in range(40)
            ],
            run_id=f"{name[:7]}1",
            name=name,
        )
    # 300 steps that gain 4%: significant on a log this dense, and still no learning
    write_run(
        root,
        [
            {"train/reward": 1.12 + 0.05 * i / 300 + 0.04 * math.sin(1.7 * i), "train/global_step": i + 1}
            for i in range(300)
        ],
        run_id="barely01",
        name="barelyrose",
    )
    # verl: every step a little slower, 62 s to 180 s over 60 steps (no single drop a trailing baseline would see), 16
    # prompts of 8 rollouts a step by its config
    write_run(
        root,
        [
            ({"critic/score/mean": 0.5, "actor/kl_loss": 0.01, "timing_s/step": 60.0 + 2 * step}, {"step": step})
            for step in range(1, 61)
        ],
        run_id="slowing1",
        name="slowing",
        project="verl-grpo",
        config={"data": {"train_batch_size": 16}, "actor_rollout_ref": {"rollout": {"n": 8}}},
    )
    # Diplomacy league: the base model climbs past the checkpoints from step 40 (the gap shrinks, no decline)
    rows = []
    for step in range(120):
        base_mu = 25.0 + 6.0 * max(0, step - 40) / 79
        row = {
            "trueskill/base_model_mu": base_mu,
            "trueskill/base_model_sigma": 1.0,
            "elo/base_model": (base_mu - 25) * 40 + 1000,
        }
        for ckpt, mu in ((10, 28.0), (20, 27.5)):
            if step >= ckpt:
                row |= {
                    f"trueskill/league_adapter_v{ckpt}_mu": mu,
                    f"trueskill/league_adapter_v{ckpt}_sigma": 1.0,
                    f"elo/league_adapter_v{ckpt}": (mu - 25) * 40 + 1000,
                }
        rows.append((row, {"step": step}))
    write_run(root, rows, run_id="league01", name="league", project="diplomacy-grpo")
    # a trainer restarted from its step-10 checkpoint appends steps 10..19 to the same metric log again
    logs.mkdir(parents=True)
    lines = [{"step": s, "train/loss": 0.1 + 0.001 * s} for s in range(20)]
    lines += [{"step": s, "train/loss": 0.2 + 0.001 * s} for s in range(10, 20)]
    (logs / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    # 1,600 steps of one prompt's group each: all its answers cut on a step every 100 steps, and on three steps within
    # 20 (800, 817, 819: 15 % of that window's answers, 1.2 % of the run's); then 40 % of them cut from step 1500 on
    cut = {*range(100, 1600, 100), 817, 819}
    write_jsonl(
        logs.parent / "sparsecuts" / "metrics.jsonl",
        [
            {
                "step": i,
                "reward": 0.5 + 0.05 * math.sin(i),
                "completions/clipped_ratio": 1.0 if i in cut else 0.4 if i >= 1500 else 0.0,
            }
            for i in range(1, 1601)
        ],
    )
    # ten logged rewards, every 5 steps, that never improved: the first tenth is the first 3 (steps 5-15), from a
    # baseline below 0 (-0.083 to 0.0375) and from one near 0 (0.04 to 0.14), where a percentage means little
    for name, rewards in (
        ("negstart", [-0.25, 0.1, -0.1, -0.2, 0.15, 0.05, 0.3, -0.25, 0.2, -0.1]),
        ("smallstart", [0.0, 0.1, 0.02, 0.3, -0.1, 0.2, 0.4, -0.1, 0.3, -0.04]),
    ):
        write_jsonl(
            logs.parent / name / "metrics.jsonl", [{"step": 5 * (i + 1), "reward": r} for i, r in enumerate(rewards)]
        )
    # 45 logged lengths that triple, 150 -> 450, under noise that hides it from any 20-step window: judged over the
    # whole run, from its first 5 logged steps (more than its first tenth)
    noise = random.Random(5)
    write_jsonl(
        logs.parent / "shortgrowth" / "metrics.jsonl",
        [
            {
                "step": i,
                "reward": 0.5 + 0.02 * noise.gauss(0, 1),
                "completions/mean_length": 150 + 300 * i / 44 + 40 * noise.gauss(0, 1),
            }
            for i in range(45)
        ],
    )
    # twelve steps, each 10 s slower than the last: a fifth of the run is fewer than the 3 steps each end takes
    write_jsonl(
        logs.parent / "shortslowing" / "metrics.jsonl",
        [{"step": i, "reward": 0.5, "timing_s/step": 60.0 + 10 * i} for i in range(1, 13)],
    )
    # a trainer_state.json whose log_history holds steps 20-25 twice, entry for entry (a trainer that appended the
    # steps again after a restart), then Trainer.evaluate() after the last step's evaluation: an evaluation at a
    # step that had one is no repeated step
    train = [
        {
            "loss": 0.1 + 0.01 * s,
            "reward": 0.4 + 0.01 * s,
            "grad_norm": 0.2,
            "learning_rate": 1e-6,
            "epoch": s / 30,
            "step": s,
        }
        for s in range(1, 31)
    ]
    evaluations = [{"eval_loss": 0.3, "eval_runtime": runtime, "epoch": 1.0, "step": 30} for runtime in (12.5, 11.9)]
    (logs.parent / "appendedtwice").mkdir()
    (logs.parent / "appendedtwice" / "trainer_state.json").write_text(
        json.dumps(
            {
                "global_step": 30,
                "max_steps": 30,
                "log_history": [*train[:25], *train[19:25], *train[25:], *evaluations],
            }
        )
    )
    # TRL's PPOTrainer (RLOO's and OnlineDPO's keys are the same): objective/*, policy/*_avg, loss/*_avg, and its
    # scores (the reward model's or the verifier's) beside the RLHF reward it optimizes (score - beta KL)
    ppo = [
        {
            "eps": 0,
            "objective/kl": 2.0 + 0.05 * s,
            "objective/entropy": -100.0,
            "objective/non_score_reward": -0.1,
            "objective/rlhf_reward": 0.1 + 0.001 * s,
            "objective/scores": 0.2 + 0.001 * s,
            "policy/approxkl_avg": 0.02,
            "policy/clipfrac_avg": 0.015,
            "loss/policy_avg": 0.01,
            "loss/value_avg": 5.8,
            "policy/entropy_avg": 0.35,
            "val/ratio": 1.0,
            "lr": 5e-6,
            "episode": 4 * s,
            "epoch": s / 100,
            "step": s,
        }
        for s in range(1, 21)
    ]
    (logs.parent / "trlppo").mkdir()
    (logs.parent / "trlppo" / "trainer_state.json").write_text(json.dumps({"global_step": 20, "log_history": ppo}))
    # verl for AgentGym's CSV: every group of every step scored 0 (group_reward_all_zero_rate 1), no other share of
    # tied groups logged: the groups are all tied, whatever frac_reward_zero_std would have said
    (logs.parent / "agentgym").mkdir()
    (logs.parent / "agentgym" / "allzero.csv").write_text(
        "step,critic_score_mean,group_reward_all_zero_rate,actor_grad_norm,response_length_mean\n"
        + "".join(f"{i},0,1.0,0,{900 + 10 * (i % 3)}\n" for i in range(1, 41))
    )
    # SkyRL's metrics (its W&B keys, here as a JSONL log): policy/*, reward/*, generate/*, timing/*
    write_jsonl(
        logs.parent / "skyrl-gsm8k" / "metrics.jsonl",
        [
            {
                "trainer/global_step": i,
                "reward/avg_raw_reward": 0.3 + 0.01 * i,
                "reward/avg_pass_at_4": 0.5,
                "policy/policy_kl": 0.001 * i,
                "policy/policy_entropy": 0.9,
                "policy/raw_grad_norm": 0.4,
                "policy/ppo_clip_ratio": 0.001,
                "policy/policy_lr": 1e-6,
                "policy/policy_loss": 0.01,
                "generate/avg_num_tokens": 300.0,
                "generate/max_num_tokens": 1024.0,
                "generate/min_num_tokens": 20.0,
                "timing/step": 100.0,
                "timing/generate": 60.0,
                "timing/policy_train": 30.0,
                "timing/sync_weights": 5.0,
            }
            for i in range(1, 21)
        ],
    )
    # a hand-written trainer's console (MiniMind's print): a flat reward, KL to the reference hovering around 0
    (logs.parent / "minimind").mkdir()
    (logs.parent / "minimind" / "train_grpo.log").write_text(
        "".join(
            f"Epoch:[1/1]({i}/120), Reward: {0.4 + 0.02 * math.sin(1.9 * i):.4f}, KL_ref: "
            f"{0.0003 * math.sin(1.3 * i):.4f}, Actor Loss: 0.0000, Avg Len: {150 + 9 * math.sin(i):.0f}, "
            "LR: 0.00000100\n"
            for i in range(1, 121)
        )
    )
    # Tinker's metrics.jsonl (tinker-cookbook's ml_log): the share of reward groups whose rewards differ falls from
    # 0.9 to 0.1 at step 30 (most groups tied: all solved or all failed), an evaluation every 10 steps
    write_jsonl(
        logs.parent / "tinker-math" / "metrics.jsonl",
        [
            {
                "step": i,
                "env/all/reward/total": 0.5 + 0.01 * math.sin(i),
                "env/all/by_group/frac_mixed": 0.9 if i < 30 else 0.1,
                "env/all/ac_tokens_per_turn": 800 + 10 * math.sin(i),
                "optim/entropy": 0.6,
                "optim/lr": 4e-5,
                "time/total": 60.0,
                **({"test/env/all/correct": 0.4 + 0.01 * (i % 3)} if i % 10 == 0 else {}),
            }
            for i in range(60)
        ],
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-runs")
    logs = tmp_path_factory.mktemp("tiny-logs") / "restarted"
    _tiny_runs(root, logs)
    # last, and left open while it is ingested: a run that is still "running" (no exit record yet)
    import wandb

    write_run(
        root,
        [{"train/loss": 0.01 * i, **{f"x/k{j}": float(i * j) for j in range(30)}} for i in range(300)],
        run_id="stale001",
        name="stale",
        finish=False,
    )
    try:
        settings = Settings(home=tmp_path_factory.mktemp("tiny-home"), wandb_dirs=(root,), trainer_logs=(logs.parent,))
        ingest(settings)
        warehouse.build(settings)
    finally:
        wandb.run.finish()
    con = warehouse.connect_readonly(settings)
    keys = dict(con.sql("select name, run_key from runs").fetchall())
    rules = {rule.name: rule for rule in checks.load_checks()}

    def run(check: str, overrides: dict | None = None) -> dict[str, list[dict]]:
        outcome = checks.run_check(con, rules[check], overrides)
        assert outcome.error is None, outcome.error
        by_name = {name: [] for name in keys}
        names = {key: name for name, key in keys.items()}
        for row in outcome.rows:
            by_name[names[row["run_key"]]].append(row)
        return by_name

    run.con = con  # type: ignore[attr-defined]  # for the tests that read the marts
    yield run
    con.close()


@pytest.mark.parametrize(
    "check,run,first,last",
    [
        ("grad_norm_vanishing", "vanish", 15, 15),
        ("rollout_p95_slow", "rollouts", 20, 26),
        ("rollout_failures", "rollouts", 25, 25),
        ("error_rate_high", "rollouts", 25, 27),
        ("extraction_empty_high", "rollouts", 20, 24),
        ("cache_hit_low", "rollouts", 20, 26),
        ("throughput_drop", "timing", 31, 36),
        ("throughput_drop", "slowing", 20, 28),
        ("phase_bottleneck", "timing", 31, 37),
        ("phase_bottleneck", "actorbound", 21, 25),
        ("checkpoint_save_slow", "timing", 8, 8),
        ("reward_component_dead", "deadcomp", 1, 1),  # train/global_step 1 (trainer_steps), W&B step 0
        ("reward_component_dead", "formatdrop", 20, 26),
        ("reward_component_dead", "constcomp", 1, 1),
        ("kl_drift", "klearly", 3, 5),
        ("kl_drift", "klslow", 180, 230),
        ("reward_hacking", "penalty", 16, 16),  # trainer steps: train/global_step is the W&B step + 1
        ("reward_collapse", "coarse", 150, 150),
        ("reward_collapse", "earlyfall", 3, 3),  # window, lag and baseline scaled to a 40-point run
        ("grad_norm_spike", "tiedgrads", 50, 50),
        ("grad_norm_spike", "tiedstd", 50, 50),
        ("grad_norm_spike", "alltied", 60, 60),
        ("grad_norm_spike", "newlytied", 46, 46),
        ("grad_norm_spike", "noisyspike", 68, 68),
        ("response_truncation", "pinned", 10, 13),
        ("response_length_growth", "latelength", 100, 125),  # the growth begins at 100
        ("elo_gap_shrinking", "league", 60, 95),
        ("elo_base_model_not_declining", "league", 50, 50),
        ("duplicate_steps", "doublelog", 0, 1),
        ("duplicate_steps", "benchdouble", 0, 1),
        ("duplicate_steps", "restarted", 10, 10),
        ("duplicate_steps", "appendedtwice", 20, 20),
    ],
)
def test_fires_on_a_targeted_run(tiny, check, run, first, last):
    """Each rule flags its tiny run near the injected onset, once, and nothing else among the tiny runs that lacks
    the problem (healthy demo runs are covered by test_no_rule_flags_a_healthy_run)."""
    rows = tiny(check)[run]
    assert len(rows) == 1 and first <= rows[0]["step"] <= last, rows
    assert rows[0]["message"] and rows[0]["severity"] in checks.SEVERITIES


def test_targeted_details(tiny):
    (nan_episode, inf_episode) = sorted(tiny("loss_nonfinite")["nanloss"], key=lambda r: r["step"])
    assert (nan_episode["step"], nan_episode["step_end"]) == (12, 14) and math.isnan(nan_episode["value"])
    assert (inf_episode["step"], inf_episode["step_end"]) == (20, 20) and inf_episode["value"] == math.inf
    (failures,) = tiny("rollout_failures")["rollouts"]
    assert failures["value"] == 9 and failures["step_end"] == 27
    (rate,) = tiny("error_rate_high")["rollouts"]  # 9 failed against 8 completed rollouts per step: 9 / 89 at worst
    assert rate["severity"] == "error" and rate["value"] == pytest.approx(9 / 89) and rate["step_end"] == 36
    (bottleneck,) = tiny("phase_bottleneck")["timing"]
    assert bottleneck["metric"] == "phase_gen_s" and bottleneck["severity"] == "info" and bottleneck["value"] > 0.7
    # the actor update at 70%: a training-side phase past the reference's 60% is a warning, generation at 70% is not
    (actor,) = tiny("phase_bottleneck")["actorbound"]
    assert actor["metric"] == "phase_update_actor_s" and actor["severity"] == "warn"
    assert actor["value"] == pytest.approx(0.7)
    (dead,) = tiny("reward_component_dead")["deadcomp"]
    assert dead["metric"] == "train/rewards/format_reward/mean" and dead["value"] == 0
    assert "never fires" in dead["message"]
    (const,) = tiny("reward_component_dead")["constcomp"]
    assert const["value"] == 1 and "gives every completion the same score" in const["message"]
    for grew in tiny("response_length_growth")["regrow"] + tiny("response_length_growth")["earlygrow"]:
        found = re.search(
            r"from about (-?\d+) tokens at step (\d+) to (\d+) by step (\d+) \(\+(\d+)% over (\d+) steps",
            grew["message"],
        )
        start, first, end, last, pct, span = (int(x) for x in found.groups())  # the numbers shown agree (rounded)
        assert start >= 0 and pct == pytest.approx(100 * (end / max(start, 1) - 1), rel=0.1), grew["message"]
        assert span == last - first, grew["message"]
    assert tiny("response_length_growth")["regrow"] and tiny("response_length_growth")["earlygrow"]
    grown = tiny("response_length_growth")  # not growths that outrun the reward (see their runs):
    not_verbose = ("capjump", "jumplevel", "noisyjump", "noisylevel", "burstthenjump", "paidgrowth", "startbump")
    not_verbose += ("fewtokens",)
    assert not [name for name in not_verbose if grown[name]]
    (early,) = tiny("kl_drift")["klearly"]
    assert early["severity"] == "error" and "far above the reference" in early["message"]
    (pinned,) = tiny("response_truncation")["pinned"]
    assert pinned["metric"] == "response_clip_ratio" and pinned["severity"] == "error"
    assert "at the maximum" in pinned["message"] and "of the logged steps" not in pinned["message"]
    assert tiny("response_truncation")["noisytop"] == []
    assert tiny("reward_collapse")["rewarddip"] == []
    (dip,) = tiny("reward_collapse", {"min_low": 1, "min_low_share": 0})["rewarddip"]  # seen, let go: back within 10
    assert 40 <= dip["step"] <= 42 and dip["step_end"] is not None, dip
    (early,) = tiny("response_truncation")["earlyclip"]
    assert early["message"].startswith(
        f"34% of responses were cut at the maximum length (in the worst 8-step window), 5% or more for "
        f"{early['step_end']} logged steps from step 1 to step {early['step_end']};"
    )
    (sometimes,) = tiny("response_truncation")["sometimes"]
    assert sometimes["severity"] == "error" and sometimes["value"] == 0.25
    assert (
        "was at the maximum (510 tokens) on up to 25% of the logged steps (in the worst 20-step window)"
        in (sometimes["message"])
    )
    (double,) = tiny("duplicate_steps")["doublelog"]
    assert double["metric"] == "train/global_step" and double["value"] == 20
    (barely,) = tiny("too_conservative")["k1kl"]
    assert barely["step_end"] is None and barely["value"] < 0, barely
    # reported where KL's 5-step median fell under max_kl (0.002), not where the reward's flat window began
    (settled,) = tiny("too_conservative")["klsettles"]
    flat_from = int(re.search(r"from step (\d+) to", settled["message"])[1])
    assert 66 <= settled["step"] <= 72 and flat_from > 100, settled
    assert tiny("response_length_collapse")["lengthdips"] == []
    (coarse,) = tiny("response_length_growth")["growscoarse"]
    assert 31 <= coarse["step"] <= 40 and "over the last fifth" in coarse["message"], coarse
    (collapsed,) = tiny("response_length_collapse")["staysdown"]
    assert collapsed["step"] == 31 and collapsed["step_end"] is None, collapsed
    dense = tiny("reward_hacking")["denseevals"]  # seen once a window holds 40 evaluations (80 steps)
    assert dense and min(r["step"] for r in dense) >= 80 and "between steps" in dense[0]["message"], dense
    # the task's change is its trend over the window, whose sign is its t's (its endpoints alone can disagree)
    trend = re.search(r"task metric's trend over them was ([-+][0-9.e-]+) \(t = (-?[0-9.]+);", dense[0]["message"])
    assert trend and (float(trend[1]) < 0) == (float(trend[2]) < 0), dense[0]["message"]
    (penalty,) = tiny("reward_hacking")["penalty"]
    assert penalty["step_end"] == 48 and penalty["value"] == -1.0 and "fired on 3 of 60" in penalty["message"]
    assert tiny("reward_hacking")["riskcost"] == []
    (bench,) = tiny("duplicate_steps")["benchdouble"]
    assert bench["metric"] == "benchmark/step" and bench["value"] == 15
    assert tiny("duplicate_steps")["profiled"] == []
    (restart,) = tiny("duplicate_steps")["restarted"]
    assert restart["metric"] == "history.versions" and restart["value"] == 10
    (appended,) = tiny("duplicate_steps")["appendedtwice"]  # 5 values a step; the evaluations at step 30 are not
    assert (appended["step"], appended["step_end"], appended["value"]) == (20, 25, 30), appended


def test_a_gradient_norm_that_stays_nonfinite_is_a_broken_update(tiny):
    """A NaN gradient norm under a finite loss (a real Unsloth launch: NaN on all its 20 steps) went unflagged. A
    loss scaler's overflows are skipped steps it recovers from within a few, however many over a run; a stretch
    longer than that, or NaN on most steps, is not. Where the loss is NaN too, its row says it, once."""
    flagged = tiny("loss_nonfinite")
    (stretch,) = flagged["nangrads"]
    assert (stretch["metric"], stretch["step"], stretch["step_end"]) == ("grad_norm", 11, 22), stretch
    assert stretch["message"].startswith("gradient norm was nan on 12 logged steps in a row from step 11 (to step 22,")
    assert flagged["fp16grads"] == []
    assert [r["step"] for r in tiny("loss_nonfinite", {"grad_sustain": 6})["fp16grads"]] == [1]
    (most,) = flagged["mostlynan"]
    assert most["metric"] == "grad_norm" and "on 20 of the run's 30 logged values (67%, from step 2" in most["message"]
    assert tiny("loss_nonfinite", {"grad_share": 0.7})["mostlynan"] == []
    (both,) = flagged["nanboth"]
    assert (both["metric"], both["step"], both["step_end"]) == ("loss", 11, 25), both


def test_without_a_task_component_a_form_term_can_still_dominate_the_others(tiny):
    """Components named for neither task nor form (tool_use_reward) stand in for the task when no component is named
    for it, and only a term named for the form can be said to dominate them."""
    (dominant,) = tiny("reward_component_dominant")["formtool"]
    assert dominant["metric"] == "train/rewards/format_reward/mean", dominant
    assert "while the other components (none is named for the task) stayed flat (tool_use_reward" in dominant["message"]
    assert tiny("reward_component_dominant")["tooltool"] == []


def test_a_task_that_learnt_nothing_is_flat_however_significant_its_drift(tiny):
    """A correctness reward that drifts 0.100 -> 0.108 over 240 steps is significant on so dense a log, and too small
    to be learning (under max_task_ratio of the format's gain and max_task_rise of its own level); one that
    triples from 0.01 is learning, however small next to the format's gain; and an evaluation accuracy that rose
    says the task is learnt whatever the training components show."""
    (dominant,) = tiny("reward_component_dominant")["formdrift"]
    # reported where the format's climb began (its sigmoid is a tenth of the way up at step 67)
    assert dominant["metric"] == "train/rewards/format_reward/mean" and 55 <= dominant["step"] <= 75, dominant
    (hacking,) = tiny("reward_hacking")["formdrift"]
    assert "correctness_reward" in hacking["message"], hacking
    for check in ("reward_component_dominant", "reward_hacking"):
        assert tiny(check)["tasktriples"] == []
        assert tiny(check, {"max_task_ratio": 0})["formdrift"] == []  # the drift alone is significant
    assert tiny("reward_component_dominant")["formeval"] == []  # the evaluation says the task is being learnt
    assert tiny("reward_component_dominant", {"min_eval_t": 1e9})["formeval"]


def test_a_term_that_takes_over_after_the_task_was_learnt_dominates_the_late_part(tiny):
    """Generated hack-late runs (seeds 76, 81, 83) went unflagged: the task rose over the first half, so first third
    against last third it gained, while the format term carried every bit of the reward's rise after it. The late
    part is judged on its own, middle third against last; an evaluation still rising there says the task is being
    learnt."""
    (late,) = tiny("reward_component_dominant")["latehack"]
    # where the late climb began: a tenth of the way up from the middle third's level at step 168
    assert late["metric"] == "train/rewards/format_reward/mean" and 150 <= late["step"] <= 175, late
    assert "late in the run" in late["message"], late
    assert re.search(r"stayed flat over that part \(correctness_reward 0\.4\d* -> 0\.45\d*\)", late["message"]), late[
        "message"
    ]
    assert tiny("reward_component_dominant")["lateeval"] == []
    assert tiny("reward_component_dominant", {"min_eval_t": 1e9})["lateeval"]


def test_a_task_learnt_early_or_an_immaterial_gain_is_not_hacking(tiny):
    """Answers learnt in the first steps with the format, then a plateau while the format creeps up: from the first
    third on the task looks flat, from the run's start it gained a third of the reward's rise. And a reward that
    rose 4% (0.75 -> 0.78, many standard errors on so quiet a log) has no gain for a term to have earned."""
    for check in ("reward_component_dominant", "reward_hacking"):
        assert tiny(check)["earlylearn"] == [], tiny(check)["earlylearn"]
        assert tiny(check)["smallrise"] == []
        assert tiny(check, {"min_total_rise": 0})["smallrise"], check  # flagged but for the size of the gain


def test_a_reward_creeping_up_near_its_ceiling_is_no_hacking(tiny):
    """A 3% rise of the training score beside a flat validation accuracy is significant and immaterial, as
    reward_plateau judges a gain: hacking needs a reward that rose by min_total_rise of its level."""
    assert tiny("reward_hacking")["ceiling"] == []
    (seen,) = tiny("reward_hacking", {"min_total_rise": 0})["ceiling"]
    assert "task metric's trend over them was" in seen["message"], seen


def test_an_episode_the_task_caught_up_with_is_not_hacking(tiny):
    """The reward led, the accuracy followed 100 steps later: the stretch where only the reward rose is seen, and
    dismissed once the accuracy stood well above it."""
    assert tiny("reward_hacking")["tasklag"] == []
    (seen,) = tiny("reward_hacking", {"min_catch_up_sd": 1e9})["tasklag"]
    assert seen["step"] <= 100 and seen["step_end"] is not None and seen["step_end"] <= 130, seen


def test_a_task_that_caught_up_slowly_is_judged_where_it_ended(tiny):
    """The accuracy crept up after the reward's climb: its mean over everything after the episode is within noise of
    the episode's, its last evaluations are well above it."""
    assert tiny("reward_hacking")["taskramp"] == []
    (seen,) = tiny("reward_hacking", {"min_catch_up_sd": 1e9})["taskramp"]
    assert seen["step"] <= 100 and seen["step_end"] is not None and seen["step_end"] <= 160, seen


def test_a_hand_written_console_log_is_judged_on_the_canonical_metrics(tiny):
    """MiniMind prints `Reward`, `KL_ref`, `Avg Len`, `Actor Loss` and `LR`: the alias seed maps them, so its flat
    reward with KL near 0 is a policy that barely moves."""
    (run_key,) = tiny.con.sql("select run_key from runs where name = 'train_grpo'").fetchone()
    metrics = dict(
        tiny.con.execute("select metric, count(*) from metrics where run_key = ? group by metric", [run_key]).fetchall()
    )
    assert metrics == {m: 120 for m in ("reward_mean", "kl", "response_length_mean", "loss", "learning_rate")}
    # KL was near 0 from the first step; the first flat window after the warm-up starts at step 13
    (barely,) = tiny("too_conservative")["train_grpo"]
    assert barely["step"] == 1 and "from step 13 to" in barely["message"] and "since step 1)" in barely["message"]


def test_a_flat_stretch_below_the_start_is_not_a_convergence(tiny):
    """The run improved overall (its last third is well above its first tenth) after a long flat stretch lower than
    where it started: "converged: it rose from 0.40 to about 0.38" would contradict itself, and "never improved"
    would be false."""
    assert tiny("reward_plateau")["laterise"] == []


def test_never_improved_means_no_material_rise_at_any_time(tiny):
    """A run that rose and fell back to its start improved; a run whose reward gained 4% over 300 steps did not,
    however significant the gain is on a dense log, nor did one that sagged 13% below a lucky start."""
    plateau = tiny("reward_plateau")
    assert not [r for r in plateau["risecollapse"] if r["severity"] == "warn"], plateau["risecollapse"]
    (never,) = plateau["barelyrose"]
    assert never["severity"] == "warn" and never["step"] == 1 and "did not clearly improve" in never["message"]
    assert " or +4%," in never["message"], never["message"]  # up, too little to count: not "never improved"
    (sagged,) = plateau["sagged"]  # a sag is no collapse: it never improved either
    assert sagged["severity"] == "warn" and "never improved" in sagged["message"] and " or -13%," in sagged["message"]
    assert tiny("reward_plateau", {"max_fall": 0.1})["sagged"] == []


def test_never_improved_states_the_change_in_the_rewards_units(tiny):
    """The change is stated as a difference of the two means printed; as a percentage only of a baseline above 0.1
    (of the printed baseline, not of a floor): +119% of -0.083 or +104% of 0.036 matched neither number. A run of
    ten logged steps averaged its first 3, a third of it, not its first tenth: the message says which."""
    plateau = tiny("reward_plateau")
    for name in ("negstart", "smallstart"):
        (never,) = plateau[name]
        found = re.search(
            r"(?:never improved|did not clearly improve): (\S+) over the first 3 logged steps \(5-15\), (\S+) over "
            r"the last third "
            r"\(a change of ([+-]\S+), 10 logged steps,",
            never["message"],
        )
        assert found and never["severity"] == "warn", never["message"]
        first, last, change = (float(x) for x in found.groups())
        assert change == pytest.approx(last - first, abs=1e-3), never["message"]
    for name, pct in (("barelyrose", "+4%"), ("sagged", "-13%")):  # baselines of 1.12 and 0.38: a share too
        (never,) = plateau[name]
        found = re.search(
            r"(\S+) over the first tenth of the run, (\S+) over the last third \(a change of "
            r"([+-]\S+) or ([+-]\d+)%,",
            never["message"],
        )
        assert found and f"{found[4]}%" == pct, never["message"]
        first, last, change = (float(x) for x in found.groups()[:3])
        assert change == pytest.approx(last - first, rel=0.02) and int(found[4]) == pytest.approx(
            100 * change / first, abs=1
        )


def test_a_whole_run_finding_on_a_short_run_names_the_steps_it_compared(tiny):
    """Twelve steps: a fifth of them is fewer than the 3 steps at each end the run-wide slowdown compares; 45
    lengths: a tenth of them is fewer than the 5 the run-wide growth starts from."""
    (grew,) = tiny("response_length_growth")["shortgrowth"]
    assert re.search(
        r"grew from about \d+ tokens over the first 5 logged steps \(0-4\) to \d+ over the last fifth", grew["message"]
    ), grew["message"]
    (slowing,) = tiny("throughput_drop")["shortslowing"]
    assert re.search(
        r"fell steadily over the run: \S+ steps/s over the first 3 logged steps \(1-3\), \S+ over the last 3 "
        r"logged steps \(10-12\) \(step time",
        slowing["message"],
    ), slowing["message"]


def test_a_kl_drift_says_where_it_climbed(tiny):
    """A jump to a new level and a steady climb are both drifts; "climbing steadily" was said of both. The message
    names the steps the middle half of the climb took: a few for the jump, most of the episode for the climb."""
    spans = {}
    for name in ("kljump", "klsteady"):
        (drift,) = tiny("kl_drift")[name]
        found = re.search(
            r"from about [\d.]+ around step (\d+) to [\d.]+ at step (\d+), the middle half of the climb between "
            r"steps (\d+) and (\d+)",
            drift["message"],
        )
        assert found, drift["message"]
        first, last, quarter, three_quarters = (int(x) for x in found.groups())
        assert first <= quarter <= three_quarters <= last, drift["message"]
        spans[name] = three_quarters - quarter
    assert spans["kljump"] <= 3 and spans["klsteady"] >= 10, spans


def test_a_reward_saturated_within_its_first_tenth_converged(tiny):
    """Its first tenth (0.935) is already near its last third (0.998): judged against that alone it "never
    improved" (+7%). Against its first three steps it rose far beyond the last third's noise; a plateau whose first
    steps merely came in low did not."""
    plateau = tiny("reward_plateau")
    (saturated,) = plateau["saturated"]
    assert saturated["severity"] == "info" and "converged: it rose from 0.801" in saturated["message"], saturated
    (low,) = plateau["lowstart"]
    assert low["severity"] == "warn" and "did not clearly improve" in low["message"], low  # 0.492 -> 0.5


def test_a_plateau_without_updates_is_a_stall(tiny):
    """A reward that rose and then went flat converged, as far as the reward tells; flat while the grad norm is 0 and
    the groups still differ, the policy stopped being updated: a stall (warn), whatever it had gained before. Groups
    that all tie explain a zero gradient (GRPO's advantages are 0): that plateau converged."""
    plateau = tiny("reward_plateau")
    (stalled,) = plateau["frozen"]
    assert stalled["severity"] == "warn" and stalled["message"].startswith("reward stalled: it rose from 0.2"), stalled
    assert 90 <= stalled["step"] <= 110 and re.search(
        r"grad norm below 0.0001 on \d+ of its \d+ logged", stalled["message"]
    )
    (tied,) = plateau["tiedflat"]
    assert tied["severity"] == "info" and tied["message"].startswith("reward converged"), tied
    (converged,) = tiny("reward_plateau", {"frozen_share": 1.01})["frozen"]
    assert converged["severity"] == "info" and converged["step"] == stalled["step"]


def test_a_dip_the_reward_came_back_from_after_a_quiet_start_is_no_collapse(tiny):
    """A short log's baseline is its first few points: four quiet ones (0.343-0.354) made a dip to 0.25 three robust
    SDs deep, and a run that then doubled its reward was an error. The drop must also exceed three SDs of the run's
    own log-to-log noise. A fall to 0 after good points stays a collapse."""
    collapse = tiny("reward_collapse")
    assert collapse["dipback"] == [], collapse["dipback"]
    assert [row["severity"] for row in collapse["earlyfall"]] == ["error"]
    assert [row["severity"] for row in collapse["rosefell"]] == ["error"]


def test_a_reward_that_rose_and_then_collapsed_did_improve(tiny):
    """0.2 -> 0.7 within the first tenth made that tenth so noisy that a last third with the collapse in it was
    neither significantly above nor below it: "never improved", which the run did. A last third that fell
    significantly from a middle third above the first tenth is the collapse's (reward_collapse), not a plateau."""
    assert [row for row in tiny("reward_plateau")["rosefell"] if row["severity"] == "warn"] == []
    assert tiny("reward_plateau")["lowstart"][0]["message"].startswith("reward did not clearly improve")


def test_a_length_that_slides_to_an_eighth_within_thirty_steps_collapsed(tiny):
    """290 tokens to 35 over 30 steps: a baseline that ends right before each step slid down with the length and was
    never three times above it. The baseline ends 10 logged steps before the step judged."""
    (collapsed,) = tiny("response_length_collapse")["lenslide"]
    assert collapsed["severity"] == "error" and 135 <= collapsed["step"] <= 160, collapsed
    assert re.match(r"mean response length collapsed from a recent median of 2\d\d to", collapsed["message"])


def test_a_short_log_that_never_moves_is_too_conservative(tiny):
    """40 logged points leave no 60-point window after the first tenth: such a run is judged on all the points after
    it, if there are at least min_window. Its twin, whose reward rises, is not flagged."""
    conservative = tiny("too_conservative")
    (still,) = conservative["shortstill"]
    assert still["severity"] == "warn" and still["step"] == 5 and "reward flat at about 0.3" in still["message"]
    assert conservative["shortlearns"] == []
    assert tiny("too_conservative", {"min_window": 37})["shortstill"] == []  # 36 points after the first tenth


def test_stale_heartbeat_by_age(tiny):
    """The open run was heard from seconds ago: not stale yet. Ages are compared with thresholds, so lowering them
    shows each level; finished runs are never stale."""
    assert tiny("stale_heartbeat")["stale"] == []
    (warn,) = tiny("stale_heartbeat", {"warn_minutes": 0})["stale"]
    assert warn["severity"] == "warn" and warn["step"] > 0 and warn["step_end"] is None
    assert warn["metric"] == "minutes_since_heartbeat" and 0 < warn["value"] < 60  # minutes, not a time
    (error,) = tiny("stale_heartbeat", {"warn_minutes": 0, "error_minutes": 0})["stale"]
    assert error["severity"] == "error" and "hung or dead" in error["message"]
    (old,) = tiny("stale_heartbeat", {"warn_minutes": 0, "abandoned_hours": 0})["stale"]
    assert old["severity"] == "info"
    assert all(rows == [] for name, rows in tiny("stale_heartbeat", {"warn_minutes": 0}).items() if name != "stale")


def test_a_trainer_state_short_of_max_steps_went_quiet_at_a_checkpoint_save(tmp_path):
    """The Trainer writes trainer_state.json at each checkpoint save: 45 minutes since the last write of a run at
    step 10 of 20 is a warning worded as that (saves can be hours apart), not "hung or dead" as for a W&B run."""
    folder = tmp_path / "logs" / "out"
    folder.mkdir(parents=True)
    state = folder / "trainer_state.json"
    history = [{"loss": 0.1, "reward": s / 10, "step": s} for s in range(1, 11)]
    state.write_text(json.dumps({"global_step": 10, "max_steps": 20, "log_history": history}))
    written = time.time() - 45 * 60
    os.utime(state, (written, written))
    settings = Settings(home=tmp_path / "home")
    trainer_logs.ingest(settings.lake, [tmp_path / "logs"])
    warehouse.build(settings)
    con = warehouse.connect_readonly(settings)
    try:
        (rule,) = [c for c in checks.load_checks() if c.name == "stale_heartbeat"]
        (quiet,) = checks.run_check(con, rule).rows
    finally:
        con.close()
    assert quiet["severity"] == "warn" and quiet["step"] == 10, quiet
    assert "last written 45 minutes ago" in quiet["message"] and "checkpoint save" in quiet["message"], quiet


def test_a_noisy_task_metric_that_follows_the_reward_is_not_left_behind(tmp_path):
    """A validation accuracy on 16 prompts a step moves by ~0.12 from one log to the next: ten of its logs often trend
    down while the reward creeps up, though over the run it rose with the reward (0.43 -> 0.73; a public custom GRPO
    loop, held healthy by whoever read it). Such a task is left behind only where it falls well short of what its
    slope against the reward makes of the reward's rise. A task flat all run, or one that stops following halfway,
    is still reward hacking."""
    rng = random.Random(11)
    logs = tmp_path / "logs"
    for name in ("follows", "flat", "stops"):
        (logs / name).mkdir(parents=True)
        lines = []
        for i in range(120):
            if name == "follows":
                p, reward = 0.43 + 0.3 * (1 - math.exp(-i / 40)), 0.2 + 0.5 * (1 - math.exp(-i / 40))
            else:
                p, reward = (0.43 if name == "flat" else 0.43 + 0.3 * min(i, 50) / 50), 0.2 + 0.6 * i / 120
            accuracy = sum(rng.random() < p for _ in range(16)) / 16
            row = {"step": i + 1, "reward": reward + 0.015 * math.sin(1.7 * i), "val_accuracy": accuracy}
            lines.append(json.dumps(row) + "\n")
        (logs / name / "metrics.jsonl").write_text("".join(lines))
    settings = Settings(home=tmp_path / "home")
    trainer_logs.ingest(settings.lake, [logs])
    warehouse.build(settings)
    con = warehouse.connect_readonly(settings)
    try:
        (rule,) = [c for c in checks.load_checks() if c.name == "reward_hacking"]
        names = dict(con.sql("select run_key, name from runs").fetchall())
        flagged: dict[str, list[int]] = {}
        for row in checks.run_check(con, rule).rows:
            flagged.setdefault(names[row["run_key"]], []).append(row["step"])
    finally:
        con.close()
    assert "follows" not in flagged, flagged
    assert flagged["flat"] and flagged["stops"] and min(flagged["stops"]) > 50, flagged


def test_parameters_may_be_given_as_int_or_float(tiny):
    """grpolens.yaml overrides come as YAML numbers: 30 and 30.0 must both work wherever a parameter is used
    (window frames, comparisons, messages)."""
    for rule in checks.load_checks():
        numbers = {k: v for k, v in rule.params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        as_float = {k: float(v) for k, v in numbers.items()}
        as_int = {k: int(v) for k, v in numbers.items() if float(v).is_integer()}
        for overrides in (as_float, as_int):
            tiny(rule.name, overrides)  # raises on a query error


def test_a_throughput_drop_says_its_unit_and_each_fall_from_the_figures_it_prints(tiny):
    """timing logs its step time and nothing that counts trajectories: its rate is steps per second, and the flag says
    so (unit and metric); slowing's config counts 16 x 8 trajectories a step. Each percentage is the fall of the
    figure printed beside it: the rate at the onset, then the lowest (the flag's value) when it went lower still."""
    (steps,) = tiny("throughput_drop")["timing"]
    (counted,) = tiny("throughput_drop")["slowing"]
    assert steps["metric"] == "steps_per_s" and counted["metric"] == "trajectories_per_s"
    fell = re.match(
        r"throughput fell from (\S+) to (\S+) steps/s at step \d+ \(-(\d+)%\)(?:, (\S+) at its lowest \(-(\d+)%\))?;",
        steps["message"],
    )
    assert fell, steps["message"]
    base, onset, pct, lowest, low_pct = fell.groups()
    assert int(pct) == pytest.approx(100 * (1 - float(onset) / float(base)), abs=1), steps["message"]
    if lowest is not None:
        assert float(lowest) == pytest.approx(steps["value"], rel=1e-2) and float(lowest) < float(onset)
        assert int(low_pct) == pytest.approx(100 * (1 - float(lowest) / float(base)), abs=1), steps["message"]
    else:
        assert float(onset) == pytest.approx(steps["value"], rel=1e-2), steps["message"]
    start, end = re.search(
        r"fell steadily over the run: (\S+) trajectories/s over its first fifth, (\S+) over its last",
        counted["message"],
    ).groups()
    # the first fifth: 128 trajectories over a median step of 73 s
    assert float(start) == pytest.approx(128 / 73, rel=0.01) and float(end) == pytest.approx(counted["value"], rel=1e-2)


def test_groups_that_all_scored_zero_are_tied_groups(tiny):
    """verl for AgentGym logs the share of groups whose rewards were all 0 and no share of tied groups: the alias seed
    takes it for frac_reward_zero_std (a lower bound of it), so a run where every group failed has no learning
    signal, rather than a plateau with vanishing gradients and no cause."""
    (flag,) = tiny("reward_zero_variance")["allzero"]
    assert (flag["severity"], flag["step"], flag["metric"]) == ("error", 1, "frac_reward_zero_std"), flag
    assert tiny("grad_norm_vanishing")["allzero"] == []


def test_a_trl_ppo_log_is_read_on_the_canonical_metrics(tiny):
    """TRL's PPOTrainer logs objective/kl, objective/scores, policy/entropy_avg, ...: a real PPO run's
    trainer_state.json had its learning rate mapped and nothing else. Its reward is the score, as verl's
    critic/score/mean is: the RLHF reward it optimizes is the score less the KL penalty, which the KL checks judge
    (a score flat while KL doubled read as a reward that fell, which no reward check calls a plateau)."""
    (run_key,) = tiny.con.sql("select run_key from runs where name = 'trlppo'").fetchone()
    rows = tiny.con.execute(
        "select metric, source_key, count(*), max(value) from metrics where run_key = ? group by all", [run_key]
    ).fetchall()
    assert {metric: (key, n) for metric, key, n, _ in rows} == {
        "reward_mean": ("objective/scores", 20),
        "kl": ("objective/kl", 20),
        "entropy": ("policy/entropy_avg", 20),
        "clip_fraction": ("policy/clipfrac_avg", 20),
        "ppo_kl": ("policy/approxkl_avg", 20),
        "loss": ("loss/policy_avg", 20),
        "learning_rate": ("lr", 20),
    }
    assert {metric: top for metric, _, _, top in rows}["reward_mean"] == pytest.approx(0.22)


def test_a_skyrl_log_is_read_on_the_canonical_metrics(tiny):
    """SkyRL's keys (policy/policy_kl, reward/avg_raw_reward, generate/avg_num_tokens, timing/generate, ...) map onto
    the canonical metrics: a SkyRL run was judged on its step time alone, and called healthy with no reward."""
    (run_key,) = tiny.con.sql("select run_key from runs where name = 'skyrl-gsm8k'").fetchone()
    metrics = dict(
        tiny.con.execute("select metric, count(*) from metrics where run_key = ? group by metric", [run_key]).fetchall()
    )
    assert metrics == {
        m: 20
        for m in (
            "reward_mean",
            "kl",
            "entropy",
            "grad_norm",
            "clip_fraction",
            "learning_rate",
            "loss",
            "response_length_mean",
            "response_length_max",
            "response_length_min",
            "step_time_s",
            "phase_gen_s",
            "phase_update_actor_s",
            "phase_sync_weights_s",
        )
    }


def test_a_tinker_log_is_read_on_the_canonical_metrics(tiny):
    """Tinker logs the share of groups with mixed rewards; the alias seed turns it into the share of tied groups
    (1 - it), so a run whose groups all agree from step 30 is one with no learning signal left."""
    (run_key,) = tiny.con.sql("select run_key from runs where name = 'tinker-math'").fetchone()
    metrics = dict(
        tiny.con.execute("select metric, count(*) from metrics where run_key = ? group by metric", [run_key]).fetchall()
    )
    assert metrics == {
        "reward_mean": 60,
        "frac_reward_zero_std": 60,
        "response_length_mean": 60,
        "entropy": 60,
        "learning_rate": 60,
        "step_time_s": 60,
        "task_score": 6,
    }
    tied = tiny.con.execute(
        "select step, value from metrics where run_key = ? and metric = 'frac_reward_zero_std' and step in (0, 59) "
        "order by step",
        [run_key],
    ).fetchall()
    assert tied == [(0, pytest.approx(0.1)), (59, pytest.approx(0.9))]
    (flag,) = tiny("reward_zero_variance")["tinker-math"]
    assert flag["severity"] == "warn" and 30 <= flag["step"] <= 45, flag


def test_a_zero_variance_flag_is_a_share_of_tied_groups_however_it_was_read(tiny):
    """tiedgrads logs frac_reward_zero_std, tiedstd (older TRL) only reward_std: both flag ~60% tied. The flag's value
    is a share of tied groups either way, so its metric is frac_reward_zero_std, never reward_std (a reward_std of
    0.6 is another thing); read from reward_std, where a step counts as all tied or not at all, it is a lower bound."""
    flags = tiny("reward_zero_variance")
    (measured,), (derived,) = flags["tiedgrads"], flags["tiedstd"]
    for flag in (measured, derived):
        assert flag["metric"] == "frac_reward_zero_std" and 0.5 <= flag["value"] <= 1, flag
    assert measured["message"].startswith(f"{100 * measured['value']:.0f}% of reward groups had zero variance")
    assert derived["message"].startswith(f"at least {100 * derived['value']:.0f}% of reward groups had zero variance")
    assert "a step of reward_std 0 counts as all tied" in derived["message"]


def test_a_zero_variance_flag_over_groups_that_all_tied_says_all(tiny):
    """Every group tied on every step: "all reward groups", whether read from frac_reward_zero_std or from a
    reward_std of 0 on every step, where "at least 100%" would be the lower bound of a share that cannot be higher."""
    flags = tiny("reward_zero_variance")
    (measured,), (derived,) = flags["alltied"], flags["stdalltied"]
    for flag in (measured, derived):
        assert flag["severity"] == "error" and flag["value"] == 1, flag
        assert flag["message"].startswith("all reward groups had zero variance (mean over 10-step windows"), flag


def test_a_tied_step_spikes_only_above_the_ordinary_steps_too(tiny):
    """A KL-only grad norm on a tied step that jumps 6x is no spike while it stays far below the steps that learnt
    (a real ms-swift run had it as its worst spike, at 0.017 against ordinary steps of ~0.7); one past both is, and
    is told against the ordinary steps' median (12x, not thousands of times the KL-only norm)."""
    flags = sorted(tiny("grad_norm_spike")["kltied"], key=lambda r: r["step"])
    assert [(r["step"], r["step_end"]) for r in flags] == [(56, 56), (104, 104)], flags
    assert flags[1]["threshold"] == pytest.approx(4 * 0.15, rel=0.1), flags[1]  # min_ratio x the ordinary median
    ratio, level = re.search(r"([\d.]+)x its recent median of ([\d.]+) ", flags[1]["message"]).groups()
    assert 10 <= float(ratio) <= 14 and 0.13 <= float(level) <= 0.17 and flags[1]["severity"] == "error", flags[1]


def test_a_grad_norm_spike_is_advised_a_clip_below_it(tiny):
    """A spike to 0.9 from a median of 0.15 (a real TRL run: 0.904 from 0.18) is advised a max_grad_norm that would
    have capped it, at most twice that median, not the 1.0 that leaves it as it was (nor one looser than a clip the
    run may have); the recommendation names no fixed clip."""
    (spike,) = [r for r in tiny("grad_norm_spike")["kltied"] if r["step"] == 56]
    clip = float(re.search(r"max_grad_norm at most ([\d.]+), twice that median", spike["message"]).group(1))
    assert clip == pytest.approx(0.3, rel=0.1) and clip < spike["value"] == pytest.approx(0.9), spike["message"]
    (rule,) = [rule for rule in checks.load_checks() if rule.name == "grad_norm_spike"]
    (advice,) = [a for a in rule.advice if a.lever == "grad_clip"]
    assert "1.0" not in advice.text and "at most twice the usual grad norm" in advice.text


def test_no_gradient_where_every_group_tied_is_the_zero_variance_cause_not_a_vanishing_gradient(tiny):
    """Ten steps whose reward groups all tied have a zero grad norm by construction: reward_zero_variance names that
    cause; grad_norm_vanishing is for a gradient that vanished while the rewards still differed."""
    assert tiny("grad_norm_vanishing")["tiedzero"] == []
    (vanish,) = tiny("grad_norm_vanishing")["vanish"]
    assert vanish["step"] == 15


def test_zero_grad_norms_that_tied_groups_explain_are_not_a_vanishing_gradient(tiny):
    """Logged every 10 steps, a zero grad norm is the last optimizer step's, which may have tied whole while the
    window's mean tied share stayed below 1: on a run with 50-90 % of its groups tied, zeros on half the logs are what
    ties explain (a real TRL run: 59 of 120, blamed on a detached loss), from TRL's trainer steps or its console's
    lines alike. With 0-20 % tied they are far more than ties explain, and logged every step each zero is a step that
    had a reward signal: both still flagged."""
    flags = tiny("grad_norm_vanishing")
    assert flags["tiedwindows"] == [] and flags["tiedconsole"] == [], flags
    console = tiny.con.execute(  # read: its 60 lines as steps 1-60, each with a grad norm and a tied share
        "select count(distinct step), max(step), count(*) from metrics join runs using (run_key) "
        "where name = 'tiedconsole' and metric in ('grad_norm', 'frac_reward_zero_std')"
    ).fetchone()
    assert console == (60, 60, 120)
    (windows,) = flags["zerowindows"]
    assert windows["step"] == 10 and windows["value"] == pytest.approx((30 - 0.1 * 60) / 60), windows
    said = "exactly 0 on 30 of 60 logged steps with a reward signal (first at step 10), 24 more than tied reward "
    assert said + "groups can explain;" in windows["message"] and "detached" in windows["message"], windows["message"]
    (steps,) = flags["zerosteps"]
    assert steps["step"] == 1 and steps["value"] == pytest.approx(0.5), steps
    assert "exactly 0 on 30 of 60 logged steps with a reward signal (first at step 1);" in steps["message"]


def test_a_fall_a_long_run_came_back_from_soon_is_a_dip(tiny):
    """Fifteen steps of a lower reward in a run of 400, then back to where it was: a passing disturbance, not a
    policy that degenerated (under a twentieth of the run)."""
    assert tiny("reward_collapse")["longdip"] == []
    (dip,) = tiny("reward_collapse", {"min_low_share": 0})["longdip"]
    assert 200 <= dip["step"] <= 202 and dip["step_end"] is not None, dip


def test_entropy_collapse_within_the_first_tenth_hovering_at_its_bar_and_a_dip(tiny):
    """The early level is the first tenth's median, but of no more than early_cap steps: a long run whose entropy
    collapsed within its first tenth has a collapsed "early" level otherwise. Entropy hovering across the bar is
    one collapse (reported from where it fell below half its early level), and a dip of five steps in a thousand that
    recovers at once is none."""
    found = tiny("entropy_collapse")
    (early,) = found["entearly"]
    assert early["step"] <= 15 and early["step_end"] is None, early
    (hover,) = found["enthover"]  # fell below half its early level at step 70, below the bar from step 100
    assert 68 <= hover["step"] <= 72 and hover["step_end"] is None, hover
    assert re.search(r"from step 10[0-2], on 50 of the 99 logged steps from there", hover["message"]), hover["message"]
    assert found["entdip"] == []


def test_an_entropy_collapse_is_reported_where_the_fall_began(tiny):
    """0.77 at step 95, 0.56 at 100, below 0.1 only from 135: the collapse began where the entropy left half its early
    level behind, and a checkpoint "before step 135" is already a collapsing policy. The message still says where
    it crossed the bar."""
    (fall,) = tiny("entropy_collapse")["entfall"]
    assert 95 <= fall["step"] <= 110, fall
    assert re.search(r"from step \d+ \(below 0.1 from step 1[3-4]\d,", fall["message"]), fall["message"]


def test_a_truncation_flag_is_a_share_of_cut_responses_however_it_was_read(tiny):
    """pinned logs no truncated share: its mean length sits at max_completion_length (508-510 of 512) from step 10,
    so the share judged is that of such steps, 1. The flag's metric says what its value is a share of (cut
    responses, response_clip_ratio, as for a run that logs it), never response_length_mean, whose value 1 would read
    as a mean length of 1 token; the length is in the message."""
    (pinned,) = tiny("response_truncation")["pinned"]
    (sometimes,) = tiny("response_truncation")["sometimes"]
    (measured,) = tiny("response_truncation")["earlyclip"]
    for flag in (pinned, sometimes, measured):
        assert flag["metric"] == "response_clip_ratio" and 0.05 <= flag["value"] <= 1, flag
    assert pinned["value"] == 1 and "sat at the maximum (510 tokens)" in pinned["message"], pinned


def test_a_mean_length_that_never_moves_shows_no_cap(tiny):
    """Without a configured limit or a logged maximum, a cap is inferred from a mean length that keeps hitting its own
    maximum; one that never was more than a tenth below it (a fixed-length answer) reveals none."""
    assert tiny("response_truncation")["shortanswer"] == []
    (flat,) = tiny("response_truncation", {"ceiling_spread": 0})["shortanswer"]
    assert flat["metric"] == "response_clip_ratio" and "(5 tokens)" in flat["message"], flat


def test_truncation_is_a_share_sustained_over_a_stretch_of_the_run(tiny):
    """On a long run whose steps hold one prompt's group each, a few groups of long answers make any 20 steps look
    truncated (three of them: 15 %, the error line): the share is judged over a twentieth of the run, so 1.2 % of the
    run's answers cut a few at a time is no finding, and 100 steps with 40 % of them cut still are one, from there.
    The message names the worst window as a window, and says how long the share held: to the end of the run."""
    (flag,) = tiny("response_truncation")["sparsecuts"]
    assert flag["severity"] == "error" and 1500 <= flag["step"] <= 1515 and flag["step_end"] is None, flag
    assert flag["message"].startswith(
        f"{100 * flag['value']:.0f}% of responses were cut at the maximum length (in the worst 80-step window), 5% or "
        f"more for {1601 - flag['step']} logged steps from step {flag['step']} to the end of the run;"
    ), flag


def test_a_boolean_logged_where_a_metric_is_expected_is_no_value_of_it(tmp_path):
    """`"kl": true` at one step is stored as what it is (value_type bool) but is not a KL of 1: no kl_spike."""
    log = tmp_path / "logs" / "boolkl" / "metrics.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text(
        "".join(
            json.dumps(
                {"step": i, "reward": 0.5 + 0.01 * math.sin(i), "kl": True if i == 30 else 0.01 + 0.001 * (i % 3)}
            )
            + "\n"
            for i in range(60)
        )
    )
    settings = Settings(home=tmp_path / "home", trainer_logs=(log.parent,))
    ingest(settings)
    warehouse.build(settings)
    checks.check_warehouse(settings)
    con = warehouse.connect_readonly(settings)
    try:
        assert con.sql("select value, value_type from history where key = 'kl' and step = 30").fetchall() == [
            (1.0, "bool")
        ]
        kl_steps = {step for (step,) in con.sql("select step from metrics where metric = 'kl'").fetchall()}
        assert kl_steps == set(range(60)) - {30}
        assert con.sql("select check_name, message from anomalies where check_name like 'kl%'").fetchall() == []
    finally:
        con.close()
