"""`grpolens report`: the verdict, root cause and recommendation of a run, on the demo's runs (written by the real
wandb library with known problems), on a real public run given as a path, and on runs that give a report little
to stand on."""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path

import polars as pl
import pytest

from pipeline import checks
from pipeline.report import batch, run_report, story, tracker
from pipeline.settings import Settings
from tests.conftest import LENGTH_COLLAPSE, grpolens, write_jsonl

HEALTHY_DEMO_RUNS = ("league-main", "trl-gsm8k-healthy", "verl-healthy", "trl-qwen-gsm8k-no-wandb")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    grpolens("demo", env={"GRPOLENS_HOME": str(home)}, check=True)
    return Settings(home=home)


def report_json(settings: Settings, run: str, *extra: str) -> dict:
    proc = grpolens("report", run, "--format", "json", *extra, env={"GRPOLENS_HOME": str(settings.home)}, check=True)
    return json.loads(proc.stdout)


def test_length_collapse_is_the_root_cause_with_its_consequences(demo):
    doc = report_json(demo, "verl-length-collapse")
    assert doc["verdict"] == "unhealthy"
    assert doc["root_cause"]["check"] == "response_length_collapse" and doc["root_cause"]["severity"] == "error"
    onset = doc["root_cause"]["step"]
    story = {
        f["check"]: f for f in doc["findings"] if "response_length_collapse" in (f["consequence_of"], f["related_to"])
    }
    assert {"grad_norm_spike", "reward_collapse"} <= set(story)
    for f in story.values():  # the length detector fires once the fall crosses its bar, after its first effects
        assert (f["consequence_of"] is not None) == (f["step"] >= onset), f
    assert set(doc) >= {"run", "run_key", "verdict", "root_cause", "findings", "recommendation", "sections", "files"}
    assert doc["run"] == "verl-length-collapse" and doc["run_key"].startswith("wandb:")
    for finding in doc["findings"]:
        assert set(finding) >= {
            "check",
            "severity",
            "step",
            "step_end",
            "metric",
            "value",
            "message",
            "consequence_of",
            "related_to",
        }


def test_healthy_demo_runs_are_healthy_and_problem_runs_are_not(demo):
    for name in HEALTHY_DEMO_RUNS:
        doc = report_json(demo, name)
        assert doc["verdict"] == "healthy" and doc["root_cause"] is None, (name, doc["findings"])
        assert doc["recommendation"].startswith("No action needed")
    assert report_json(demo, "trl-entropy-collapse")["root_cause"]["check"] == "entropy_collapse"
    assert report_json(demo, "verl-plateau")["verdict"] == "watch"


def test_one_recommendation_without_repeats_or_contradictions(demo):
    for summary in batch.write_reports(demo):
        doc = json.loads(Path(summary["markdown"]).with_name("report.json").read_text())
        levers = [a["lever"] for a in doc["actions"]]
        assert len(levers) == len(set(levers)), doc["run"]
        assert len(doc["actions"]) <= story.MAX_ACTIONS
        if doc["verdict"] != "healthy":
            assert doc["actions"] and doc["recommendation"].startswith("1. "), doc["run"]


def test_conflicting_advice_is_resolved_towards_the_story_that_came_first():
    rules = {rule.name: rule for rule in checks.load_checks()}
    findings = [
        {
            "check": "kl_spike",
            "severity": "error",
            "step": 50,
            "step_end": None,
            "metric": "kl",
            "value": 1.0,
            "threshold": 0.2,
            "message": "spike",
        },
        {
            "check": "too_conservative",
            "severity": "warn",
            "step": 10,
            "step_end": 40,
            "metric": "kl",
            "value": 0.001,
            "threshold": 0.002,
            "message": "flat",
        },
    ]
    again = dict(findings[1], step=60, step_end=70)  # a second episode of the overruled rule says nothing new
    told = story.tell([*findings, again], rules, list(range(100)))
    assert told.root["check"] == "kl_spike" and told.verdict == "unhealthy"
    lr = [a for a in told.actions if a["lever"] == "learning_rate"]
    assert len(lr) == 1 and lr[0]["direction"] == "down"
    (note,) = [note for note in told.overruled if "too_conservative" in note and "learning_rate" in note]
    assert "because kl_spike (advised before it) points learning_rate down" in note


def test_markdown_files_plots_and_the_recorded_sections(demo):
    doc = report_json(demo, "league-main")
    markdown = Path(doc["files"]["markdown"])
    assert markdown == demo.reports_dir / "league-main" / "report.md"
    text = markdown.read_text()
    assert text.startswith("# Run report: league-main") and "**Verdict: HEALTHY**" in text
    applied, of_all = doc["rules_applied"]
    assert of_all == len(checks.load_checks()) and 0 < applied < of_all  # a Diplomacy run logs no clip fraction
    assert f"({applied} of {of_all} rules applied)" in text.split("\n")[4]
    for plot in doc["files"]["plots"]:
        assert Path(plot).read_bytes()[:4] == b"\x89PNG" and f"]({Path(plot).name})" in text
    names = {Path(p).name for p in doc["files"]["plots"]}
    assert {"core_curves.png", "elo_gap.png"} <= names
    elo = doc["sections"]["elo"]
    assert elo["gap"] > 0 and elo["gap_ci"][0] > 0 and "learning" in elo["verdict"]
    reward = doc["sections"]["learning_dynamics"]["reward_mean"]
    assert reward["trend"]["significant"] and reward["trend"]["slope"] > 0 and reward["last"] > reward["first"]
    assert doc["sections"]["standing"]["runs"] >= 2
    assert doc["sections"]["power_law"]["compute_basis"] == "simulated_years"
    for heading in ("## The Good", "## The Bad", "## The Ugly", "## Learning dynamics", "## Elo of fixed references"):
        assert heading in text


def test_a_missing_run_is_one_line_with_close_names(demo):
    proc = grpolens("report", "verl-length-colapse", env={"GRPOLENS_HOME": str(demo.home)})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "did you mean verl-length-collapse" in proc.stderr


