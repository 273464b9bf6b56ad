"""The check runner and its wiring: headers, parameters and overrides, failures per check, the CLI contract."""

from __future__ import annotations

import json
import math
import random
import re
import shutil

import pytest

from pipeline import checks, warehouse
from pipeline.ingest import ingest
from pipeline.settings import SQL_DIR, Settings
from tests.conftest import PLANTED, grpolens, plant_flag
from tests.wandb_writer import write_run


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Settings:
    """Two TRL-style runs written by wandb: one whose entropy collapses at step 40, and its healthy twin."""
    root = tmp_path_factory.mktemp("runs")
    rng = random.Random(2)
    for run_id, collapse in (("collapse", True), ("healthy0", False)):
        rows = []
        for step in range(80):
            entropy = 0.6 * math.exp(-step / 200) + rng.gauss(0, 0.01)
            if collapse and step >= 40:
                entropy = 0.004 + abs(rng.gauss(0, 0.001))
            rows.append(
                {
                    "train/entropy": entropy,
                    "train/kl": 0.03 + rng.gauss(0, 0.004),
                    "train/reward": 0.5 + step / 200 + rng.gauss(0, 0.05),
                }
            )
        write_run(root, rows, run_id=run_id, name=run_id, project="trl-grpo")
    settings = Settings(home=tmp_path_factory.mktemp("home"), wandb_dirs=(root,))
    ingest(settings)
    warehouse.build(settings)
    return settings


def test_every_check_file_parses_with_its_header():
    rules = checks.load_checks()
    assert {r.name for r in rules} >= {"kl_spike", "entropy_collapse"}
    for rule in rules:
        assert rule.description and rule.reads, rule.name
        assert rule.severity in checks.SEVERITIES
    spike = checks.parse_check(SQL_DIR / "checks" / "kl_spike.sql")
    assert spike.params["min_kl"] == 0.2 and spike.requires == ("kl",) and spike.reads[0] == "metrics"
    with pytest.raises(checks.CheckError, match="unknown parameter"):
        spike.bound({"min_KL": 1})


def test_fires_on_the_collapse_not_on_its_twin_and_a_threshold_is_a_real_parameter(home):
    con = warehouse.connect_readonly(home)
    try:
        rule = checks.parse_check(SQL_DIR / "checks" / "entropy_collapse.sql")
        (row,) = checks.run_check(con, rule).rows
        assert row["run_key"].endswith("/collapse") and 40 <= row["step"] <= 42 and row["step_end"] is None
        assert row["value"] < 0.01 and "entropy fell" in row["message"]
        assert checks.run_check(con, rule, {"floor": 0.001}).rows == []  # the override is bound, not ignored
    finally:
        con.close()


def test_a_broken_check_is_reported_and_the_others_still_run(home, tmp_path):
    broken = tmp_path / "broken_rule.sql"
    broken.write_text("-- broken_rule: always fails.\n-- reads: metrics\nselect * from no_such_table\n")
    con = warehouse.connect_readonly(home)
    try:
        outcomes = checks.run_checks(con, [checks.parse_check(broken), *checks.load_checks()])
    finally:
        con.close()
    assert outcomes[0].error and "no_such_table" in outcomes[0].error
    assert any(o.rows for o in outcomes[1:])


