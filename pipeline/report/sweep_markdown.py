"""A sweep comparison as Markdown: the winner and how sure we are, then why (effects), then what to try next."""

from __future__ import annotations

from pathlib import Path

from pipeline.report.markdown import fmt, table


def _interval(ci) -> str:
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci and ci[0] is not None else "–"


def render(doc: dict) -> str:
    runs = doc["runs"]
    best = runs[0]
    direction = "higher" if doc["higher_is_better"] else "lower"
    tied = [r["run"] for r in runs[1:] if r["tied_with_best"]]
    lines = [
        f"# Sweep: {doc['selection']}",
        "",
        f"{len(runs)} runs compared on **{doc['metric']}** ({direction} is better; each run's score is its mean "
        "over the last 10% of its logged points with an autocorrelation-corrected 95% interval, or the last Elo "
        "gap with its standard error).",
        "",
    ]
    if doc.get("note"):  # a caveat on the winner: read before it
        lines += [f"Note: {doc['note']}.", ""]
    lines += [
        f"**Winner: {best['run']}** — {fmt(best['score'])} {_interval(best['ci'])}"
        + (f"; tied with {', '.join(tied)} (intervals overlap)." if tied else "; no other run's interval reaches it."),
        "",
    ]
    lines += ["**Next experiments:**", ""] + [f"{i}. {r}" for i, r in enumerate(doc["recommendations"], 1)] + [""]
    for plot in doc["files"]["plots"]:
        lines += [f"![{Path(plot).stem}]({Path(plot).name})", ""]
    gbu = doc["good_bad_ugly"]
    for heading, key in (("The Good", "good"), ("The Bad", "bad"), ("The Ugly", "ugly")):
        lines += [f"## {heading}", ""] + ([f"- {item}" for item in gbu[key]] or ["- nothing"]) + [""]
    params = [e["param"] for e in doc["effects"]]
    rows = [
        dict(
            r,
            ci=_interval(r["ci"]),
            tied="yes" if r["tied_with_best"] else "",
            flags=", ".join(r["flags"]),
            **{p: r["config"].get(p) for p in params[:5]},
        )
        for r in runs
    ]
    lines += ["## Ranking", ""] + table(
        rows, ["rank", "run", "score", "ci", "tied", *params[:5], "steps_to_target", "last_step", "flags"]
    )
    if doc["effects"]:
        lines += [
            "## Hyper-parameter effects",
            "",
            "Attribution, not proof: Spearman's ρ over the runs with a bootstrap 95% interval; per-level means "
            "with t intervals (terciles for more than six values).",
            "",
        ]
        for e in doc["effects"]:
            interval = _interval(e["ci"]) if e["ci"] else "(too few runs for an interval)"
            rho = f"ρ = {e['spearman']:+.2f} {interval}" if e["spearman"] is not None else e["kind"]
            verdict = "significant" if e["significant"] else "not significant"
            extra = f"; peak at {fmt(e['peak'])} (inverted U)" if e["peak"] is not None else ""
            extra += f"; moves with {', '.join(e['confounded_with'])} (confounded)" if e["confounded_with"] else ""
            lines += [f"**{e['param']}** — {rho}, {verdict}; best level {fmt(e['best_value'])}{extra}", ""]
            lines += table(
                [dict(lv, ci=_interval(lv["ci"])) for lv in e["levels"]],
                ["label", "n", "mean", "ci"],
                ["value", "runs", "mean", "95% interval"],
            )
    if doc.get("suggested_config"):
        lines += [
            "## Suggested config",
            "",
            "The best run's values of the parameters that varied, with the supported changes:",
            "",
        ]
        lines += table([{"param": k, "value": v} for k, v in doc["suggested_config"].items()], ["param", "value"])
    if doc["pareto"]:
        lines += [
            "## Pareto front",
            "",
            f"Runs no other run beats on {doc['metric']} at equal or lower "
            f"{doc['pareto_cost']}: {', '.join(doc['pareto'])}.",
            "",
        ]
    fitted = [p for p in doc["power_law"] if p["exponent"] is not None]
    if fitted:
        lines += [
            "## Power law",
            "",
            f"{fitted[0]['performance_metric']} ∝ compute^b per run "
            f"({fitted[0]['compute_basis']}): {doc.get('power_law_summary') or ''}",
            "",
        ]
        lines += table(
            [dict(p, ci=_interval([p["exponent_ci_low"], p["exponent_ci_high"]])) for p in fitted],
            ["run", "compute_basis", "exponent", "ci", "r_squared", "n_points"],
        )
    if doc["excluded"]:
        lines += ["## Left out", ""] + [f"- {x['run']}: {x['why']}" for x in doc["excluded"]] + [""]
    return "\n".join(lines).rstrip() + "\n"