def test_tracker_entry_is_added_once_and_updated_in_place(demo, tmp_path):
    path = tmp_path / "docs" / "experiment-tracker.md"
    path.parent.mkdir()
    path.write_text("# My experiments\n\nNotes I wrote by hand.\n")
    env = {"GRPOLENS_HOME": str(demo.home)}
    grpolens("report", "verl-plateau", "--tracker", str(path), env=env, check=True)
    first = path.read_text()
    grpolens("report", "verl-plateau", "--tracker", str(path), env=env, check=True)
    assert path.read_text() == first  # idempotent
    grpolens("report", "league-main", "--tracker", str(path), env=env, check=True)
    text = path.read_text()
    assert text.startswith("# My experiments\n\nNotes I wrote by hand.\n")
    assert text.count("### verl-plateau — watch") == 1 and text.count("### league-main — healthy") == 1
    assert text.index("verl-plateau") < text.index("### league-main")
    doc = json.loads((demo.reports_dir / "verl-plateau" / "report.json").read_text())
    changed = dict(doc, verdict="unhealthy")
    assert tracker.update(path, changed, doc["files"]["markdown"])
    assert (
        path.read_text().count("### verl-plateau — unhealthy") == 1
        and "### verl-plateau — watch" not in path.read_text()
    )


def test_a_real_run_given_as_a_path(tmp_path):
    """The real verl run whose length collapsed: given as its folder, with no variables set."""
    doc = json.loads(
        grpolens(
            "report",
            str(LENGTH_COLLAPSE),
            "--format",
            "json",
            env={"GRPOLENS_HOME": str(tmp_path / "home")},
            check=True,
        ).stdout
    )
    assert doc["run"] == "qwen2_3b_opd" and doc["verdict"] == "unhealthy"
    assert doc["root_cause"]["check"] == "response_length_collapse"
    onset = doc["root_cause"]["step"]
    consequences = {f["check"]: f for f in doc["findings"] if f["consequence_of"] == "response_length_collapse"}
    assert "grad_norm_spike" in consequences and all(f["step"] >= onset for f in consequences.values())
    # the reward's detector fires at step 30, six steps before the length's: related, not a consequence
    (reward,) = [f for f in doc["findings"] if f["check"] == "reward_collapse"]
    assert (
        reward["step"] < onset and reward["related_to"] == "response_length_collapse" and not reward["consequence_of"]
    )
    assert doc["summary"].endswith("and 1 related finding"), doc["summary"]
    text = Path(doc["files"]["markdown"]).read_text()
    assert "Related (starting within" in text and "so not its consequences):\n- `reward_collapse`" in text
    samples = doc["sections"]["samples"]
    assert samples["available"] and samples["before"] and samples["after"]
    assert all(s["step"] < onset for s in samples["before"]) and all(s["step"] >= onset for s in samples["after"])
    # Validation lags training here: the completions right after the onset are still long, the latest are not.
    before = sum(s["length_chars"] for s in samples["before"]) / len(samples["before"])
    latest = sum(s["length_chars"] for s in samples["latest"]) / len(samples["latest"])
    assert latest < before / 3 and min(s["step"] for s in samples["latest"]) > max(s["step"] for s in samples["after"])
    assert any(n["what"] == "the end of the run" for n in doc["sections"]["not_judged"])  # no exit record: running