def test_cli_check_contract(home, tmp_path):
    env = {"GRPOLENS_HOME": str(home.home)}
    listed = grpolens("check", env=env)
    # the table names runs by name (their run_keys are for --format json)
    assert listed.returncode == 0 and re.search(r"^ERROR +entropy_collapse +collapse +step \d+", listed.stdout, re.M)
    assert "wandb:" not in listed.stdout
    assert grpolens("check", "--fail-on", "error", env=env).returncode == 2
    only_healthy = grpolens("check", "--run", "healthy0", "--format", "json", "--fail-on", "error", env=env)
    assert only_healthy.returncode == 0 and json.loads(only_healthy.stdout) == []
    # the anomalies table holds what the last full check found
    table = grpolens("sql", "select check_name, run_key from anomalies", "--format", "csv", env=env, check=True)
    assert "entropy_collapse" in table.stdout and "healthy0" not in table.stdout
    # a threshold from grpolens.yaml
    config = tmp_path / "grpolens.yaml"
    config.write_text("checks:\n  entropy_collapse:\n    floor: 0.001\n")
    relaxed = grpolens("check", "--format", "json", env={**env, "GRPOLENS_CONFIG": str(config)}, check=True)
    assert not any(r["check_name"] == "entropy_collapse" for r in json.loads(relaxed.stdout))
    config.write_text("checks:\n  no_such_check: {}\n")
    bad = grpolens("check", env={**env, "GRPOLENS_CONFIG": str(config)})
    assert bad.returncode == 1 and "unknown checks: no_such_check" in bad.stderr


def test_explain_says_which_checks_could_not_apply(home):
    out = grpolens("check", "--explain", env={"GRPOLENS_HOME": str(home.home)}, check=True)
    # these runs log no grad norm, no response length: checks needing them say so instead of staying silent
    lines = [line for line in out.stdout.splitlines() if line.startswith("not applicable:")]
    assert lines and "not applicable:" not in out.stderr  # the answer asked for: `check --explain | less` has it
    as_json = grpolens("check", "--explain", "--format", "json", env={"GRPOLENS_HOME": str(home.home)}, check=True)
    assert isinstance(json.loads(as_json.stdout), list) and "not applicable:" in as_json.stderr  # one JSON document
    requirements = {r.name: r.requires for r in checks.load_checks()}
    for name, requires in requirements.items():
        if any(m not in ("entropy", "kl", "reward_mean") for m in requires):
            assert any(line.startswith(f"not applicable: {name} for ") for line in lines), name


def test_not_applicable_names_the_missing_metric(home, tmp_path):
    needs = tmp_path / "needs_grad.sql"
    needs.write_text("-- needs_grad: needs a gradient norm.\n-- reads: metrics\n-- requires: grad_norm, kl\nselect 1\n")
    con = warehouse.connect_readonly(home)
    try:
        lacking = checks.not_applicable(con, [checks.parse_check(needs)])
    finally:
        con.close()
    assert sorted((name, run.rsplit("/", 1)[1], why) for name, run, why in lacking) == [
        ("needs_grad", "collapse", "no grad_norm logged"),
        ("needs_grad", "healthy0", "no grad_norm logged"),
    ]


def test_a_requirement_with_alternatives_is_met_by_either(home, tmp_path):
    """reward_zero_variance reads frac_reward_zero_std, or reward_std where a run logs only that: a run with either
    is judged, and one with neither is told which metrics would do."""
    (zero_variance,) = [rule for rule in checks.load_checks() if rule.name == "reward_zero_variance"]
    assert zero_variance.requires == ("frac_reward_zero_std | reward_std",)
    assert checks.lacking(zero_variance, {"reward_std"}) == []
    assert checks.lacking(zero_variance, {"frac_reward_zero_std", "kl"}) == []
    assert checks.lacking(zero_variance, {"kl"}) == ["frac_reward_zero_std or reward_std"]
    either = tmp_path / "either.sql"
    either.write_text("-- either: one of two.\n-- reads: metrics\n-- requires: grad_norm|kl ,entropy\nselect 1\n")
    rule = checks.parse_check(either)
    con = warehouse.connect_readonly(home)
    try:
        assert rule.requires == ("grad_norm | kl", "entropy") and checks.not_applicable(con, [rule]) == []
    finally:
        con.close()


