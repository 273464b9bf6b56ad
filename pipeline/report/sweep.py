"""`grpolens sweep` / `grpolens compare`: which configuration wins, by how much we can tell, and what to try next.

The numbers come from the warehouse (read-only): each run's score is where it ended on one shared metric —
int_metric__tails (tail mean with an autocorrelation-corrected interval) or the last Elo gap with its standard
error, the same numbers as the run_outcomes mart. Everything beyond SQL (ranking with ties, rank correlations with
bootstrap intervals, level effects, confounding, the Pareto front) is here, on polars frames.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import polars as pl

from pipeline import aliases, run_lookup
from pipeline.report import sweep_stats
from pipeline.report.sections import HIGHER_IS_BETTER, _flatten

TARGET_SHARE = 0.9  # steps-to-target: the first step a run's rolling mean covers 90% of the way to the best score
ROLLING = 5


class SweepError(ValueError):
    """Nothing to compare (one run, no shared metric, nothing varying...): one line for the user."""


@dataclass
class Selection:
    label: str  # "group lr-sweep", "runs a, b"
    runs: pl.DataFrame  # run_key, run (its label), name, run_id, project, group_name, sweep_id, state, config, tags
    excluded: list[dict] = field(default_factory=list)  # {"run", "why"}


def select(
    con, group=None, sweep=None, tag=None, prefix=None, project=None, runs: list[str] | None = None
) -> Selection:
    """The runs a sweep is about, each with the label human output names it by (column ``run``: its name, with its
    run id when another run has the same name). ``runs``: explicit run names, ids or run_keys (compare), each read
    as `grpolens report` reads one: a name several runs have is refused with their run_keys (RunNotFound), not
    taken as all of them."""
    base = (
        "select run_key, name, run_id, project, group_name, sweep_id, state, last_step, tags, "
        "config::varchar as config from runs"
    )
    labels = run_lookup.labels(con)
    if runs:
        keys = list(dict.fromkeys(run_lookup.find(con, run) for run in runs))  # a run given twice is one run
        frame = con.execute(f"{base} where run_key in (select unnest($k))", {"k": keys}).pl()
        label = "runs " + ", ".join(labels[key] for key in keys)
    else:
        for value, where, what in (
            (group, "group_name = $v", "group"),
            (sweep, "sweep_id = $v", "sweep"),
            (tag, "list_contains(tags, $v)", "tag"),
            (prefix, "starts_with(name, $v)", "name prefix"),
            (project, "project = $v", "project"),
        ):
            if value:
                frame = con.execute(f"{base} where {where}", {"v": value}).pl()
                label = f"{what} {value}"
                break
        else:
            raise SweepError("say which runs: --group, --sweep, --tag, --prefix or --project")
        if frame.is_empty():
            raise SweepError(f"no runs with {label} in the warehouse")
    frame = frame.with_columns(
        pl.col("run_key").replace_strict(labels, return_dtype=pl.Utf8).alias("run"),
        pl.col("config").map_elements(_config, return_dtype=pl.Object),
    )
    return Selection(label, frame.sort("run"))


def _config(text) -> dict:
    try:
        return _flatten(json.loads(text) if text else {})
    except (TypeError, ValueError):
        return {}


def choose_metric(con, run_keys: list[str], metric: str | None) -> str:
    """Explicit (a canonical name or a raw key the aliases map), else the Elo gap for league runs, else a task /
    eval metric, else the reward — the first that at least two of the runs logged."""
    logged = con.execute(
        "select metric, count(distinct run_key) as runs from int_metric__tails "
        "where run_key in (select unnest($k)) group by metric",
        {"k": run_keys},
    ).fetchall()
    shared = {m: n for m, n in logged}
    elo = con.execute(
        "select count(distinct run_key) from elo_gap where run_key in (select unnest($k))", {"k": run_keys}
    ).fetchone()[0]
    shared["elo_gap"] = elo
    if metric:
        if metric not in shared:
            mapped = con.execute(
                f"select any_value(metric) from ({aliases.known_sql(con)}) where source_key = $m", {"m": metric}
            ).fetchone()[0]
            if mapped in shared:
                return mapped
            known = ", ".join(sorted(m for m, n in shared.items() if n >= 2)) or "none"
            raw = con.execute(
                "select count(distinct run_key) from history where key = $m and run_key in (select unnest($k))",
                {"m": metric, "k": run_keys},
            ).fetchone()[0]
            if raw and mapped is None:  # in the history, under no canonical name: the tails are computed on those
                raise SweepError(
                    f"metric {metric!r} is logged by {raw} of these runs but is no canonical metric, and a sweep "
                    f"ranks on those: map it onto one in grpolens.yaml (`aliases: {{{metric}: task_score}}`, or the "
                    f"canonical metric it measures) and refresh (metrics at least two of them share: {known})"
                )
            raise SweepError(
                f"metric {metric!r} is not logged by these runs (metrics at least two of them share: {known})"
            )
        return metric
    for candidate in ("elo_gap", "task_score", "reward_mean"):
        if shared.get(candidate, 0) >= 2:
            keys = task_keys(con, run_keys) if candidate == "task_score" else {}
            if different_measures(keys):
                raise SweepError(
                    f"these runs' task scores are different measures ({logged_as(keys)}), so no score ranks "
                    "them against each other: compare runs of one task, or give a metric with --metric"
                )
            functions = reward_functions(con, run_keys) if candidate == "reward_mean" else {}
            if unshared := unshared_functions(functions):
                raise SweepError(
                    f"these runs' rewards add up different reward functions ({unshared}), so their total reward is "
                    f"not one quantity and ranks nothing: {_shared_score_advice(con, functions)}"
                )
            return candidate
    raise SweepError(
        "these runs share no metric to compare them on (no reward, task score or Elo gap logged by "
        "two of them); give one with --metric"
    )


def task_keys(con, run_keys: list[str]) -> dict[str, str]:
    """run label -> the logged key its task_score comes from. The key names the task (`eval/accuracy` of a GSM8K run,
    `game/avg_sc_count` of a Diplomacy league), so task scores from two keys are two measures, not one."""
    labels = run_lookup.labels(con)
    rows = con.execute(
        "select run_key, any_value(source_key) from metrics "
        "where metric = 'task_score' and run_key in (select unnest($k)) group by all",
        {"k": run_keys},
    ).fetchall()
    return dict(sorted((labels[key], logged) for key, logged in rows))


def different_measures(keys: dict[str, str]) -> bool:
    """Whether task scores logged as these keys measure different things: their keys differ in more than numbers
    (verl's `val-core/aime_2024/acc/mean@16` and `…/mean@30` are one accuracy averaged over more samples)."""
    return len({re.sub(r"\d+", "#", key) for key in keys.values()}) > 1


def logged_as(keys: dict[str, str]) -> str:
    """`eval/accuracy: run-a, run-b; game/avg_sc_count: league-main`."""
    runs_of: dict[str, list[str]] = {}
    for run, key in keys.items():
        runs_of.setdefault(key, []).append(run)
    return "; ".join(f"{key}: {', '.join(runs)}" for key, runs in sorted(runs_of.items()))


# A per-function reward's key, as the reward_components mart reads one: `rewards/<f>` or `rewards/<f>/mean`, with or
# without `train/`.
REWARD_FUNCTION = r"^(?:train/)?rewards/([^/]+)(?:/mean)?$"


def reward_functions(con, run_keys: list[str]) -> dict[str, dict[str, str]]:
    """run label -> {reward function: the key it is logged as}, for the runs that log their reward per function.
    From the logged keys, not the reward_components mart: the mart leaves out a function whose value is the total's
    at every step (its others all scored 0), which is still one of the functions that run's reward adds up."""
    labels = run_lookup.labels(con)
    rows = con.execute(
        "select run_key, regexp_extract(key, $p, 1), min(key) from history "  # run_hash: skips the others' row groups
        "where run_hash in (select md5_number_upper(unnest($k))) and run_key in (select unnest($k)) "
        "and contains(key, 'rewards/') and regexp_matches(key, $p) "
        "and value_type is distinct from 'bool' group by all",  # a flag under a reward's key is no reward (as there)
        {"k": run_keys, "p": REWARD_FUNCTION},
    ).fetchall()
    out: dict[str, dict[str, str]] = {}
    for run_key, function, key in sorted(rows):
        out.setdefault(labels[run_key], {})[function] = key
    return out


def unshared_functions(functions: dict[str, dict[str, str]]) -> str:
    """`r5_lang_consistency only in run-c`: the reward functions some of these runs log and others do not (runs
    logging none say nothing about theirs), or "" when they all log the same ones. Their total rewards then add up
    different terms, as task scores from different keys measure different tasks."""
    if len({frozenset(f) for f in functions.values()}) < 2:
        return ""
    every = set.intersection(*(set(f) for f in functions.values()))
    return "; ".join(
        f"{function} only in {', '.join(run for run, logged in functions.items() if function in logged)}"
        for function in sorted(set().union(*functions.values()) - every)
    )


def _shared_score_advice(con, functions: dict[str, dict[str, str]]) -> str:
    """How to rank runs whose rewards differ: on a function they all log (one that scores the task first, as the
    reward_components mart marks it), mapped onto task_score, with the grpolens.yaml line that does it."""
    every = sorted(set.intersection(*(set(f) for f in functions.values())))
    tasks = {c for (c,) in con.execute("select distinct component from reward_components where is_task").fetchall()}
    if not every:
        return (
            "rank on a score they all log: map its key onto task_score in grpolens.yaml (`aliases: {KEY: "
            "task_score}`) and refresh, or give a metric with --metric"
        )
    function = min(every, key=lambda f: (f not in tasks, f))
    keys = sorted({logged[function] for logged in functions.values()})
    line = "aliases: {" + ", ".join(f"{key}: task_score" for key in keys) + "}"
    return (
        f"rank on a reward function they all log, e.g. {function}: map it onto task_score in grpolens.yaml "
        f"(`{line}`) and refresh, or give a metric with --metric"
    )


def scores(con, run_keys: list[str], metric: str) -> pl.DataFrame:
    """run_key, score, ci_low, ci_high, score_se, tail_points, first_value, last_step of each run on ``metric``."""
    if metric == "elo_gap":
        return con.execute(
            """
            select run_key, gap as score, gap_ci_low as ci_low, gap_ci_high as ci_high, gap_se as score_se,
                   1::bigint as tail_points, null::double as first_value, step as last_step
            from elo_gap where run_key in (select unnest($k))
            qualify row_number() over (partition by run_key order by step desc) = 1
        """,
            {"k": run_keys},
        ).pl()
    return con.execute(
        """
        select run_key, tail_mean as score, tail_ci_low as ci_low, tail_ci_high as ci_high, tail_se as score_se,
               tail_points, first_value, last_step
        from int_metric__tails where metric = $m and run_key in (select unnest($k))
    """,
        {"k": run_keys, "m": metric},
    ).pl()


def curves(con, run_keys: list[str], metric: str) -> pl.DataFrame:
    if metric == "elo_gap":
        return con.execute(
            "select run_key, step, gap as value from elo_gap where run_key in (select unnest($k)) "
            "order by run_key, step",
            {"k": run_keys},
        ).pl()
    return con.execute(
        "select run_key, step, value from metrics where metric = $m and isfinite(value) "
        "and run_key in (select unnest($k)) order by run_key, step",
        {"k": run_keys, "m": metric},
    ).pl()


def rank(frame: pl.DataFrame, higher_is_better: bool) -> pl.DataFrame:
    """Rank order; a run whose interval overlaps the leader's is tied with it, not beaten. The leader is tied when
    another run is: one that no interval reaches is tied with nobody (the ranking table marked it tied while the text
    said no other run's interval reached it)."""
    ordered = frame.sort("score", descending=higher_is_better, nulls_last=True)
    lo, hi = _bounds(ordered.row(0, named=True))
    others = [a <= hi and b >= lo for a, b in map(_bounds, ordered.slice(1).iter_rows(named=True))]
    return ordered.with_columns(
        pl.Series("rank", range(1, ordered.height + 1)),
        pl.Series("tied_with_best", [any(others), *others], dtype=pl.Boolean),
    )


def _bounds(row: dict) -> tuple[float, float]:
    lo, hi, s = row.get("ci_low"), row.get("ci_high"), row["score"]
    return (lo if lo is not None and math.isfinite(lo) else s, hi if hi is not None and math.isfinite(hi) else s)


def steps_to_target(curve: pl.DataFrame, ranked: pl.DataFrame, higher_is_better: bool) -> dict[str, int | None]:
    """First step at which each run's rolling mean got TARGET_SHARE of the way from the runs' median start to the
    best score: how fast a configuration gets there, not only where it ends."""
    if curve.is_empty():
        return {}
    starts = curve.sort("step").group_by("run_key", maintain_order=True).agg(pl.col("value").head(ROLLING).mean())
    start = float(cast(float, starts["value"].median()))  # not None: the curve has rows
    best = float(ranked["score"][0])
    target = start + TARGET_SHARE * (best - start)
    rolled = curve.sort("run_key", "step").with_columns(
        pl.col("value").rolling_mean(ROLLING, min_samples=1).over("run_key").alias("rolled")
    )
    hit = rolled.filter(pl.col("rolled") >= target if higher_is_better else pl.col("rolled") <= target)
    first = dict(hit.group_by("run_key").agg(pl.col("step").min()).iter_rows())
    return {key: first.get(key) for key in ranked["run_key"]} | {"_target": target}


def effects(selection: Selection, ranked: pl.DataFrame, higher_is_better: bool) -> list[dict]:
    """Every config key that varies across the ranked runs: rank correlation with its bootstrap interval, level
    means, the best level, and the keys it moves together with. Strongest first."""
    keys = ranked["run_key"].to_list()
    configs = dict(zip(selection.runs["run_key"], selection.runs["config"], strict=True))
    params = sweep_stats.varying({k: configs[k] for k in keys})
    together = sweep_stats.confounded(params, keys)
    y = ranked["score"].to_numpy()
    out = []
    for param, by_run in params.items():
        values = [by_run[k] for k in keys]
        numeric = all(sweep_stats.is_number(v) for v in values)
        entry: dict[str, Any] = {
            "param": param,
            "kind": "numeric" if numeric else "categorical",
            "spearman": None,
            "ci": None,
            "significant": False,
            "confounded_with": together[param],
        }
        if numeric:
            x = np.asarray(values, float)
            entry["spearman"] = sweep_stats.spearman(x, y)
            entry["ci"] = sweep_stats.spearman_interval(x, y)
            entry["significant"] = bool(entry["ci"] and (entry["ci"][0] > 0 or entry["ci"][1] < 0))
        lv = sweep_stats.levels(
            [v if numeric else json.dumps(v, default=str) if isinstance(v, (list, dict)) else v for v in values],
            y,
            numeric,
        )
        if not numeric and len(lv) >= 2:  # categorical: a level whose interval clears every other's
            entry["significant"] = _separated(lv, higher_is_better)
        best = max(lv, key=lambda level: level["mean"] if higher_is_better else -level["mean"]) if lv else None
        entry.update(
            levels=lv,
            best_value=best["value"] if best else None,
            peak=(sweep_stats.peak(lv, higher_is_better) or {}).get("value") if numeric else None,
            spread=(max(level["mean"] for level in lv) - min(level["mean"] for level in lv)) if lv else 0.0,
        )
        out.append(entry)
    out.sort(key=lambda e: (-(e["significant"] and not e["confounded_with"]), -abs(e["spearman"] or 0), -e["spread"]))
    return out


def _separated(levels: list[dict], higher_is_better: bool) -> bool:
    """The best level's interval clears every other level's. A level of one run has no interval: its score is one
    seed's, so a difference from it is not an effect."""
    if any(not level["ci"] for level in levels):
        return False
    best = max(levels, key=lambda level: level["mean"] if higher_is_better else -level["mean"])
    for other in levels:
        if other is best:
            continue
        if (best["ci"][0] <= other["ci"][1]) if higher_is_better else (best["ci"][1] >= other["ci"][0]):
            return False
    return True


def cost(con, run_keys: list[str]) -> tuple[str | None, dict[str, dict]]:
    """Each run's cost (tokens, trajectories, wall seconds, steps) and the measure a Pareto front uses: the first
    that every run has."""
    rows = con.execute(
        "select run_key, tokens, trajectories, wall_s, last_step from run_outcomes "
        "where run_key in (select unnest($k))",
        {"k": run_keys},
    ).fetchall()
    by_run = {k: {"tokens": t, "trajectories": tr, "wall_s": w, "steps": s} for k, t, tr, w, s in rows}
    for measure in ("tokens", "trajectories", "wall_s", "steps"):
        if all((by_run.get(k) or {}).get(measure) for k in run_keys):
            return measure, by_run
    return None, by_run


def higher_is_better_for(metric: str, lower_is_better: bool) -> bool:
    return not lower_is_better and HIGHER_IS_BETTER.get(metric, True)