def test_a_path_that_holds_no_run_is_said_so_without_building_a_warehouse(tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("# What we tried\n\nNothing with numbers in it.\n")
    home = tmp_path / "home"
    proc = grpolens("report", str(notes), env={"GRPOLENS_HOME": str(home)})
    assert proc.returncode == 1 and f"no run found in {notes}" in proc.stderr
    assert not (home / "grpolens.duckdb").exists() and "dbt" not in proc.stderr


def test_a_folder_of_links_to_a_run_folder_is_the_run(tmp_path):
    """A sweep assembled as links to its run folders: the run read through the link is the folder's run, although
    its files' real paths lie elsewhere."""
    run = tmp_path / "outputs" / "2025-01-02_lr3e-6"
    write_jsonl(run / "metrics.jsonl", [{"step": s, "reward": 0.1 + 0.01 * s, "kl": 0.01} for s in range(1, 31)])
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "lr3e-6").symlink_to(run, target_is_directory=True)
    proc = grpolens("report", str(sweep), "--format", "json", env={"GRPOLENS_HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["run"] == "2025-01-02_lr3e-6"


def test_runs_with_little_to_judge_get_a_report_that_says_why(tmp_path):
    logs = tmp_path / "logs"
    write_jsonl(logs / "tiny" / "metrics.jsonl", [{"step": s, "reward": 0.1 * s, "kl": 0.01} for s in range(1, 4)])
    write_jsonl(logs / "custom" / "metrics.jsonl", [{"step": s, "my/score": s, "my/thing": 2 * s} for s in range(30)])
    write_jsonl(
        logs / "nonfinite" / "metrics.jsonl",
        [
            {
                "step": s,
                "reward": 0.5 + 0.01 * s,
                "loss": float("nan") if s % 7 == 0 else 0.1,
                "grad_norm": float("inf") if s == 38 else 0.5,
                "heldout/success_rate": 0.2 + 0.001 * s,  # a custom evaluation key: named, with the alias to map it
                "val/recall@10": 0.1,  # a recommender's score is one too
                "rewards/accuracy_reward": 0.5,  # a reward term reward_components reads: not named
            }
            for s in range(40)
        ],
    )
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(logs)}
    grpolens("refresh", env=env, check=True)
    tiny = report_json(Settings(home=tmp_path / "home"), "tiny")
    assert any("only 3 logged steps" in n["why"] for n in tiny["sections"]["not_judged"])
    custom = report_json(Settings(home=tmp_path / "home"), "custom")
    assert custom["verdict"] == "healthy" and custom["sections"]["not_judged"][0]["what"] == "everything"
    nonfinite = report_json(Settings(home=tmp_path / "home"), "nonfinite")
    loss = nonfinite["sections"]["learning_dynamics"]["loss"]
    assert loss["non_finite"] == 6 and math.isfinite(loss["max"])
    said = {n["what"]: n["why"] for n in nonfinite["sections"]["not_judged"]}
    assert said["6 value(s) of loss"] == (
        "NaN or infinite at step 0, 7, 14, 21, 28, …: left out of trends and plots (loss_nonfinite flags them)"
    )
    assert said["1 value(s) of grad_norm"] == (  # one is an fp16 loss scaler's skipped step: no finding
        "NaN or infinite at step 38: left out of trends and plots (loss_nonfinite flags a long run of them, or most "
        "of the run)"
    )
    assert nonfinite["verdict"] == "unhealthy" and nonfinite["root_cause"]["check"] == "loss_nonfinite"
    assert said["the task metric"].startswith(
        "the run logs heldout/success_rate, val/recall@10, which no rule reads: if one scores"
    )
    assert "`aliases: {heldout/success_rate: task_score}`" in said["the task metric"]
    assert "the task metric" not in {n["what"] for n in tiny["sections"]["not_judged"]}


def test_a_condition_that_comes_and_goes_is_one_line_in_text_and_every_episode_in_json(tmp_path):
    """Every group tied on 20 steps in 40, over 200 steps: five episodes of reward_zero_variance. The check table,
    the report's findings and its verdict line fold them into one (which says how many); the JSON outputs and the
    anomalies table keep each."""
    rows = [
        {"step": s, "reward": 0.5 + 0.01 * math.sin(s), "frac_reward_zero_std": 0.9 if (s // 20) % 2 else 0.1}
        for s in range(200)
    ]
    write_jsonl(tmp_path / "logs" / "flicker" / "metrics.jsonl", rows)
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(tmp_path / "logs")}
    grpolens("refresh", env=env, check=True)
    listed = grpolens("check", env=env, check=True)
    lines = [line for line in listed.stdout.splitlines() if "reward_zero_variance" in line]
    assert len(lines) == 1 and "step 24+" in lines[0], listed.stdout
    # the last episode (82.5% tied, still open) is the worst; the first of the 20-step ones the longest
    folded = " ".join(listed.stdout.split())  # the table wraps messages at the terminal's width
    assert "(the worst of 5 episodes from step 24 to the end; the longest: step 24-43)" in folded, listed.stdout
    assert "0 errors, 2 warnings, 0 info (6 flags, repeats folded;" in listed.stderr
    flags = json.loads(grpolens("check", "--format", "json", env=env, check=True).stdout)
    assert sorted(f["step"] for f in flags if f["check_name"] == "reward_zero_variance") == [24, 64, 104, 144, 184]
    doc = report_json(Settings(home=tmp_path / "home"), "flicker")
    assert [f["step"] for f in doc["findings"] if f["check"] == "reward_zero_variance"] == [24, 64, 104, 144, 184]
    bad = [b for b in doc["sections"]["good_bad_ugly"]["bad"] if b.startswith("reward_zero_variance")]
    assert len(bad) == 1 and "5 episodes" in bad[0]
    # the findings table's value is that of the episode its folded line tells (the worst), as in the lists above
    told = grpolens("report", "flicker", env=env, check=True).stdout
    (row,) = [line for line in told.splitlines() if line.startswith("| warn | reward_zero_variance |")]
    assert row.split(" | ")[2:5] == ["24+ (5 episodes)", "frac_reward_zero_std", "0.825"], row
    assert "83% of reward groups had zero variance" in bad[0] and "(the worst of 5 episodes" in bad[0], bad
    # reward_plateau's "never improved" is judged from step 0, before the first tied step: related, not a consequence
    assert doc["summary"] == "reward_zero_variance from step 24 (and 4 more times), with 1 related finding", doc[
        "summary"
    ]
    markdown = Path(doc["files"]["markdown"]).read_text(encoding="utf-8")
    assert markdown.count("| warn | reward_zero_variance |") == 1 and "(5 episodes)" in markdown


def test_the_good_says_where_a_curve_started_and_ended_and_never_calls_a_fall_or_a_stall_a_rise(tmp_path):
    """`noisyends` rises steadily from 0.2 to 0.8, but its first logged reward is 0.9 and its last 0.1 (one odd
    batch each): its rise is told by the means of its first and last tenth. `stalled` drifts from 0.95 to 0.99 over
    300 steps, a slope significant on so dense a log that reward_plateau still calls never improved: not good."""
    rng = random.Random(7)
    rise = [0.2 + 0.006 * s + rng.gauss(0, 0.02) for s in range(100)]
    rise[0], rise[-1] = 0.9, 0.1
    write_jsonl(
        tmp_path / "logs" / "noisyends" / "metrics.jsonl", [{"step": s, "reward": r} for s, r in enumerate(rise)]
    )
    stalled = [{"step": s, "reward": 0.95 + 0.04 * s / 300 + rng.gauss(0, 0.01)} for s in range(300)]
    write_jsonl(tmp_path / "logs" / "stalled" / "metrics.jsonl", stalled)
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(tmp_path / "logs")}
    grpolens("refresh", env=env, check=True)
    settings = Settings(home=tmp_path / "home")
    noisy = report_json(settings, "noisyends")
    reward = noisy["sections"]["learning_dynamics"]["reward_mean"]
    assert (reward["first"], reward["last"]) == (0.9, 0.1)
    start, end = reward["first_tenth_mean"], reward["last_tenth_mean"]
    assert start < 0.35 < 0.65 < end and reward["tenth_points"] == 10
    (said,) = [g for g in noisy["sections"]["good_bad_ugly"]["good"] if g.startswith("reward_mean")]
    assert said.startswith(f"reward_mean rose from {start:.3g} to {end:.3g} (means of the first and last tenth"), said
    flat = report_json(settings, "stalled")
    assert flat["sections"]["learning_dynamics"]["reward_mean"]["trend"]["significant"]
    assert any(f["check"] == "reward_plateau" and f["severity"] == "warn" for f in flat["findings"])
    assert not any(g.startswith("reward_mean") for g in flat["sections"]["good_bad_ugly"]["good"])


def test_a_transient_error_is_said_wherever_the_verdict_is(tmp_path):
    """One KL spike to 2.0 (an error: above error_kl) at step 100 that the run recovered from, as
    unsloth-llama32-3b-gsm8k-500steps did: the verdict is watch. The report and `check --run` say the root cause was
    an error that weighs as a warning because it was transient; `--fail-on error` still stops on the error flag."""
    rng = random.Random(11)
    rows = [
        {
            "step": s,
            "reward": 0.2 + 0.003 * s + rng.gauss(0, 0.02),
            "kl": 2.0 if s == 100 else 0.05 * rng.uniform(0.9, 1.1),
        }
        for s in range(1, 201)
    ]
    write_jsonl(tmp_path / "logs" / "onespike" / "metrics.jsonl", rows)
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(tmp_path / "logs")}
    grpolens("refresh", env=env, check=True)
    doc = report_json(Settings(home=tmp_path / "home"), "onespike")
    root = doc["root_cause"]
    assert doc["verdict"] == "watch" and root["check"] == "kl_spike" and root["severity"] == "error", doc["findings"]
    assert root["transient"] and root["step"] == 100
    assert root["consequences_until"] == 110  # what it caused would show within 10 logged steps of its end
    said = f"kl_spike (error, transient: ended at step {root['step_end']}) from step 100"
    assert doc["summary"].startswith(said), doc["summary"]
    text = Path(doc["files"]["markdown"]).read_text()
    assert f"**Verdict: WATCH** — {said}" in text
    assert f"(error, transient: ended at step {root['step_end']}; it weighs as a warning) from step 100" in text
    checked = grpolens("check", "--run", "onespike", "--fail-on", "error", env=env)
    assert checked.returncode == 2 and "onespike: watch (" in checked.stderr, checked.stderr
    assert f"root cause {said}" in checked.stderr, checked.stderr