def test_recurring_episodes_fold_into_one_row_for_reading():
    """Three or more episodes of one rule on one run at one severity read as one row at the first one's place: it
    spans them all (open when any is), and its message is the longest's (an open one counts as far as the others
    reach: how long it lasts is not known) with how many there were. Fewer episodes, other severities and rows of
    no step stay as they are; the rows given are not changed."""

    def flag(check, step, end, severity="warn", run="r1", message=None):
        message = message or f"{check} from step {step}; do something"
        return {
            "run_key": run,
            "check_name": check,
            "severity": severity,
            "step": step,
            "step_end": end,
            "message": message,
        }

    rows = [
        flag("reward_zero_variance", 5, 9),
        flag("kl_spike", 7, 7),
        flag("reward_zero_variance", 20, 40),
        flag("reward_zero_variance", 50, 55, severity="error"),
        flag("kl_spike", 30, 30),
        flag("reward_zero_variance", 60, None),
        flag("reward_zero_variance", 62, 70, run="r2"),
        {**flag("extraction_empty_high", None, None, run=None), "dataset": "d"},
    ]
    before = [dict(r) for r in rows]
    shown = checks.fold_recurring(rows)
    assert rows == before
    assert [(r["run_key"], r["check_name"], r["step"]) for r in shown] == [
        ("r1", "reward_zero_variance", 5),
        ("r1", "kl_spike", 7),
        ("r1", "reward_zero_variance", 50),
        ("r1", "kl_spike", 30),
        ("r2", "reward_zero_variance", 62),
        (None, "extraction_empty_high", None),
    ]
    folded = shown[0]
    assert folded["episodes"] == 3 and folded["step_end"] is None and folded["severity"] == "warn"
    assert folded["message"] == (
        "reward_zero_variance from step 20 (the longest of 3 episodes from step 5 to the end); do something"
    )
    closed = checks.fold_recurring([flag("kl_spike", s, s + 1) for s in (3, 10, 20)], "check_name")
    assert len(closed) == 1 and (closed[0]["step"], closed[0]["step_end"]) == (3, 21)
    in_a_report = [
        {**flag("kl_spike", s, s), "check": "kl_spike", "consequence_of": c}
        for s, c in ((1, None), (2, "x"), (3, None), (4, "x"), (5, None))
    ]
    assert [r.get("episodes") for r in checks.fold_recurring(in_a_report, "check")] == [3, None, None]


def test_a_folded_line_names_the_worst_episode_not_only_the_longest():
    """unsloth-ministral3b-sudoku's three KL spikes (tests/fixtures/real): 29.3 at step 34 (110x its level, one
    step), 1.62 at 38-39 (8x, the longest) and 2.14 at 123. The folded line said the 1.62 one; it names the 29.3 one,
    and the longest beside it. A collapse is worst at its lowest; with no value or threshold it tells the longest."""

    def spike(step, end, value, threshold, level, ratio):
        message = f"KL spiked to {value:.3g} at step {step}, {ratio}x its level of {level}; lower the learning rate"
        return {
            "run_key": "r",
            "check_name": "kl_spike",
            "severity": "error",
            "step": step,
            "step_end": end,
            "value": value,
            "threshold": threshold,
            "message": message,
        }

    rows = [
        spike(34, 34, 29.33288, 0.7984, 0.266, 110),
        spike(38, 39, 1.61613, 0.5980, 0.199, 8),
        spike(123, 123, 2.141874, 0.6448, 0.215, 10),
    ]
    (folded,) = checks.fold_recurring(rows)
    assert (folded["step"], folded["step_end"], folded["value"]) == (34, 123, 29.33288)
    assert folded["message"] == (
        "KL spiked to 29.3 at step 34, 110x its level of 0.266 (the worst of 3 episodes from step 34 to step 123; "
        "the longest: step 38-39); lower the learning rate"
    )

    def collapse(step, end, value):
        return {
            **rows[0],
            "check_name": "entropy_collapse",
            "step": step,
            "step_end": end,
            "value": value,
            "threshold": 0.1,
            "message": f"entropy fell to {value} from step {step}; raise the temperature",
        }

    (low,) = checks.fold_recurring([collapse(10, 30, 0.05), collapse(50, 52, 0.001), collapse(80, 85, 0.04)])
    assert low["message"].startswith("entropy fell to 0.001 from step 50 (the worst of 3 episodes"), low["message"]
    (same,) = checks.fold_recurring([collapse(10, 30, 0.001), collapse(50, 52, 0.05), collapse(80, 85, 0.04)])
    assert "(the worst and longest of 3 episodes from step 10 to step 85)" in same["message"]


