"""A sweep's answer as one document: ranking, effects, Pareto front, power law, Good / Bad / Ugly and the next
experiments — the JSON of `grpolens sweep --format json`, which the Markdown and the plots are drawn from."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, cast

import numpy as np
import polars as pl

from pipeline.report import sweep, sweep_stats

# What a run's flags say about its configuration (the W&B GRPO report's vocabulary).
DIAGNOSES = {
    "too conservative (the policy barely moves)": (
        "too_conservative",
        "reward_plateau",
        "grad_norm_vanishing",
        "elo_base_model_not_declining",
    ),
    "too aggressive (updates too large)": ("kl_spike", "kl_drift", "grad_norm_spike", "clip_fraction_high"),
    "insufficient exploration": ("entropy_collapse", "reward_zero_variance"),
    "instability and collapse": ("loss_nonfinite", "response_length_collapse", "reward_collapse", "elo_gap_shrinking"),
    "reward/metric mismatch": ("reward_hacking", "reward_component_dominant", "reward_component_dead"),
    "length limits": ("response_truncation", "response_length_growth"),
}
UGLY = ("instability and collapse",)
CONSERVATIVE = "too conservative (the policy barely moves)"
# What says a run's updates were too large or its training broke down. Such a run did not barely move, whatever its
# gradients did after the breakdown: a collapsed policy's rewards stop varying and its gradients vanish, which
# reward_plateau and grad_norm_vanishing then read as a policy too timid to move.
BROKE_DOWN = frozenset(
    DIAGNOSES["too aggressive (updates too large)"] + DIAGNOSES["instability and collapse"] + ("entropy_collapse",)
)
# Where a run's config comes from, for runs that have none.
HOW_TO_CONFIGURE = (
    "a W&B run's is what `wandb.init(config=…)` was given; a trainer log's is the config.json or config.yaml saved "
    "beside it, alone in its folder"
)


def analyse(
    con, selection: sweep.Selection, metric: str | None = None, lower_is_better: bool = False, compare: bool = False
) -> dict:
    runs = selection.runs
    keys = runs["run_key"].to_list()
    if len(keys) < 2:
        only = runs.row(0, named=True)  # `compare` names its runs: "runs a has one run (a)" would say nothing
        what = "only one run to compare" if compare else f"{selection.label} has one run"
        given = only["run"] if only["run"] in (only["name"], only["run_key"]) else only["run_id"]  # what report reads
        raise sweep.SweepError(
            f"{what} ({only['run']}): a {'comparison' if compare else 'sweep'} needs two or more "
            f"(`grpolens report {given}` reports on one run)"
        )
    asked = metric is not None
    metric = sweep.choose_metric(con, keys, metric)
    higher = sweep.higher_is_better_for(metric, lower_is_better)
    scored = sweep.scores(con, keys, metric).filter(pl.col("score").is_not_null() & pl.col("score").is_finite())
    names = dict(zip(runs["run_key"], runs["run"], strict=True))  # runs that share a name told apart
    excluded = [{"run": names[k], "why": f"no finite {metric} logged"} for k in keys if k not in set(scored["run_key"])]
    if scored.height < 2:
        raise sweep.SweepError(f"only {scored.height} run(s) of {selection.label} logged {metric}: nothing to compare")
    ranked = sweep.rank(scored, higher)
    ranked_keys = ranked["run_key"].to_list()
    curve = sweep.curves(con, ranked_keys, metric)
    speed = sweep.steps_to_target(curve, ranked, higher)
    measure, costs = sweep.cost(con, ranked_keys)
    flags = _flags(con, ranked_keys)
    configs = dict(zip(runs["run_key"], runs["config"], strict=True))
    found_effects = sweep.effects(selection, ranked, higher)
    state = dict(zip(runs["run_key"], runs["state"], strict=True))
    last_step = dict(zip(runs["run_key"], runs["last_step"], strict=True))
    run_rows = []
    for row in ranked.iter_rows(named=True):
        key = row["run_key"]
        run_rows.append(
            {
                "run": names[key],
                "run_key": key,
                "rank": row["rank"],
                "score": row["score"],
                "ci": [_num(row["ci_low"]), _num(row["ci_high"])],
                "tied_with_best": row["tied_with_best"],
                "config": {p["param"]: configs[key].get(p["param"]) for p in found_effects},
                "cost": costs.get(key, {}),
                "flags": flags.get(key, ([], []))[0],
                "errors": flags.get(key, ([], []))[1],
                "state": state.get(key),
                "last_step": last_step.get(key),
                "tail_points": row["tail_points"],
                "steps_to_target": speed.get(key),
            }
        )
    pareto = []
    if measure:
        front = sweep_stats.pareto_front([r["score"] for r in run_rows], [r["cost"][measure] for r in run_rows], higher)
        pareto = [run_rows[i]["run"] for i in front]
    doc: dict[str, Any] = {
        "selection": selection.label,
        "metric": metric,
        "higher_is_better": higher,
        "runs": run_rows,
        "effects": [_effect_json(e) for e in found_effects],
        "pareto": pareto,
        "pareto_cost": measure,
        "power_law": _power_law(con, ranked_keys, names),
        "excluded": excluded,
        "target": {"value": speed.get("_target"), "share": sweep.TARGET_SHARE},
        "files": {"markdown": None, "plots": []},
    }
    if not found_effects:
        # Runs without any config are not known to be repeats: nothing says how they differ.
        if not sweep_stats.configured([configs[k] for k in ranked_keys]):
            what = f"{selection.label}'s {len(keys)} runs" if not compare else "these runs"
            unknown = f"no config was found for {what}, so nothing says how they differ ({HOW_TO_CONFIGURE})"
            if not compare:
                raise sweep.SweepError(f"{unknown}; `grpolens compare RUN…` ranks them anyway")
            doc["note"] = unknown
        elif not compare:
            raise sweep.SweepError(
                f"nothing varies in the configs of {selection.label}'s {len(keys)} runs but seeds and "
                "identifiers: they are repeats of one configuration (`grpolens compare RUN…` "
                "ranks them anyway)"
            )
        else:
            doc["note"] = "nothing varies in these runs' configs but seeds and identifiers: they are repeats"
    logged = sweep.task_keys(con, ranked_keys) if metric == "task_score" else {}
    if sweep.different_measures(logged):  # asked for by name: ranked, with the warning
        warning = (
            f"task_score is logged as different keys ({sweep.logged_as(logged)}): the ranking holds only if "
            "they measure the same task"
        )
        doc["note"] = f"{doc['note']}; {warning}" if doc.get("note") else warning
    # Chosen unasked, a reward whose functions differ was refused already (choose_metric); asked for, it is ranked
    # with the warning.
    functions = sweep.reward_functions(con, ranked_keys) if asked and metric == "reward_mean" else {}
    if unshared := sweep.unshared_functions(functions):
        warning = (
            f"reward_mean adds up different reward functions in these runs ({unshared}): the ranking compares "
            "different rewards"
        )
        doc["note"] = f"{doc['note']}; {warning}" if doc.get("note") else warning
    doc["power_law_summary"] = _compare_exponents(doc["power_law"])
    doc["good_bad_ugly"] = good_bad_ugly(doc)
    rates = {names[k]: sweep_stats.learning_rate(configs[k]) for k in ranked_keys}
    penalties = {names[k]: sweep_stats.kl_penalty(configs[k]) for k in ranked_keys}
    doc["recommendations"], doc["suggested_config"] = recommendations(doc, found_effects, rates, penalties)
    return doc


def _num(value):
    return float(value) if value is not None and math.isfinite(value) else None


def _effect_json(e: dict) -> dict:
    return {
        "param": e["param"],
        "kind": e["kind"],
        "spearman": e["spearman"],
        "ci": e["ci"],
        "significant": e["significant"],
        "levels": [{k: lv[k] for k in ("value", "label", "n", "mean", "ci")} for lv in e["levels"]],
        "best_value": e["best_value"],
        "peak": e["peak"],
        "confounded_with": e["confounded_with"],
    }


def _flags(con, keys: list[str]) -> dict[str, tuple[list[str], list[str]]]:
    """run_key -> (its warn and error checks, those with an error-level finding)."""
    rows = con.execute(
        "select run_key, list(distinct check_name order by check_name), "
        "coalesce(list(distinct check_name order by check_name) filter (where severity = 'error'), []) "
        "from anomalies where run_key in (select unnest($k)) and severity in ('warn', 'error') group by run_key",
        {"k": keys},
    ).fetchall()
    return {key: (flagged, errors) for key, flagged, errors in rows}


def _power_law(con, keys: list[str], names: dict[str, str]) -> list[dict]:
    rows = con.execute(
        """select run_key, compute_basis, performance_metric, exponent, exponent_ci_low,
                                 exponent_ci_high, r_squared, n_points, missing_reason
                          from power_law_fit where run_key in (select unnest($k))""",
        {"k": keys},
    ).pl()
    out = [
        {"run": names[r["run_key"]], **{k: v for k, v in r.items() if k != "run_key"}}
        for r in rows.iter_rows(named=True)
    ]
    return sorted(out, key=lambda r: -(r["exponent"] if r["exponent"] is not None else -math.inf))


def _compare_exponents(fits: list[dict]) -> str | None:
    """Which run's reward grows fastest with compute, and whether the next one's interval rules it out."""
    fitted = [f for f in fits if f["exponent"] is not None and f["exponent_ci_low"] is not None]
    if len(fitted) < 2:
        return None
    top, second = fitted[0], fitted[1]
    apart = top["exponent_ci_low"] > second["exponent_ci_high"]
    return (
        f"steepest: {top['run']} (b = {top['exponent']:.3g}, 95% {top['exponent_ci_low']:.3g} to "
        f"{top['exponent_ci_high']:.3g}); "
        + (
            f"above {second['run']}'s interval"
            if apart
            else f"not distinguishable from {second['run']} ({second['exponent']:.3g})"
        )
    )


def _fmt(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def good_bad_ugly(doc: dict) -> dict:
    runs = doc["runs"]
    tied = [r for r in runs if r["tied_with_best"]]
    good = [
        f"best: {runs[0]['run']} ({doc['metric']} {runs[0]['score']:.3g}"
        + (f", 95% {runs[0]['ci'][0]:.3g} to {runs[0]['ci'][1]:.3g})" if runs[0]["ci"][0] is not None else ")")
    ]
    if len(tied) > 1:
        good.append("tied with it (intervals overlap): " + ", ".join(r["run"] for r in tied[1:]))
    clean = [r["run"] for r in runs if not r["flags"]]
    if clean:
        good.append(f"no warn/error flags: {', '.join(clean)}")
    for e in doc["effects"]:
        if e["significant"] and not e["confounded_with"]:
            good.append(
                f"{e['param']} matters: best at {_fmt(e['best_value'])}"
                + (f" (ρ = {e['spearman']:+.2f})" if e["spearman"] is not None else "")
            )
    bad: list[str] = []
    ugly: list[str] = []
    for diagnosis, checks in DIAGNOSES.items():
        hit = [r for r in runs if (timid(r) if diagnosis == CONSERVATIVE else set(r["flags"]) & set(checks))]
        if hit:
            line = f"{diagnosis}: " + ", ".join(
                f"{r['run']} ({'; '.join(sorted(set(r['flags']) & set(checks)))})" for r in hit
            )
            (ugly if diagnosis in UGLY else bad).append(line)
    for r in runs:
        if r["state"] in ("failed", "crashed", "killed"):
            ugly.append(f"{r['run']} {r['state']} at step {r['last_step']}")
    for e in doc["effects"]:
        if e["confounded_with"]:
            bad.append(
                f"{e['param']} always moved with {', '.join(e['confounded_with'])}: their effects cannot be told apart"
            )
    return {"good": good, "bad": bad, "ugly": ugly}


def broke_down(run: dict) -> bool:
    """A run whose flags say its updates were too large or its training collapsed."""
    return bool(BROKE_DOWN & set(run["flags"]))


def timid(run: dict) -> bool:
    """Flagged as barely moving, and nothing worse: a run that broke down, or has any error-level finding, has a
    problem that advice for a timid policy (a higher learning rate) would make worse or miss."""
    return bool(set(run["flags"]) & set(DIAGNOSES[CONSERVATIVE])) and not (broke_down(run) or run.get("errors"))


def _conservative_advice(
    runs: list[dict], rates: dict[str, float | None], penalties: dict[str, float | None] | None = None
) -> str:
    """Raise the learning rate of the runs that barely moved, unless runs of the sweep broke down at that rate or at
    a rate nobody can tell (``rates``: each run's learning rate from its config, None where it has none); or lower
    their KL penalty, unless their configs say they have none (``penalties``, the same way)."""
    advice = "For the runs flagged too conservative"
    timid_runs = [r["run"] for r in runs if timid(r)]
    # no timid run (every flagged one also broke down) is no evidence of a KL penalty of 0
    unpenalised = bool(timid_runs) and all((penalties or {}).get(r) == 0 for r in timid_runs)
    broken = [r["run"] for r in runs if broke_down(r)]
    if not broken:
        return advice + (
            ": raise the learning rate" if unpenalised else ": raise the learning rate or lower the KL penalty"
        )
    named = _first_few(broken)
    broken_rates, timid_rates = [rates.get(r) for r in broken], [rates.get(r) for r in timid_runs]
    if None in broken_rates or None in timid_rates:
        if unpenalised:
            return advice + (
                f": their KL penalty is already 0, and {named} collapsed or went unstable in this sweep at a learning "
                "rate no config gives: raise the learning rate in small steps, or look for what else holds the policy "
                "back (its findings)"
            )
        return advice + (
            f", lower the KL penalty rather than raise the learning rate: {named} collapsed or went unstable in "
            "this sweep, and no config says at which learning rate"
        )
    limit = min(cast(list[float], broken_rates))
    if max(cast(list[float], timid_rates)) < limit:
        return advice + (
            f": raise the learning rate, staying below {_fmt(limit)} where {named} collapsed or went unstable"
            + ("" if unpenalised else ", or lower the KL penalty")
        )
    if unpenalised:
        return advice + (
            f": not the learning rate ({named} collapsed or went unstable at {_fmt(limit)}, a learning rate they "
            "already use) nor the KL penalty (already 0): look for what else holds the policy back (its findings)"
        )
    return advice + (
        f", lower the KL penalty rather than raise the learning rate: {named} collapsed or went unstable at "
        f"{_fmt(limit)}, a learning rate they already use"
    )


def _first_few(runs: list[str], shown: int = 4) -> str:
    """`a, b, c, d and 2 more`: a list of runs in a line of advice, which says when it left some out."""
    return ", ".join(runs[:shown]) + (f" and {len(runs) - shown} more" if len(runs) > shown else "")


def _neighbours(levels: list[dict], value) -> tuple:
    values = [lv["value"] for lv in levels]
    i = values.index(value)
    return (values[i - 1] if i > 0 else None, values[i + 1] if i + 1 < len(values) else None)


def _between(a: float, b: float) -> float:
    return math.sqrt(a * b) if a > 0 and b > 0 and max(a, b) / min(a, b) >= 3 else (a + b) / 2


def _beyond(levels: list[dict], value: float, upward: bool) -> float | int | None:
    """The next value to try past the edge ``value``: one more ratio of a log-spaced parameter, else one more step
    of the spacing next to the edge. A parameter tried only at positive values (a length, a size, a count, a
    learning rate) stays positive: a step toward zero at most halves it. An integer parameter gets an integer;
    None when no such value lies beyond the edge (a count already at 1)."""
    values = sorted(lv["value"] for lv in levels)
    positive = all(v > 0 for v in values)
    if positive and values[-1] / values[0] >= 9:  # a log-spaced parameter: one more ratio
        nxt = value * (values[-1] / values[-2] if upward else values[0] / values[1])
    else:
        nxt = value + (values[-1] - values[-2] if upward else values[0] - values[1])
        if positive and not upward:
            nxt = max(nxt, value / 2)
    if all(float(v).is_integer() for v in values):
        whole = round(nxt)
        return None if whole == value or (positive and whole <= 0) else whole
    return nxt


def _monotone(levels: list[dict]) -> bool:
    means = [lv["mean"] for lv in levels]
    steps = np.sign(np.diff(means))
    return len(means) >= 3 and (bool(np.all(steps > 0)) or bool(np.all(steps < 0)))


def recommendations(
    doc: dict,
    effects: list[dict],
    rates: dict[str, float | None] | None = None,
    penalties: dict[str, float | None] | None = None,
) -> tuple[list[str], dict]:
    """3–6 next experiments in the ablation style, and the best run's config with the supported changes.
    ``rates``: each run's learning rate (sweep_stats.learning_rate), which advice on the learning rate heeds;
    ``penalties`` each run's KL penalty (sweep_stats.kl_penalty), which advice on the KL penalty heeds."""
    best = doc["runs"][0]
    suggested = dict(best["config"])
    out: list[str] = []
    for e in effects:
        if e["confounded_with"]:
            others = ", ".join(e["confounded_with"])
            line = f"Ablate {e['param']} against {others}: vary {e['param']} with {others} held at the best run's value"
            if all(others not in r for r in out) and not any(e["param"] in r for r in out):
                out.append(line)
            continue
        levels = e["levels"]
        if e["kind"] != "numeric" or len(levels) < 2 or any(lv["value"] is None for lv in levels):
            continue
        widths = [lv["ci"][1] - lv["ci"][0] for lv in levels if lv["ci"]]
        # No effect: every level sits well inside the others' intervals (only knowable when every level is repeated:
        # a level of one run has no interval to sit in).
        no_effect = not e["significant"] and len(widths) == len(levels) and e["spread"] < float(np.mean(widths)) / 2
        trend = e["significant"] or (_monotone(levels) and abs(e["spearman"] or 0) >= 0.8 and not no_effect)
        if e["peak"] is not None and not no_effect:
            low, high = _neighbours(levels, e["peak"])
            out.append(
                f"Refine {e['param']} around its peak {_fmt(e['peak'])}: try {_fmt(_between(low, e['peak']))} "
                f"and {_fmt(_between(e['peak'], high))} (the levels next to it scored lower)"
            )
            suggested[e["param"]] = e["peak"]
        elif trend:
            top = e["best_value"]
            if top in (levels[0]["value"], levels[-1]["value"]):
                upward = top == levels[-1]["value"]
                sure = "" if e["significant"] else "; the trend is monotone over the levels but not yet significant"
                edge = f"{_fmt(top)}, the {'highest' if upward else 'lowest'} value tried and the best"
                nxt = _beyond(levels, top, upward)
                out.append(
                    f"Extend {e['param']} past {edge}: try {_fmt(nxt)}{sure}"
                    if nxt is not None
                    else f"Keep {e['param']} at {edge}: no smaller positive whole value is left to try{sure}"
                )
            if e["significant"]:
                suggested[e["param"]] = top
        elif no_effect:
            out.append(
                f"Stop sweeping {e['param']}: no effect found (ρ = "
                f"{_fmt(e['spearman']) if e['spearman'] is not None else 'n/a'}, levels within each other's "
                f"intervals); fix it (the best run used {_fmt(best['config'].get(e['param']))}) and spend "
                "the runs elsewhere"
            )
    tied = [r["run"] for r in doc["runs"] if r["tied_with_best"]]
    if len(tied) > 1:
        out.append(
            f"Repeat the tied leaders ({_first_few(tied)}) with 2–3 more seeds each: their intervals overlap, "
            "so the ranking among them is not settled"
        )
    bad_lines = doc["good_bad_ugly"]["bad"] + doc["good_bad_ugly"]["ugly"]
    if any(line.startswith("too aggressive") for line in bad_lines):
        out.append(
            "For the runs flagged too aggressive: lower the learning rate or raise the KL penalty, keeping the "
            "best run's other settings"
        )
    if any(line.startswith("too conservative") for line in bad_lines):
        out.append(_conservative_advice(doc["runs"], rates or {}, penalties))
    if any(line.startswith("insufficient exploration") for line in bad_lines):
        out.append("Where exploration ran out: raise the sampling temperature or the generations per prompt")
    if len(out) < 3 and (suggested or len(tied) < len(doc["runs"])):  # every run tied: no configuration is best
        below = " (the suggested config below)" if suggested else ""
        out.append(f"Start the next sweep from {best['run']}'s configuration{below}")
    if len(out) < 3 and len(doc["runs"]) < 6:
        out.append("Add runs: with so few, only large effects can be told from noise")
    return out[:6], suggested


def _level_text(value):
    """A categorical level as plotted: its text (a config value may be a list or mapping, e.g. layer sizes)."""
    if value is None:
        return None
    return json.dumps(value, default=str) if isinstance(value, (list, dict)) else str(value)


def plots(doc: dict, curve: pl.DataFrame, names: dict[str, str], out_dir: Path, overlay: bool) -> list[Path]:
    from pipeline.report import sweep_plots

    metric, higher = doc["metric"], doc["higher_is_better"]
    runs = pl.DataFrame(
        {
            "run": [r["run"] for r in doc["runs"]],
            "score": [r["score"] for r in doc["runs"]],
            "ci_low": [r["ci"][0] for r in doc["runs"]],
            "ci_high": [r["ci"][1] for r in doc["runs"]],
            "tied_with_best": [r["tied_with_best"] for r in doc["runs"]],
        }
    )
    drawn = [sweep_plots.ranked_scores(runs, metric, higher, out_dir / "ranking.png", f"{doc['selection']}: {metric}")]
    lines = curve.with_columns(pl.col("run_key").replace_strict(names, default=None).alias("run"))
    top = [r["run"] for i, r in enumerate(doc["runs"]) if i == 0 or r["tied_with_best"]]  # the leader and its ties
    drawn.append(
        sweep_plots.curves(
            lines.select("run", "step", "value"),
            metric,
            out_dir / "curves.png",
            f"{doc['selection']}: {metric} per run",
            overlay=overlay,
            highlight=top,
        )
    )
    for e in doc["effects"][:4]:

        def shown(value, kind=e["kind"]):
            return value if kind == "numeric" else _level_text(value)

        points = pl.DataFrame(
            {
                "value": [shown(r["config"].get(e["param"])) for r in doc["runs"]],
                "score": [r["score"] for r in doc["runs"]],
                "run": [r["run"] for r in doc["runs"]],
            },
            strict=False,
        )
        levels = pl.DataFrame(
            [
                {
                    "value": shown(lv["value"]),
                    "mean": lv["mean"],
                    "ci_low": (lv["ci"] or [None, None])[0],
                    "ci_high": (lv["ci"] or [None, None])[1],
                    "best": lv["value"] == e["best_value"],
                }
                for lv in e["levels"]
            ],
            strict=False,
        )
        numbers = [lv["value"] for lv in e["levels"] if isinstance(lv["value"], (int, float))]
        log_x = e["kind"] == "numeric" and bool(numbers) and min(numbers) > 0 and max(numbers) / min(numbers) >= 10
        safe = "".join(c if c.isalnum() else "_" for c in e["param"])[:60]
        drawn.append(
            sweep_plots.score_vs_param(
                points, e["param"], log_x, levels, out_dir / f"effect_{safe}.png", f"{metric} vs {e['param']}"
            )
        )
    if doc["pareto_cost"]:
        frame = pl.DataFrame(
            {
                "run": [r["run"] for r in doc["runs"]],
                "score": [r["score"] for r in doc["runs"]],
                "cost": [float(r["cost"][doc["pareto_cost"]]) for r in doc["runs"]],
                "on_front": [r["run"] in doc["pareto"] for r in doc["runs"]],
            }
        )
        drawn.append(
            sweep_plots.pareto(
                frame,
                doc["pareto_cost"],
                higher,
                out_dir / "pareto.png",
                f"{doc['selection']}: {metric} vs {doc['pareto_cost']}",
            )
        )
    return [p for p in drawn if p is not None]


SWEEPS_FOLDER = "_sweeps"  # under the reports folder; no run's folder can start with "_" (run_report.folder_name)


def build(
    con,
    selection: sweep.Selection,
    metric: str | None = None,
    lower_is_better: bool = False,
    out_dir: Path | None = None,
    compare: bool = False,
) -> dict:
    """The sweep document; with ``out_dir`` also its Markdown, JSON and plots there. ``compare``: an explicit
    list of runs (curves overlaid; repeats of one configuration are still ranked)."""
    import json

    from pipeline.report import sweep_markdown

    doc = analyse(con, selection, metric, lower_is_better, compare=compare)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        names = {r["run_key"]: r["run"] for r in doc["runs"]}
        curve = sweep.curves(con, list(names), doc["metric"])
        doc["files"]["plots"] = [str(p) for p in plots(doc, curve, names, out_dir, overlay=compare)]
        doc["files"]["markdown"] = str(out_dir / "sweep.md")
        (out_dir / "sweep.md").write_text(sweep_markdown.render(doc), encoding="utf-8")
        (out_dir / "sweep.json").write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    return doc


def write_group_reports(settings) -> list[dict]:
    """A sweep report for every W&B sweep and every group of two or more runs in the warehouse; a group that
    cannot be compared (one metric missing, nothing varying) is listed with the reason."""
    from pipeline import warehouse
    from pipeline.report.run_report import folder_name

    con = warehouse.connect_readonly(settings)
    out = []
    try:
        found = con.execute("""
            select 'sweep' as kind, sweep_id as value from runs where sweep_id is not null
            group by all having count(*) > 1
            union all
            select 'group', group_name from runs where group_name is not null group by all having count(*) > 1
            order by 1, 2
        """).fetchall()
        for kind, value in found:
            label = f"{kind} {value}"
            try:
                selection = sweep.select(con, **{kind: value})
                doc = build(con, selection, out_dir=settings.reports_dir / SWEEPS_FOLDER / folder_name(label, None))
                out.append({"selection": label, "doc": doc, "error": None})
            except sweep.SweepError as exc:
                out.append({"selection": label, "doc": None, "error": str(exc)})
    finally:
        con.close()
    return out


def ranking_table(doc: dict, limit: int = 10) -> str:
    """The ranking as a small Markdown table (the Dagster asset's metadata)."""
    lines = ["| rank | run | score | 95% interval | tied with best |", "|---|---|---|---|---|"]
    for r in doc["runs"][:limit]:
        ci = f"[{r['ci'][0]:.3g}, {r['ci'][1]:.3g}]" if r["ci"][0] is not None else "–"
        lines.append(f"| {r['rank']} | {r['run']} | {r['score']:.3g} | {ci} | {'yes' if r['tied_with_best'] else ''} |")
    return "\n".join(lines)