@pytest.mark.slow
def test_batch_redraws_only_the_runs_that_changed(tmp_path):
    logs = tmp_path / "logs"
    rows = [{"step": s, "reward": 0.2 + 0.005 * s, "kl": 0.01, "grad_norm": 0.4} for s in range(60)]
    grow = write_jsonl(logs / "grows" / "metrics.jsonl", rows)
    write_jsonl(logs / "stays" / "metrics.jsonl", rows)
    settings = Settings(home=tmp_path / "home")
    env = {"GRPOLENS_HOME": str(settings.home), "GRPOLENS_TRAINER_LOGS": str(logs)}
    grpolens("refresh", env=env, check=True)
    first = batch.write_reports(settings, draw=False)
    assert sorted(s["run"] for s in first if s["regenerated"]) == ["grows", "stays"]
    assert not any(s["regenerated"] for s in batch.write_reports(settings, draw=False))
    with grow.open("a") as fh:
        fh.write(json.dumps({"step": 60, "reward": 0.5, "kl": 0.01, "grad_norm": 0.4}) + "\n")
    grpolens("refresh", env=env, check=True)
    again = batch.write_reports(settings, draw=False)
    assert [s["run"] for s in again if s["regenerated"]] == ["grows"]
    table = batch.verdict_table(again, settings.reports_dir)
    assert "| grows | healthy |" in table and "(grows/report.md)" in table


def test_hostile_run_names_stay_inside_the_reports_folder(tmp_path):
    reports = tmp_path / "reports"
    for name in ("../../etc", "a/b", "..", "", "ß ✓ name"):
        folder = run_report.report_dir(reports, {"run_key": f"k:{name}", "name": name, "run_id": "x1"})
        assert folder.parent == reports and folder.name not in ("", ".", "..")
    taken = []  # three runs of one name (and one id) in three projects: three folders, the same ones every time
    for key in ("a:1", "b:1", "c:1"):
        folder = run_report.report_dir(reports, {"run_key": key, "name": "same", "run_id": "1"})
        folder.mkdir(parents=True)
        (folder / run_report.RUN_KEY_FILE).write_text(key)
        taken.append(folder.name)
    assert (
        len(set(taken)) == 3
        and run_report.report_dir(reports, {"run_key": "c:1", "name": "same", "run_id": "1"}).name == taken[2]
    )


