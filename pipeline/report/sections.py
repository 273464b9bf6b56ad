"""The sections of a run report, each a JSON-able dict built from the run's frames, present only when the run has
the data. They follow the order practitioners analyse a GRPO run in: what ran, is it learning, what the reward is
made of, the league's Elo, where the time goes, the output format, the cache, scaling, evaluation, and where it
stands among its peers."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import cast

import polars as pl

from pipeline.checks import Check, first_clause, fold_recurring, lacking
from pipeline.report import stats
from pipeline.report.frames import CORE_METRICS, RunData

# Which way is better, for the metrics where that is not a matter of taste.
HIGHER_IS_BETTER = {
    "reward_mean": True,
    "task_score": True,
    "loss": False,
    "extraction_rate": True,
    "cache_hit_rate": True,
    "trajectories_per_s": True,
}
# Config leaves worth showing, by the names trainers give them (the last part of a nested key).
HYPERPARAMETERS = (
    "learning_rate",
    "lr",
    "actor_lr",
    "kl_beta",
    "beta",
    "kl_coef",
    "kl_loss_coef",
    "init_kl_coef",
    "kl_target",
    "entropy_coef",
    "entropy_coeff",
    "num_generations",
    "samples_per_group",
    "n",
    "temperature",
    "max_completion_length",
    "max_response_length",
    "max_new_tokens",
    "max_prompt_length",
    "per_device_train_batch_size",
    "train_batch_size",
    "ppo_mini_batch_size",
    "gradient_accumulation_steps",
    "num_train_epochs",
    "ppo_epochs",
    "clip_ratio",
    "epsilon",
    "lora_rank",
    "lora_r",
    "max_grad_norm",
    "base_model_id",
    "model_name_or_path",
    "loss_type",
    "adv_estimator",
    "num_groups_per_step",
    "use_ppo_clipping",
)
MIN_POINTS = 10  # fewer logged steps than this: trends and most rules cannot judge the run


def _finite(value) -> float | None:
    return float(value) if value is not None and isinstance(value, (int, float)) and math.isfinite(value) else None


def _rows(frame: pl.DataFrame) -> list[dict]:
    return [{k: (_finite(v) if isinstance(v, float) else v) for k, v in row.items()} for row in frame.to_dicts()]


def _flatten(config: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"value"} | ({"desc"} & set(value)):
            value = value["value"]  # W&B config entries {"value": v, "desc": ...}
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        elif not str(key).startswith("_"):
            out[name] = value
    return out


def config_and_state(data: RunData) -> dict:
    run = data.run
    config = _flatten(run.get("config") or {})
    chosen = {
        k: v
        for k, v in config.items()
        if k.rsplit(".", 1)[-1] in HYPERPARAMETERS and isinstance(v, (int, float, str, bool)) and v != ""
    }
    steps = data.steps
    return {
        "name": run.get("name"),
        "run_key": run["run_key"],
        "source": run.get("source"),
        "project": run.get("project"),
        "group": run.get("group_name"),
        "tags": list(run.get("tags") or []),
        "state": run.get("state"),
        "created_at": _iso(run.get("created_at")),
        "heartbeat_at": _iso(run.get("heartbeat_at")),
        "last_step": run.get("last_step"),
        "logged_steps": len(steps),
        "first_step": steps[0] if steps else None,
        # the log printed no step: each step is the ordinal of its metric line (trainer_logs), not the trainer's,
        # or its place on the trainer's logging grid (logging_grid)
        "step_source": config.get("step_source") or "logged",
        "hyperparameters": dict(sorted(chosen.items())[:20]),
        "config_keys": len(config),
    }


def _iso(value) -> str | None:
    return value.isoformat() if hasattr(value, "isoformat") else value


def learning_dynamics(data: RunData) -> dict:
    """first, best, last, min, max and the trend (with its interval) of each core curve the run logged."""
    return _metric_section(data, *CORE_METRICS) or {}


def reward_composition(data: RunData) -> dict | None:
    parts = data.table("reward_components")
    if not parts.height:
        return None
    keep = [
        c
        for c in (
            "component",
            "key",
            "is_task",
            "points",
            "first_mean",
            "last_mean",
            "gain",
            "gain_share",
            "variance_share",
            "last_nonzero_share",
        )
        if c in parts.columns
    ]
    return {"components": _rows(parts.select(keep))}


def elo(data: RunData) -> dict | None:
    gap = data.table("elo_gap")
    if not gap.height:
        return None
    last = gap.row(-1, named=True)
    peak = gap.sort("gap", descending=True, nulls_last=True).row(0, named=True)
    trends = data.table("elo_reference_trends")
    low = _finite(last.get("gap_ci_low"))
    verdict = (
        "learning: the best checkpoint is ahead of the base model beyond the uncertainty"
        if low is not None and low > 0
        else "not shown to be learning: the gap's interval includes 0"
    )
    return {
        "step": last["step"],
        "gap": _finite(last["gap"]),
        "gap_se": _finite(last.get("gap_se")),
        "gap_ci": [low, _finite(last.get("gap_ci_high"))],
        "best_checkpoint": last.get("best_checkpoint"),
        "peak_gap": _finite(peak["gap"]),
        "peak_step": peak["step"],
        "verdict": verdict,
        "references": _rows(
            trends.select(
                [
                    c
                    for c in (
                        "player",
                        "start_rating",
                        "end_rating",
                        "change",
                        "slope_per_100_steps",
                        "slope_ci_low",
                        "slope_ci_high",
                        "verdict",
                        "scale",
                    )
                    if c in trends.columns
                ]
            )
        )
        if trends.height
        else [],
    }


def pipeline_performance(data: RunData) -> dict | None:
    out: dict = {}
    phases = data.table("step_time_breakdown")
    if phases.height:
        out["phases"] = _rows(
            phases.select(
                [c for c in ("phase", "share_of_step", "mean_s", "total_s", "is_bottleneck") if c in phases.columns]
            )
        )
        top = phases.filter(pl.col("is_bottleneck")) if "is_bottleneck" in phases.columns else phases.head(0)
        out["bottleneck"] = top.get_column("phase").to_list()[0] if top.height else None
    out.update(_metric_section(data, "step_time_s", "trajectories_per_s", "tokens_per_s_per_gpu") or {})
    hours = data.table("event_hours")
    if hours.height:
        # integer columns: polars types a sum as int | float | Decimal
        errors = cast(int, hours.get_column("error_events").sum())
        events = cast(int, hours.get_column("events").sum())
        out["events"] = {
            "tied_by": "time: the event hours that overlap the run's lifetime (rollout events carry no run name)",
            "hours": hours.height,
            "datasets": sorted(hours.get_column("dataset").unique().to_list()),
            "error_rate": _finite(errors / max(events, 1)),
            "rollouts_failed": int(hours.get_column("rollouts_failed").fill_null(0).sum()),
            "worst_p95_s": _finite(hours.get_column("duration_p95_s").max()),
        }
    return out or None


def _metric_section(data: RunData, *names: str) -> dict | None:
    out = {}
    for name in names:
        series = data.metric(name)
        if series.height:
            out[name] = stats.summary(
                series.get_column("step").to_numpy(), series.get_column("value").to_numpy(), HIGHER_IS_BETTER.get(name)
            )
    return out or None


def extraction(data: RunData) -> dict | None:
    return _metric_section(data, "extraction_rate")


def prefix_cache(data: RunData) -> dict | None:
    out = _metric_section(data, "cache_hit_rate") or {}
    cache = data.table("cache_stats")
    if cache.height:
        out["cache_stats"] = _rows(
            cache.select([c for c in ("grain", "hour", "samples", "hit_rate") if c in cache.columns])
        )
    return out or None


def power_law(data: RunData) -> dict | None:
    """Only when the run logs a measure of compute (simulated years, tokens): steps alone are not compute."""
    fit = data.table("power_law_fit")
    if not fit.height:
        return None
    row = fit.row(0, named=True)
    if row.get("compute_basis") == "steps":
        return None
    return {k: (_finite(v) if isinstance(v, float) else v) for k, v in row.items()}


def evaluation(data: RunData) -> dict | None:
    evals, artifacts = data.table("eval_summary"), data.table("run_artifacts")
    out = {}
    if evals.height:
        out["metrics"] = _rows(evals)
    if artifacts.height:
        out["artifacts"] = [{k: v for k, v in row.items()} for row in artifacts.to_dicts()]
    return out or None


def standing(data: RunData) -> dict | None:
    """Percentile of this run's tail reward among the runs of its group (or project), when it has peers."""
    peers = data.peers
    if peers is None or peers.height < 2:
        return None
    mine = peers.filter(pl.col("run_key") == data.run["run_key"])
    if not mine.height:
        return None
    value = mine.get_column("tail_reward")[0]
    ranked = peers.sort("tail_reward", descending=True)
    return {
        "metric": "reward_mean",
        "over": "mean of the last 10% of logged points (int_metric__tails)",
        "grouped_by": peers.get_column("grouped_by")[0],
        "runs": peers.height,
        "tail_reward": _finite(value),
        "percentile": stats.percentile_rank(value, peers.get_column("tail_reward").to_list()),
        "rank": ranked.get_column("run_key").to_list().index(data.run["run_key"]) + 1,
        "best_run": ranked.get_column("name")[0],
    }