def test_a_folded_line_tells_its_episodes_outside_the_rules_brackets():
    """A rule's own brackets may hold a "; " ("(median; up to 63%)"): the fold's note goes after what was found, before
    the advice, never inside them; a message without advice gets it at its end."""

    def phase(step, end, share):
        return {
            "run_key": "r",
            "check_name": "phase_bottleneck",
            "severity": "info",
            "step": step,
            "step_end": end,
            "value": share,
            "threshold": 0.6,
            "message": f"phase gen took {share:.0%} of the step time (median; up to 63%) from step {step} for 17 "
            "logged steps: it is the bottleneck; speed it up (or overlap it) before tuning anything else",
        }

    (folded,) = checks.fold_recurring([phase(4, 20, 0.62), phase(40, 45, 0.61), phase(90, 95, 0.61)])
    assert folded["message"] == (
        "phase gen took 62% of the step time (median; up to 63%) from step 4 for 17 logged steps: it is the bottleneck "
        "(the worst and longest of 3 episodes from step 4 to step 95); speed it up (or overlap it) before tuning "
        "anything else"
    )
    bare = [{**phase(s, s + 5, 0.62), "message": "phase gen took 62% (median; up to 63%)"} for s in (4, 40, 90)]
    (folded,) = checks.fold_recurring(bare)
    assert folded["message"] == (
        "phase gen took 62% (median; up to 63%) (the worst and longest of 3 episodes from step 4 to step 95)"
    )


def test_the_readme_table_lists_every_rule_with_its_thresholds():
    """README's check table is the rules' headers: a threshold changed in a rule file must change there too."""
    from pipeline.settings import PROJECT_ROOT

    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    for rule in checks.load_checks():
        [row] = [line for line in readme.splitlines() if line.startswith(f"| `{rule.name}` |")]
        assert f"| {rule.severity} |" in row, rule.name
        for name, value in rule.params.items():
            assert f"`{name}={value}`" in row, (rule.name, name)


def test_an_up_to_date_anomalies_table_is_the_answer_until_the_rules_change(home, tmp_path, monkeypatch):
    """Reports, `check --run` and Dagster's asset checks read the table while it reflects the warehouse (a flag
    planted there shows), and run the rules themselves, writing nothing, once the thresholds changed."""
    settings = Settings(home=tmp_path / "home")
    shutil.copytree(home.home, settings.home)
    checks.check_warehouse(settings)  # the table, as a refresh leaves it
    healthy = plant_flag(settings, "healthy0")
    read = [row for o in checks.check_warehouse(settings, healthy, persist=False) for row in o.rows]
    assert [row["message"] for row in read] == [PLANTED]
    listed = grpolens("check", "--run", "healthy0", "--format", "json", env={"GRPOLENS_HOME": str(settings.home)})
    assert [row["message"] for row in json.loads(listed.stdout)] == [PLANTED]
    config = tmp_path / "grpolens.yaml"
    config.write_text("checks:\n  entropy_collapse:\n    floor: 0.001\n")
    monkeypatch.setenv("GRPOLENS_CONFIG", str(config))
    assert [row for o in checks.check_warehouse(settings, healthy, persist=False) for row in o.rows] == []
    con = warehouse.connect_readonly(settings)
    try:  # nothing was written: the planted flag is still there until a check persists
        assert con.execute("select count(*) from anomalies where message = $m", {"m": PLANTED}).fetchone()[0] == 1
    finally:
        con.close()