def test_reports_never_take_the_writer_lock(demo):
    """Two reports at once: DuckDB admits many read-only processes but one writer, so this fails if a report wrote."""
    import os
    import subprocess

    from tests.conftest import BIN

    env = {**os.environ, "GRPOLENS_HOME": str(demo.home)}
    procs = [
        subprocess.Popen(
            [str(BIN / "grpolens"), "report", name, "--format", "json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("verl-kl-blowup", "trl-reward-hacking")
    ]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert {json.loads(out)["run"] for out, _ in outputs} == {"verl-kl-blowup", "trl-reward-hacking"}


def test_the_verdict_line_counts_a_root_cause_that_comes_back_not_one_seen_twice_at_once():
    """kl_drift's two branches (a level far above the reference, a steep trend) can flag one drift twice at once:
    that is the root cause, not a second finding. The same rule flagging again after the root cause ended is."""
    rules = {rule.name: rule for rule in checks.load_checks()}

    def drift(step, end, message):
        return {
            "check": "kl_drift",
            "severity": "error",
            "step": step,
            "step_end": end,
            "metric": "kl",
            "value": 2.0,
            "threshold": 0.5,
            "message": message,
        }

    level, trend = drift(13, 60, "level"), drift(29, 32, "trend")
    assert run_report._summary(story.tell([level, trend], rules, list(range(1, 200)))) == "kl_drift from step 13"
    later = drift(150, 170, "again")
    told = story.tell([level, trend, later], rules, list(range(1, 200)))
    assert run_report._summary(told) == "kl_drift from step 13 (and 1 more time)"


def test_the_pipeline_section_counts_one_hour_and_one_failed_rollout_in_the_singular():
    from pipeline.report import markdown

    def events(hours: int, failed: int) -> str:
        section = {
            "events": {
                "datasets": ["diplomacy"],
                "tied_by": "run_id",
                "hours": hours,
                "error_rate": 0.01,
                "rollouts_failed": failed,
                "worst_p95_s": 120.0,
            }
        }
        return next(line for line in markdown._pipeline(section) if line.startswith("- events"))

    assert ": 1 hour, error rate 1%, 1 failed rollout, worst" in events(1, 1)
    assert ": 6 hours, error rate 1%, 0 failed rollouts, worst" in events(6, 0)


def test_pipeline_rates_are_compared_on_the_first_and_last_tenth_not_on_two_steps():
    """verl's last step holds the checkpoint save and the validation pass (39.7 s against ~10 s): its step time
    alone read as a 3.5x slowdown."""
    import numpy as np

    from pipeline.report import markdown
    from pipeline.report.stats import summary

    steps = np.arange(101, 201)
    seconds = np.full(100, 10.0) + (steps % 3) * 0.5
    seconds[-1] = 39.7  # the save and the validation
    line = markdown._pipeline({"step_time_s": summary(steps, seconds, None)})[2]
    assert line.startswith("- step_time_s: 10.6 → 13.4 (means of the first and last tenth; trend ")
    short = markdown._pipeline({"step_time_s": summary(steps[:4], seconds[:4], None)})[2]
    assert short.startswith("- step_time_s: 11 → 11 (first and last logged value; trend ")


def test_only_what_starts_at_or_after_the_root_cause_is_its_consequence():
    """trl-qwen3-4b-mbpp-lengthgrowth (tests/fixtures/real-heldout, logged every 5 steps): a KL spike at step 95 is
    the root cause, and reward_plateau's "never improved", judged from step 5, was listed as its consequence. A
    finding that starts before the root cause is related to it at most; one at its onset or after it, close enough
    to the spike's end (10 logged intervals), is a consequence."""
    rules = {rule.name: rule for rule in checks.load_checks()}

    told = story.tell(
        [
            _flag("kl_spike", "error", 95, 95),
            _flag("reward_plateau", "warn", 5),
            _flag("response_length_growth", "warn", 120),
            _flag("grad_norm_spike", "error", 95, 95),
        ],
        rules,
        list(range(5, 1131, 5)),
    )
    by_check = {f["check"]: f for f in told.findings}
    assert told.root["check"] == "kl_spike"
    assert (
        by_check["reward_plateau"]["consequence_of"] is None and by_check["reward_plateau"]["related_to"] == "kl_spike"
    )
    assert by_check["response_length_growth"]["consequence_of"] == "kl_spike"
    assert by_check["grad_norm_spike"]["consequence_of"] == "kl_spike"  # at the very onset
    assert run_report._summary(told) == "kl_spike from step 95, with 2 consequences and 1 related finding"


def test_operations_are_neither_the_cause_nor_a_consequence_of_the_learning():
    """Public runs: steps logged twice by a restart (duplicate_steps) were the root cause of a reward that never
    improved, and a slow checkpoint was the root cause of a debug run's plateau. Neither explains the other."""
    rules = {rule.name: rule for rule in checks.load_checks()}

    told = story.tell([_flag("duplicate_steps", "warn", 0), _flag("reward_plateau", "warn", 1)], rules, list(range(41)))
    by_check = {f["check"]: f for f in told.findings}
    assert told.root["check"] == "reward_plateau"
    assert by_check["duplicate_steps"]["consequence_of"] is None and by_check["duplicate_steps"]["related_to"] is None
    alone = story.tell(
        [_flag("checkpoint_save_slow", "warn", 2), _flag("throughput_drop", "warn", 3)], rules, list(range(24))
    )
    assert alone.root["check"] == "checkpoint_save_slow"  # with nothing about the learning, operations tell theirs
    assert alone.findings[1]["consequence_of"] == "checkpoint_save_slow"
    severe = story.tell(  # an operations error outranks a learning warning, but does not explain it
        [_flag("stale_heartbeat", "error", 30), _flag("reward_plateau", "warn", 31)], rules, list(range(41))
    )
    assert severe.root["check"] == "stale_heartbeat"
    assert all(f["consequence_of"] is None and f["related_to"] is None for f in severe.findings)


def test_an_isolated_spike_the_run_recovered_from_is_transient():
    rules = {rule.name: rule for rule in checks.load_checks()}
    spike = {
        "check": "grad_norm_spike",
        "severity": "error",
        "step": 40,
        "step_end": 41,
        "metric": "grad_norm",
        "value": 30.0,
        "threshold": 10.0,
        "message": "spike",
    }
    told = story.tell([spike], rules, list(range(200)))
    assert told.verdict == "watch" and told.findings[0]["transient"] and told.root["check"] == "grad_norm_spike"
    # a verdict of watch beside an error-level root cause says why: the error was transient
    assert run_report._summary(told) == "grad_norm_spike (error, transient: ended at step 41) from step 40"
    collapse = {
        "check": "response_length_collapse",
        "severity": "error",
        "step": 45,
        "step_end": None,
        "metric": "response_length_mean",
        "value": 10.0,
        "threshold": 0.3,
        "message": "collapse",
    }
    told = story.tell([spike, collapse], rules, list(range(200)))
    assert told.verdict == "unhealthy" and told.root["check"] == "response_length_collapse"
    assert not told.findings[1]["transient"] and told.findings[1]["related_to"] == "response_length_collapse"


def _flag(check: str, severity: str, step: int, end: int | None = None, value=1.0, threshold=0.5) -> dict:
    """One finding as the report reads an anomalies row."""
    return {
        "check": check,
        "severity": severity,
        "step": step,
        "step_end": end,
        "metric": "m",
        "value": value,
        "threshold": threshold,
        "message": f"{check} at step {step}",
    }


def test_a_spike_the_run_recovered_from_explains_only_what_starts_close_to_its_end():
    """verl-amd-grpo-deepseek7b-gsm8k (1,120 steps logged one by one, a story window of 168 steps): a 4.1x grad-norm
    blip at step 179 was the root cause with reward_hacking, flagged 151 steps later, as its consequence; that late
    finding also made the blip not transient while spikes 5x and 19x its size were. What a spike that ended caused
    starts within 10 logged steps of its end; a spike followed by nothing it could have caused is transient, and a
    transient finding is the root cause only when nothing else is."""
    rules = {rule.name: rule for rule in checks.load_checks()}
    spikes = [
        _flag("grad_norm_spike", "error", 102, 102, 1.874, 0.2),
        _flag("grad_norm_spike", "warn", 179, 179, 0.626, 0.6),
        _flag("grad_norm_spike", "error", 431, 432, 5.113, 0.6),
        _flag("grad_norm_spike", "error", 1036, 1036, 19.057, 1.0),
    ]
    hacking = _flag("reward_hacking", "warn", 330, 360)
    told = story.tell([*spikes, hacking], rules, list(range(1, 1121)))
    by_step = {f["step"]: f for f in told.findings}
    assert all(by_step[s["step"]]["transient"] for s in spikes)
    assert told.root["check"] == "reward_hacking" and told.verdict == "watch"
    assert by_step[179]["consequence_of"] is None and by_step[179]["related_to"] is None  # 151 steps before it
    # a collapse flagged 6 steps after a spike ended is its consequence, and makes it no passing spike
    collapse = _flag("reward_collapse", "error", 185, None)
    told = story.tell([dict(spikes[0], step=179, step_end=179), collapse], rules, list(range(1, 1121)))
    assert told.root["check"] == "grad_norm_spike" and not told.root["transient"]
    assert told.findings[1]["consequence_of"] == "grad_norm_spike"
    assert told.verdict == "unhealthy"


def test_the_bad_calls_transient_exactly_the_episodes_the_json_calls_transient():
    """A root-cause spike (followed by a plateau) folded in "The Bad" with three later spikes of its rule that the run
    recovered from read "grad_norm_spike (step 100, transient)" beside a JSON root cause that is not transient: the
    folded line carried its worst episode's flag for all of them."""
    from pipeline.report import sections
    from pipeline.report.frames import RunData

    rules = {rule.name: rule for rule in checks.load_checks()}
    findings = [
        _flag("grad_norm_spike", "warn", 100, 100, 0.6, 0.15),
        _flag("reward_plateau", "warn", 104, None),
        *(_flag("grad_norm_spike", "warn", s, s, 1.5, 0.15) for s in (300, 500, 700)),
    ]
    told = story.tell(findings, rules, list(range(1, 1001)))
    assert told.root["step"] == 100 and not told.root["transient"]
    data = RunData(run={}, metrics=pl.DataFrame(), findings=told.findings)
    bad = sections.good_bad_ugly(data, {}, told.findings, list(rules.values()))["bad"]
    spikes = [line for line in bad if line.startswith("grad_norm_spike")]
    assert spikes[0].startswith("grad_norm_spike (step 100): "), bad
    assert spikes[1].startswith("grad_norm_spike (step 300, transient): ") and "3 episodes" in spikes[1], bad


def test_a_short_episode_at_the_first_steps_explains_nothing_that_outlasts_it():
    """rhosweep-q7b-rho0.10 (40 logged steps): 10%, 5%, 10%, 2.5% of responses cut on the first steps and none after
    (response_truncation from step 1 to 5) was the root cause of the reward's plateau at its ceiling and of 75-87%
    of groups tied all run, and "Raise the response length limit" came first. Onsets a few logged steps apart
    cannot be ordered: the finding that lasts is the root cause, whatever order the rules' rows came in."""
    rules = {rule.name: rule for rule in checks.load_checks()}
    findings = [
        _flag("response_truncation", "warn", 1, 5, 0.055, 0.05),
        _flag("reward_plateau", "warn", 1, None),
        _flag("reward_zero_variance", "warn", 1, 27, 0.75, 0.5),
        _flag("grad_norm_vanishing", "warn", 2, None),
        _flag("reward_zero_variance", "warn", 30, None, 0.69, 0.5),
    ]
    for ordered in (findings, findings[::-1]):
        told = story.tell(ordered, rules, list(range(1, 41)))
        assert told.root["check"] == "reward_zero_variance" and told.root["step"] == 1, told.root
        by_check = {f["check"]: f for f in told.findings}
        assert by_check["reward_plateau"]["consequence_of"] == "reward_zero_variance"
        assert by_check["grad_norm_vanishing"]["consequence_of"] == "reward_zero_variance"
        assert told.actions[0]["because"] == ["reward_zero_variance"], told.actions
        assert all(a["lever"] != "length_limit" for a in told.actions[:3]), told.actions


def test_a_condition_that_held_before_the_root_cause_is_none_of_its_consequences():
    """trl-finqa-agent-2400-console: tied groups (reward_zero_variance) came and went from step 4 (57% of steps tied
    before step 576, 60% after), and truncation flagged at error from step 576 took 14 of its 67 episodes, those
    starting in its window, as its consequences. A rule whose condition held when the root cause began, and is not
    one event with it, is no consequence of it at any episode; one that held only long before can be."""
    rules = {rule.name: rule for rule in checks.load_checks()}
    tied = [(4, 15), (25, 37), (119, 143), (259, 345), (468, 591), (594, 607), (617, 633), (656, 696), (971, 1019)]
    truncation = _flag("response_truncation", "error", 576, 614, 0.15, 0.15)
    vanishing = _flag("grad_norm_vanishing", "warn", 600, 640)
    told = story.tell(
        [truncation, vanishing, *(_flag("reward_zero_variance", "warn", s, e, 0.6) for s, e in tied)],
        rules,
        list(range(1, 2401)),
    )
    assert told.root["check"] == "response_truncation"
    assert all(f["consequence_of"] is None for f in told.findings if f["check"] == "reward_zero_variance")
    assert next(f for f in told.findings if f["check"] == "grad_norm_vanishing")["consequence_of"] == (
        "response_truncation"
    )
    assert run_report._summary(told) == "response_truncation from step 576, with 1 consequence; 1 other finding"
    # ties that ended 550 steps before the truncation and came back after it started can be its effect
    told = story.tell(
        [truncation, *(_flag("reward_zero_variance", "warn", s, e, 0.6) for s, e in [(4, 15), (594, 607)])],
        rules,
        list(range(1, 2401)),
    )
    assert [f["consequence_of"] for f in told.findings if f["check"] == "reward_zero_variance"] == [
        "response_truncation",
        None,
    ]


def test_the_verdict_line_counts_the_rules_a_root_cause_explains_not_their_episodes():
    """Two episodes of tied groups after a truncation are one consequence, not two: the line counts rules."""
    rules = {rule.name: rule for rule in checks.load_checks()}
    told = story.tell(
        [
            _flag("response_truncation", "error", 100, None, 0.2, 0.15),
            _flag("reward_zero_variance", "warn", 105, 110),
            _flag("reward_zero_variance", "warn", 112, 120),
            _flag("kl_spike", "warn", 600, 600),
            _flag("kl_spike", "warn", 800, 800),
        ],
        rules,
        list(range(1, 1001)),
    )
    assert run_report._summary(told) == "response_truncation from step 100, with 1 consequence; 1 other finding"


def test_good_bad_and_ugly_keep_a_finding_whole_up_to_its_advice():
    from pipeline.checks import first_clause

    penalty = (
        "penalty no_cheating fired on 7 of 40 logged steps (down to -0.2; first at steps 5, 10): each time the "
        "policy tried what it guards against; read the samples of those steps"
    )
    assert first_clause(penalty) == (
        "penalty no_cheating fired on 7 of 40 logged steps (down to -0.2; first at steps 5, 10): each time the "
        "policy tried what it guards against"
    )
    assert first_clause("KL spiked to 3 at step 9; raise the KL penalty") == "KL spiked to 3 at step 9"
    assert first_clause("no advice at all") == "no advice at all"


def test_the_power_law_says_which_points_it_could_not_fit():
    """A log-log fit sees only positive rewards: on a run whose rewards are mostly ≤ 0 it describes the best steps."""
    from pipeline.report import markdown

    fit = {"performance_metric": "reward_mean", "compute_basis": "tokens", "exponent": -0.2, "r_squared": 0.1}
    mostly = markdown._power_law(fit | {"n_points": 96, "n_excluded": 304, "n_nonpositive": 304})[2]
    assert mostly.endswith(
        "304 of 400 points have a reward ≤ 0 and are not in the fit: it describes the best steps only, not the run."
    )
    few = markdown._power_law(fit | {"n_points": 112, "n_excluded": 48, "n_nonpositive": 48})[2]
    assert few.endswith(" 48 of 160 points have a reward ≤ 0 and are not in the fit.")
    assert markdown._power_law(fit | {"n_points": 50, "n_excluded": 0, "n_nonpositive": 0})[2].endswith("R² = 0.1.")


def test_a_kl_that_never_moves_is_no_kl_term_not_a_policy_that_stays_put(tmp_path):
    """verl with use_kl_loss off logs actor/kl_loss 0.0 on every step: that KL is neither good news ("KL stayed at
    or below 0") nor evidence that the policy barely moves (too_conservative), and the report says it could not
    judge KL. A KL that moves, however little, is still judged."""
    rng = random.Random(3)
    flat = [{"step": s, "reward": 0.5 + rng.gauss(0, 0.02), "entropy": 0.5 + rng.gauss(0, 0.01)} for s in range(200)]
    write_jsonl(tmp_path / "logs" / "nokl" / "metrics.jsonl", [{**r, "kl": 0.0} for r in flat])
    write_jsonl(
        tmp_path / "logs" / "tinykl" / "metrics.jsonl", [{**r, "kl": 1e-4 + 1e-6 * (s % 3)} for s, r in enumerate(flat)]
    )
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(tmp_path / "logs")}
    grpolens("refresh", env=env, check=True)
    settings = Settings(home=tmp_path / "home")
    nokl = report_json(settings, "nokl")
    assert not any(g.startswith("KL stayed") for g in nokl["sections"]["good_bad_ugly"]["good"])
    said = {n["what"]: n["why"] for n in nokl["sections"]["not_judged"]}
    assert said["KL (kl_spike, kl_drift, too_conservative's KL side)"].startswith("kl is 0 on every logged step")
    assert not any(f["check"] == "too_conservative" for f in nokl["findings"]), nokl["findings"]
    tinykl = report_json(settings, "tinykl")
    assert any(f["check"] == "too_conservative" for f in tinykl["findings"]), tinykl["findings"]
    assert any(g.startswith("KL stayed at or below") for g in tinykl["sections"]["good_bad_ugly"]["good"])


def test_a_run_that_logs_no_reward_is_not_given_a_clean_bill(tmp_path):
    """A notebook's training table of loss alone passes the few rules that can look at it: the verdict stays
    healthy (nothing was flagged), but the report says its learning was not judged and asks for the reward instead
    of "no action needed", which a run whose reward was judged still gets."""
    rng = random.Random(5)
    write_jsonl(tmp_path / "logs" / "lossonly" / "metrics.jsonl", [{"step": s, "loss": 0.0} for s in range(1, 31)])
    write_jsonl(
        tmp_path / "logs" / "rewarded" / "metrics.jsonl",
        [{"step": s, "loss": 0.0, "reward": 0.2 + s / 100 + rng.gauss(0, 0.01)} for s in range(1, 61)],
    )
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(tmp_path / "logs")}
    grpolens("refresh", env=env, check=True)
    settings = Settings(home=tmp_path / "home")
    bare = report_json(settings, "lossonly")
    assert bare["verdict"] == "healthy" and bare["findings"] == []
    assert bare["summary"].endswith("but the run logs no reward: the checks of its learning had nothing to read")
    assert bare["recommendation"].startswith("Nothing to act on in what was logged. To judge how the run learns")
    assert "**Verdict: HEALTHY** — no check flagged anything" in Path(bare["files"]["markdown"]).read_text()
    judged = report_json(settings, "rewarded")
    assert judged["verdict"] == "healthy" and judged["recommendation"].startswith("No action needed"), judged