def not_judged(data: RunData, rules) -> list[dict]:
    """What the report could not judge, and why: too few points, checks whose metrics the run never logged,
    non-finite values, a run still being written."""
    out = []
    steps = data.steps
    if not steps:
        out.append(
            {
                "what": "everything",
                "why": "the run has no values under any canonical metric name (only custom "
                "keys, or nothing logged yet): add aliases in grpolens.yaml to map its keys",
            }
        )
    elif len(steps) < MIN_POINTS:
        out.append(
            {
                "what": "trends and most checks",
                "why": f"only {len(steps)} logged steps (at least {MIN_POINTS} are needed to tell a trend from noise)",
            }
        )
    logged = set(data.metrics.get_column("metric").unique().to_list()) if data.metrics.height else set()
    missing: dict[str, list[str]] = {}
    for rule in rules:
        if absent := lacking(rule, logged):
            missing.setdefault(", ".join(absent), []).append(rule.name)
    for metric, names in sorted(missing.items()):
        out.append({"what": ", ".join(names), "why": f"no {metric} logged"})
    if data.metrics.height:
        bad = (
            data.metrics.filter(~pl.col("value").is_finite())
            .group_by("metric")
            .agg(pl.len(), pl.col("step").sort().head(5))
            .sort("metric")
        )
        for metric, count, steps in bad.iter_rows():
            at = ", ".join(str(s) for s in steps) + (", …" if count > len(steps) else "")
            judged = {
                "loss": " (loss_nonfinite flags them)",
                # an fp16 loss scaler skips a step whose gradient overflowed: only a stretch of them is a finding
                "grad_norm": " (loss_nonfinite flags a long run of them, or most of the run)",
            }.get(metric, "")
            out.append(
                {
                    "what": f"{count} value(s) of {metric}",
                    "why": f"NaN or infinite at step {at}: left out of trends and plots{judged}",
                }
            )
    if "task_score" not in logged and (scores := score_like_keys(data)):
        shown = ", ".join(scores[:5]) + (f" and {len(scores) - 5} more" if len(scores) > 5 else "")
        out.append(
            {
                "what": "the task metric",
                "why": f"the run logs {shown}, which no rule reads: if {'it' if len(scores) == 1 else 'one'} scores "
                f"the task (an evaluation accuracy, a success rate), map it in grpolens.yaml (`aliases: "
                f"{{{scores[0]}: task_score}}`) and refresh, and reward_hacking, the evaluation section and sweeps "
                "judge the run on it",
            }
        )
    if (value := constant_kl(data)) is not None:
        out.append(
            {
                "what": "KL (kl_spike, kl_drift, too_conservative's KL side)",
                "why": f"kl is {value:.3g} on every logged step: the run has no KL term (e.g. verl's use_kl_loss "
                "off, TRL's beta 0) or logs a placeholder, so it says nothing about how far the policy moved",
            }
        )
    if data.run.get("state") == "running":
        out.append({"what": "the end of the run", "why": unfinished(data.run, rules)})
    return out


