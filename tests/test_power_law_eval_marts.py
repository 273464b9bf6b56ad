"""The `power_law_fit` and `eval_summary` marts on a real warehouse: the demo runs (written by wandb offline),
the demo's Hugging Face trainer_state.json run, and a JSONL metric log of a run whose reward never rises above
zero and that logs Hugging Face style `eval_*` keys. Each mart is checked against a plain recomputation from
`history` (numpy for the fit), not against itself."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pipeline import warehouse
from pipeline.demo.run import write_trainer_state
from pipeline.demo.runs import write_demo_runs
from pipeline.ingest import ingest
from pipeline.settings import Settings

NEGATIVE_RUN = "negative-reward"
EVAL_PREFIXES = ("eval/", "eval_", "val/", "val-core/", "val-aux/", "test/")


def _write_negative_run(folder) -> None:
    """A trainer's JSONL metric log: reward always <= 0, an eval every 10 steps (loss falls, then rises)."""
    folder.mkdir(parents=True)
    lines = []
    for step in range(40):
        lines.append({"step": step, "reward": -1.0 + step / 40, "loss": 0.5 - step / 100})
        if step % 10 == 0:
            lines.append(
                {
                    "step": step,
                    "eval_loss": [2.0, 1.25, 1.5, 1.75][step // 10],
                    "eval_accuracy": [0.25, 0.5, 0.5, 0.375][step // 10],
                    "eval_runtime": 12.5,
                }
            )
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    home = tmp_path_factory.mktemp("power-law-home")
    runs, logs = home / "demo_runs", home / "trainer_logs"
    write_demo_runs(runs, seed=7, scale=0.5)
    write_trainer_state(logs / "trl-qwen-gsm8k-no-wandb", steps=60)
    _write_negative_run(logs / NEGATIVE_RUN)
    settings = Settings(home=home, wandb_dirs=(runs,), trainer_logs=(logs,))
    ingest(settings)
    warehouse.build(settings)
    connection = warehouse.connect_readonly(settings)
    yield connection
    connection.close()


def _fit(con, name: str) -> dict:
    row = con.sql(
        """select f.* from power_law_fit as f join runs as r using (run_key) where r.name = ?""", params=[name]
    ).fetchone()
    assert row is not None, f"no power_law_fit row for {name}"
    columns = [c[0] for c in con.sql("select * from power_law_fit limit 0").description]
    return dict(zip(columns, row, strict=True))


def _run_key(con, name: str) -> str:
    return con.sql("select run_key from runs where name = ?", params=[name]).fetchone()[0]


def _t_quantile_975(df: int) -> float:
    """Student's t 0.975 quantile by bisection on the CDF (Simpson's rule on the density): no scipy here."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float, n: int = 2000) -> float:
        h = x / n
        f = [math.exp(log_norm - (df + 1) / 2 * math.log1p((i * h) ** 2 / df)) for i in range(n + 1)]
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    lo, hi = 1.9, 13.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < 0.975 else (lo, mid)
    return (lo + hi) / 2


def test_diplomacy_runs_fit_reward_at_compute_on_simulated_years(con):
    for name in ("league-main", "league-stalled", "sweep-lr-kl-0"):
        fit = _fit(con, name)
        assert fit["compute_basis"] == "simulated_years" and fit["compute_metric"] == "compute_simulated_years"
        assert fit["compute_source_key"] == "power_law/cumulative_simulated_years"
        assert fit["performance_metric"] == "reward_at_compute" and fit["missing_reason"] is None
        assert math.isfinite(fit["exponent"]) and fit["exponent_se"] > 0
        assert fit["exponent_ci_low"] < fit["exponent"] < fit["exponent_ci_high"]
        assert 0 <= fit["r_squared"] <= 1
    # league-main learns: reward grows with compute, the interval is above 0
    assert _fit(con, "league-main")["exponent_ci_low"] > 0


def test_fit_matches_numpy_on_the_logged_points(con):
    """Exponent, intercept, r², standard error and the t interval against numpy's least squares on history."""
    name = "league-main"
    run_key = _run_key(con, name)
    points = con.sql(
        """
        select c.value as compute, p.value as reward
        from history as p
        join history as c on c.run_key = p.run_key and c.step = p.step
            and c.key = 'power_law/cumulative_simulated_years'
        where p.run_key = ? and p.key = 'power_law/reward_at_compute'
        order by p.step""",
        params=[run_key],
    ).fetchall()
    x, y = np.log([c for c, _ in points]), np.log([r for _, r in points])
    assert len(points) > 50 and all(r > 0 for _, r in points)
    (slope, intercept), cov = np.polyfit(x, y, 1, cov=True)  # cov scaled by SSE / (n - 2)
    r2 = 1 - np.sum((y - (intercept + slope * x)) ** 2) / np.sum((y - y.mean()) ** 2)
    fit = _fit(con, name)
    assert fit["n_points"] == len(points) and fit["n_excluded"] == 0
    assert fit["compute_first"] == points[0][0] and fit["compute_last"] == points[-1][0]
    assert math.isclose(fit["exponent"], slope, rel_tol=1e-9)
    assert math.isclose(fit["intercept"], intercept, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(fit["r_squared"], r2, rel_tol=1e-9)
    assert math.isclose(fit["exponent_se"], math.sqrt(cov[0, 0]), rel_tol=1e-6)
    t = _t_quantile_975(len(points) - 2)
    assert abs(fit["t_critical"] - t) < 1e-3
    assert math.isclose(fit["exponent_ci_high"] - fit["exponent"], fit["t_critical"] * fit["exponent_se"], rel_tol=1e-9)
    assert math.isclose(fit["exponent"] - fit["exponent_ci_low"], fit["t_critical"] * fit["exponent_se"], rel_tol=1e-9)


def test_verl_runs_sum_their_per_step_tokens(con):
    name = "verl-healthy"
    run_key = _run_key(con, name)
    tokens = con.sql(
        """select step, value from history where run_key = ? and key = 'perf/total_num_tokens'
                        order by step""",
        params=[run_key],
    ).fetchall()
    fit = _fit(con, name)
    if not tokens:  # a verl run without perf/total_num_tokens falls back to steps
        assert fit["compute_basis"] == "steps"
        return
    assert fit["compute_basis"] == "tokens" and fit["compute_metric"] == "tokens"
    assert fit["compute_source_key"] == "perf/total_num_tokens" and fit["performance_metric"] == "reward_mean"
    cumulative = dict(zip([s for s, _ in tokens], np.cumsum([v for _, v in tokens]), strict=True))
    assert math.isclose(fit["compute_first"], cumulative[fit["first_step"]])
    assert math.isclose(fit["compute_last"], cumulative[fit["last_step"]])
    assert fit["compute_last"] > 10 * fit["compute_first"]  # cumulative, not the step's own count
    assert math.isfinite(fit["exponent"]) and 0 <= fit["r_squared"] <= 1


def test_compute_basis_of_every_demo_run(con):
    bases = dict(
        con.sql("select r.name, f.compute_basis from power_law_fit as f join runs as r using (run_key)").fetchall()
    )
    for name, basis in bases.items():
        if name.startswith(("league-", "sweep-")):
            assert basis == "simulated_years", name
        elif name.startswith("trl-") and name != "trl-qwen-gsm8k-no-wandb":
            assert basis == "tokens", name  # TRL's train/num_tokens, already cumulative
            assert _fit(con, name)["compute_metric"] == "tokens_cumulative"
        elif name.startswith("verl-"):
            assert basis == "tokens", name
    # the trainer_state.json run logs no token count: steps stand in for compute, step 0 counting as 1
    fit = _fit(con, "trl-qwen-gsm8k-no-wandb")
    assert fit["compute_basis"] == "steps" and fit["compute_metric"] == "step"
    assert fit["compute_first"] == fit["first_step"] + 1 and fit["missing_reason"] is None
    # every run that logs a reward has a row
    with_reward = con.sql("""select count(distinct run_key) from metrics
                             where metric in ('reward_mean', 'reward_at_compute')""").fetchone()[0]
    assert con.sql("select count(*) from power_law_fit").fetchone()[0] == with_reward == len(bases)


def test_a_run_whose_reward_is_never_positive_has_a_reason_and_no_fit(con):
    fit = _fit(con, NEGATIVE_RUN)
    rewards = con.sql(
        "select count(*) from history where run_key = ? and key = 'reward'", params=[_run_key(con, NEGATIVE_RUN)]
    ).fetchone()[0]
    assert fit["missing_reason"] == "no positive reward"
    assert fit["n_points"] == 0 and fit["n_excluded"] == fit["n_nonpositive"] == rewards == 40
    assert fit["exponent"] is None and fit["exponent_se"] is None and fit["r_squared"] is None
    assert fit["exponent_ci_low"] is None and fit["intercept"] is None


def test_eval_summary_matches_history(con):
    """Every evaluation key of every run, recomputed in Python from the raw history rows, each on its trainer step
    (trainer_steps: TRL's evaluation rows are W&B rows of their own; the latest logged row of a step stands)."""
    rows = con.sql("select * from eval_summary").fetchall()
    columns = [c[0] for c in con.sql("select * from eval_summary limit 0").description]
    mart = {(r[0], r[1]): dict(zip(columns, r, strict=True)) for r in rows}
    raw = con.sql(
        """select h.run_key, h.key, coalesce(t.trainer_step, h.step), h.value from history h
                     left join trainer_steps t on t.run_key = h.run_key and t.logged_step = h.step
                     where h.value is not null and h.value_text is null
                       and ("""
        + " or ".join(f"starts_with(h.key, '{p}')" for p in EVAL_PREFIXES)
        + """)
                       and h.key not like '%runtime' and h.key not like '%per_second'
                     order by h.run_key, h.key, h.step"""
    ).fetchall()
    on_steps: dict[tuple[str, str], dict[int, float]] = {}
    for run_key, key, step, value in raw:
        on_steps.setdefault((run_key, key), {})[step] = value  # in logged order: the latest row of a step stays
    series = {k: sorted(v.items()) for k, v in on_steps.items()}
    moved = con.sql(
        "select count(*) from trainer_steps t join runs r using (run_key) where r.name = 'trl-gsm8k-healthy' "
        "and t.logged_step <> t.trainer_step"
    ).fetchone()[0]
    assert moved > 0  # the TRL run's W&B steps are not its trainer steps: the mapping is exercised
    assert set(mart) == set(series)
    names = dict(con.sql("select run_key, name from runs").fetchall())
    assert {names[r] for r, _ in mart} >= {"trl-gsm8k-healthy", "verl-healthy", "verl-length-collapse", NEGATIVE_RUN}
    for (run_key, key), points in series.items():
        got = mart[(run_key, key)]
        finite = [(s, v) for s, v in points if math.isfinite(v)]
        lower = "loss" in key
        best = (min if lower else max)(v for _, v in finite)
        assert got["higher_is_better"] is (not lower), key
        assert got["points"] == len(finite)
        assert (got["first_step"], got["first_value"]) == finite[0]
        assert (got["last_step"], got["last_value"]) == finite[-1]
        assert got["best_value"] == best and got["best_step"] == min(s for s, v in finite if v == best)
        assert math.isclose(got["change"], finite[-1][1] - finite[0][1], abs_tol=1e-12)


def test_eval_summary_on_a_verl_run_and_a_loss(con):
    verl = _run_key(con, "verl-length-collapse")
    first, last, best, best_step = con.sql(
        """
        select arg_min(value, step), arg_max(value, step), max(value), arg_max(step, value)
        from history where run_key = ? and key = 'val-core/gsm8k/acc/mean@1'""",
        params=[verl],
    ).fetchone()
    got = con.sql(
        """select first_value, last_value, best_value, best_step, improvement from eval_summary
                     where run_key = ? and key = 'val-core/gsm8k/acc/mean@1'""",
        params=[verl],
    ).fetchone()
    assert got[:4] == (first, last, best, best_step)
    assert got[4] < 0  # the collapse: validation accuracy ends below where it started
    neg = _run_key(con, NEGATIVE_RUN)
    summary = {
        k: (b, bs, hib, imp)
        for k, b, bs, hib, imp in con.sql(
            """select key, best_value, best_step, higher_is_better, improvement from eval_summary where run_key = ?""",
            params=[neg],
        ).fetchall()
    }
    assert set(summary) == {"eval_loss", "eval_accuracy"}  # eval_runtime is what evaluating cost, not what it found
    assert summary["eval_loss"] == (1.25, 10, False, 0.25)  # a loss is best at its minimum; 2.0 -> 1.75 improved
    assert summary["eval_accuracy"] == (0.5, 10, True, 0.125)  # first step reaching the maximum