def test_a_run_short_of_its_end_and_silent_for_days_never_finished_rather_than_is_being_written(tmp_path):
    """A trainer_state.json at step 10 of 20 is state running. Written a minute ago it is still being written; not
    touched for three days (longer than stale_heartbeat's abandoned_hours) it crashed, was stopped or was copied
    mid-run, and the report must not tell the reader to wait for it."""
    history = [{"loss": 0.1, "reward": s / 10, "step": s} for s in range(1, 11)]
    for name, age in (("live", 60), ("gone", 3 * 86400)):
        state = tmp_path / "logs" / name / "trainer_state.json"
        state.parent.mkdir(parents=True)
        state.write_text(json.dumps({"global_step": 10, "max_steps": 20, "log_history": history}))
        os.utime(state, (time.time() - age, time.time() - age))
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(tmp_path / "logs")}
    grpolens("refresh", env=env, check=True)
    settings = Settings(home=tmp_path / "home")
    said = {
        name: {n["what"]: n["why"] for n in report_json(settings, name)["sections"]["not_judged"]}
        for name in ("live", "gone")
    }
    assert said["live"]["the end of the run"].startswith("the run is still being written (state running)")
    assert said["gone"]["the end of the run"].startswith(
        "the run never finished: its files were last written 3 days ago, at step 10"
    ), said["gone"]