def unfinished(run: dict, rules) -> str:
    """Why a run in state running ends where it does. Silent for longer than stale_heartbeat's abandoned_hours, it is
    not being written any more (a trainer_state.json short of max_steps that nobody touched for days: a crash, a
    stop, or files copied while the run went on), and "still being written" would send the reader to wait for it."""
    last, heard = run.get("last_step"), run.get("heartbeat_at")
    limit = next((rule.params["abandoned_hours"] for rule in rules if rule.name == "stale_heartbeat"), 24)
    if heard is not None:
        hours = (datetime.now(UTC) - heard).total_seconds() / 3600
        if hours > limit:
            ago = f"{hours / 24:.0f} days" if hours >= 48 else f"{hours:.0f} hours"
            return (
                f"the run never finished: its files were last written {ago} ago, at step {last} (it crashed or was "
                f"stopped, or they were copied while it ran); this report covers steps up to {last}"
            )
    return f"the run is still being written (state running); this report covers steps up to {last}"


# a key whose last part names a score of the task's answers (not a reward term, which reward_components reads):
# accuracy and success, and the retrieval, ranking and text-overlap scores of tasks that are not question answering
# (a recommender's ndcg@10, a summariser's rouge-l), at a cut-off or not
_SCORE_KEY = re.compile(
    r"(^|[/_.\-])(acc|accuracy|score|success|solved?|pass|correct(ness)?|win_?rate|ndcg|recall|precision|f1|mrr"
    r"|hit_?rate|exact_match|bleu|rouge(-?[l12])?)(@\d+)?($|[/_.\-])"
)


