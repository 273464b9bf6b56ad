"""`grpolens demo` end to end, and the Elo marts checked against a plain recomputation from history."""

from __future__ import annotations

import json
import math

import pytest

from pipeline import warehouse
from pipeline.settings import Settings
from tests.conftest import grpolens


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    out = grpolens("demo", "--scale", "0.3", env={"GRPOLENS_HOME": str(home)}, check=True)
    return Settings(home=home), out


@pytest.mark.slow  # the demo through Dagster, ~35 s (the fixture)
def test_demo_writes_ingests_builds_and_summarises(demo):
    settings, out = demo
    output = out.stdout  # the summary is the command's answer, `grpolens demo > summary.txt` keeps it
    assert "materializing every asset" in out.stderr and "materializing" not in output
    labels = json.loads((settings.home / "demo_runs" / "labels.json").read_text())
    assert len(labels) == 14 and {r["style"] for r in labels} == {"diplomacy", "trl", "verl"}
    assert "Elo gap, best checkpoint − base_model" in output and "league-main" in output
    assert "| run | verdict | root cause |" in output and "Checks: " in output
    assert str(settings.duckdb_path) in output
    con = warehouse.connect_readonly(settings)
    try:
        assert con.sql("select count(*) from runs where source = 'wandb'").fetchone()[0] == 14
        # the run that only has a Hugging Face trainer_state.json is there too, on the same vocabulary
        origin, last_step = con.sql("select origin, last_step from runs where source = 'trainer_log'").fetchone()
        assert origin == "trainer_state" and last_step >= 30
        trl_metrics = {
            m
            for (m,) in con.sql("""select distinct metric from metrics join runs using (run_key)
                                                 where source = 'trainer_log'""").fetchall()
        }
        assert {"reward_mean", "kl", "response_length_mean", "grad_norm"} <= trl_metrics
        # the sample events went through the NDJSON source into the pipeline-performance marts
        with open(settings.home / "demo_events" / "diplomacy.ndjson") as fh:
            truth_events = sum(1 for _ in fh)
        assert con.sql("select count(*) from events").fetchone()[0] == truth_events
        p95, completed = con.sql(
            "select duration_p95_s, rollouts_completed from rollout_timing where grain = 'overall'"
        ).fetchone()
        assert p95 > 0 and completed > 10
        assert con.sql("select count(*) from extraction where grain = 'power'").fetchone()[0] == 7  # seven powers
        assert con.sql("select status from health where grain = 'overall'").fetchone()[0] in (
            "healthy",
            "degraded",
            "unhealthy",
        )
        frameworks = con.sql("""select distinct a.framework from metrics m
                                join metric_aliases a on a.source_key = m.source_key""").fetchall()
        assert {f for (f,) in frameworks} == {"diplomacy", "trl", "verl"}
    finally:
        con.close()


@pytest.mark.slow  # the demo fixture
def test_the_summary_names_the_hours_the_event_checks_flag(demo):
    """The health mart judges the whole event log ("healthy", 0.2% errors) while the checks judge hour by hour (an
    hour at 9.9% is an error): the summary says both, so it never calls a pipeline with an error flag just healthy."""
    settings, out = demo
    output = out.stdout
    con = warehouse.connect_readonly(settings)
    try:
        flagged = {
            c for (c,) in con.sql("select distinct check_name from anomalies where dataset is not null").fetchall()
        }
    finally:
        con.close()
    assert flagged, "the demo's events carry bad hours"
    (line,) = [x for x in output.splitlines() if x.strip().startswith("hour by hour the checks flag")]
    assert all(f"{check} (" in line for check in flagged), line


@pytest.mark.slow  # a second demo, ~30 s
def test_a_second_demo_in_the_same_home_prints_the_same_summary(demo):
    """Nothing new in the lake: the Dagster run skips the checks and the reports, and the summary says what the
    warehouse and the reports folder hold, as the first demo did."""
    settings, out = demo
    first = out.stdout
    again = grpolens("demo", "--scale", "0.3", env={"GRPOLENS_HOME": str(settings.home)})
    assert again.returncode == 0, again.stderr
    second = again.stdout
    assert "sample runs already in" in again.stderr
    con = warehouse.connect_readonly(settings)
    try:
        flags, errors = con.sql("select count(*), count(*) filter (severity = 'error') from anomalies").fetchone()
    finally:
        con.close()
    assert f"Checks: {flags} anomalies flagged ({errors} errors)" in second
    tail = first[first.index("Checks:") :]
    assert "| verdict |" in tail and "group sweep-lr-kl: best" in tail
    assert second[second.index("Checks:") :] == tail


def test_elo_ratings_are_the_last_known_league_rating(demo):
    """Recompute the as-of series from raw history in Python and compare with the dbt mart, row by row."""
    settings, _ = demo
    con = warehouse.connect_readonly(settings)
    try:
        run_key, name = con.sql("select run_key, name from runs where name = 'league-main'").fetchone()
        raw = con.sql(f"""select step, key, value from history where run_key = '{run_key}'
                          and (key like 'elo/%' or key like 'trueskill/%') order by step""").fetchall()
        mart = con.sql(f"""select step, player, rating from elo_ratings where run_key = '{run_key}'""").fetchall()
        gap = con.sql(
            f"select step, gap, best_checkpoint from elo_gap where run_key = '{run_key}' order by step"
        ).fetchall()
    finally:
        con.close()
    eval_steps = {s for s, k, _ in raw if k in ("elo/challenger", "elo/win_rate", "elo/games_played")}
    assert eval_steps  # the demo's evaluation process wrote its distractor values
    seeds = {
        "base_model": 1000,
        "chaos_bot": 900,
        "defensive_bot": 950,
        "territorial_bot": 950,
        "coordinated_bot": 1000,
        "dumb_bot": 850,
    }
    observed: dict[int, dict[str, float]] = {}
    for step, key, value in raw:
        if key.startswith("trueskill/") and key.endswith("_mu"):
            observed.setdefault(step, {})[key[len("trueskill/") : -3]] = (value - 25) * 40 + 1000
    expected, known = {}, {}
    for step in sorted(observed):
        if not known:
            known.update(seeds)
        known.update(observed[step])
        expected.update({(step, p): r for p, r in known.items()})
    got = {(s, p): r for s, p, r in mart}
    assert set(got) == set(expected)
    assert all(math.isclose(got[k], expected[k], abs_tol=1e-6) for k in expected)
    assert max(r for (_, p), r in got.items() if p == "base_model") < 1100  # the ~1500 eval-scale values stay out
    # The gap: best checkpoint as of each step minus base_model as of each step.
    for step, value, best in gap:
        checkpoints = {p: r for (s, p), r in expected.items() if s == step and p.startswith(f"{name}_adapter_v")}
        assert best in checkpoints and math.isclose(value, max(checkpoints.values()) - expected[(step, "base_model")])


def test_every_question_file_runs_and_answers(demo):
    from pipeline.settings import SQL_DIR

    settings, _ = demo
    questions = sorted((SQL_DIR / "questions").glob("*.sql"))
    assert questions
    for path in questions:
        out = grpolens("sql", "--file", str(path), "--format", "csv", env={"GRPOLENS_HOME": str(settings.home)})
        assert out.returncode == 0, (path.name, out.stderr)
        assert len(out.stdout.splitlines()) >= 3, path.name  # a header and at least two runs' rows