def test_a_console_log_without_steps_says_its_steps_are_line_ordinals(tmp_path):
    """A TRL console log prints dicts without a step (logging_steps apart): the steps are the dicts' ordinals, and a
    reader who takes "step 29" for trainer step 29 misreads every onset; a log with steps says nothing of the kind."""
    logs = tmp_path / "logs"
    (logs / "console").mkdir(parents=True)
    (logs / "console" / "train.log").write_text("".join(f"{{'loss': 0.1, 'reward': {s / 40}}}\n" for s in range(40)))
    write_jsonl(logs / "stepped" / "metrics.jsonl", [{"step": s, "reward": s / 40} for s in range(40)])
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(logs)}
    grpolens("refresh", env=env, check=True)
    settings = Settings(home=tmp_path / "home")
    console = report_json(settings, "console")
    assert console["sections"]["config_and_state"]["step_source"] == "ordinal"
    markdown = Path(console["files"]["markdown"]).read_text(encoding="utf-8")
    assert "- steps are the order of the log's metric lines (the log prints no step)" in markdown
    stepped = report_json(settings, "stepped")
    assert stepped["sections"]["config_and_state"]["step_source"] == "logged"
    assert "the log prints no step" not in Path(stepped["files"]["markdown"]).read_text(encoding="utf-8")