def score_like_keys(data: RunData) -> list[str]:
    """The run's keys under no canonical metric that may be the task's score (accuracy, success rate, pass@1),
    for a report to name when the run has no task_score: custom trainers log their evaluation under keys the alias
    seed cannot know, and then every rule that compares the reward with the task is silent."""
    unread = data.tables.get("unread_keys")
    if unread is None or not unread.height:
        return []
    keys = unread.get_column("key").to_list()
    return [k for k in keys if "reward" not in k.lower() and _SCORE_KEY.search(k.rsplit("/", 1)[-1].lower())]


def constant_kl(data: RunData) -> float | None:
    """The one value KL took on every logged step (at least MIN_POINTS of them), else None. A trainer without a KL
    term still logs one (verl's actor/kl_loss 0.0 with use_kl_loss off): "KL stayed at or below 0" is no praise."""
    if not data.metrics.height:
        return None
    kl = data.metrics.filter((pl.col("metric") == "kl") & pl.col("value").is_finite()).get_column("value")
    if kl.len() < MIN_POINTS or kl.min() != kl.max():
        return None
    return float(kl[0])


def good_bad_ugly(data: RunData, dynamics: dict, findings: list[dict], rules: list[Check]) -> dict:
    """The W&B GRPO report's three headings: what went well, what limits the run (warn), what broke (error).

    A reward or task score is good when it rose: its trend is significantly up and the mean of its last tenth is
    above that of its first (one noisy first or last point can say the opposite of the curve), and no outcome rule
    (never improved, collapsed) flagged it: a slope can be significant on a dense log and still be no learning."""
    findings = fold_recurring(findings, "check")
    outcomes = {rule.name for rule in rules if rule.role == "outcome"}
    failed = {f["metric"] for f in findings if f["check"] in outcomes and f["severity"] in ("warn", "error")}
    good = []
    for name in ("reward_mean", "task_score"):
        summary = dynamics.get(name) or {}
        trend, start, end = summary.get("trend"), summary.get("first_tenth_mean"), summary.get("last_tenth_mean")
        rose = bool(trend and trend["significant"] and trend["slope"] > 0) and start is not None and end > start
        if trend and rose and name not in failed:
            good.append(
                f"{name} rose from {start:.3g} to {end:.3g} (means of the first and last tenth of the run; "
                f"trend {trend['slope']:+.3g} per 100 steps, 95% interval {trend['ci'][0]:+.3g} to "
                f"{trend['ci'][1]:+.3g})"
            )
    kl = dynamics.get("kl") or {}
    if kl.get("max") is not None and kl["max"] <= 0.1 and constant_kl(data) is None:
        good.append(f"KL stayed at or below {kl['max']:.3g} (healthy below 0.1)")
    if dynamics and not any(s.get("non_finite") for s in dynamics.values()):
        good.append("no NaN or infinite values in the core curves")
    flagged = {f["check"] for f in findings if f["severity"] in ("warn", "error")}
    if dynamics and not flagged:
        good.append("no check flagged anything at warn or error level")

    def said(f: dict) -> str:  # what was found, without the rule's advice (the recommendation has it)
        where = f"step {f['step']}" + (", transient" if f.get("transient") else "")
        return f"{f['check']} ({where}): {first_clause(f['message'] or '')}"

    return {
        "good": good,
        "bad": [said(f) for f in findings if f["severity"] == "warn"],
        "ugly": [said(f) for f in findings if f["severity"] == "error"],
    }