def test_a_curve_that_jumped_is_said_to_have_moved_though_it_has_no_steady_trend(tmp_path):
    """Entropy at ~0.15 for ten logged points, then ~5 for thirty: a line through it has one long run of residuals,
    and the slope's autocorrelation-corrected interval spans zero. The table must not leave it at "not
    significant"; a curve that only wanders (no level change between its first and last tenth) still is."""
    rng = random.Random(11)
    rows = [
        {"step": s, "reward": 0.5 + rng.gauss(0, 0.05), "entropy": (0.15 if s < 10 else 5.0) + rng.gauss(0, 0.03)}
        for s in range(40)
    ]
    write_jsonl(tmp_path / "logs" / "jump" / "metrics.jsonl", rows)
    env = {"GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_TRAINER_LOGS": str(tmp_path / "logs")}
    grpolens("refresh", env=env, check=True)
    doc = report_json(Settings(home=tmp_path / "home"), "jump")
    entropy, reward = (doc["sections"]["learning_dynamics"][m] for m in ("entropy", "reward_mean"))
    assert not entropy["trend"]["significant"] and entropy["tenths_shift"]["significant"], entropy
    assert not reward["tenths_shift"]["significant"], reward
    markdown = Path(doc["files"]["markdown"]).read_text(encoding="utf-8")
    (entropy_row,) = [line for line in markdown.splitlines() if line.startswith("| entropy |")]
    assert "(no steady trend, but it moved: 0.1" in entropy_row and "→ 5" in entropy_row, entropy_row
    (reward_row,) = [line for line in markdown.splitlines() if line.startswith("| reward_mean |")]
    assert "(not significant)" in reward_row, reward_row


def test_a_root_cause_explains_only_what_its_mechanism_can_cause(tmp_path):
    """Tied groups from the first step stop learning; they do not make the reward fall three steps later, so that
    collapse is no consequence of them, while the plateau and the vanishing gradients that follow are. A reward term
    that never fires changes no advantage: the plateau beside it is not its doing. A rule that names a rule that
    does not exist in `-- explains:` is an error, not a silent nothing."""
    rules = {rule.name: rule for rule in checks.load_checks()}
    told = story.tell(
        [
            _flag("reward_zero_variance", "error", 1),
            _flag("reward_collapse", "error", 4),
            _flag("reward_plateau", "warn", 6),
            _flag("grad_norm_vanishing", "warn", 8),
            _flag("too_conservative", "warn", 9),
        ],
        rules,
        list(range(1, 101)),
    )
    assert told.root["check"] == "reward_zero_variance"  # a cause wins over an outcome that starts with it ...
    assert {f["check"]: f["consequence_of"] for f in told.findings if f is not told.root} == {
        "reward_collapse": None,  # ... and does not explain it
        "reward_plateau": "reward_zero_variance",
        "grad_norm_vanishing": "reward_zero_variance",
        "too_conservative": "reward_zero_variance",
    }
    told = story.tell(
        [_flag("reward_component_dead", "warn", 5), _flag("reward_plateau", "warn", 6)], rules, list(range(1, 101))
    )
    assert told.root["check"] == "reward_component_dead"
    assert [(f["check"], f["consequence_of"], f["related_to"]) for f in told.findings if f is not told.root] == [
        ("reward_plateau", None, None)
    ]

    folder = tmp_path / "checks"
    folder.mkdir()
    for name in ("reward_plateau", "reward_zero_variance"):
        (folder / f"{name}.sql").write_text((checks.SQL_DIR / "checks" / f"{name}.sql").read_text())
    with pytest.raises(checks.CheckError, match="names no rule: grad_norm_vanishing, too_conservative"):
        checks.load_checks(folder)
