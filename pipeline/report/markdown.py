"""A run report as Markdown: verdict, root cause and recommendation first, then the sections a run has, with the
plots beside the report file so any Markdown viewer shows them."""

from __future__ import annotations

import math
from pathlib import Path

from pipeline.checks import fold_recurring, span
from pipeline.report import story

VERDICT_MARK = {"healthy": "HEALTHY", "watch": "WATCH", "unhealthy": "UNHEALTHY"}


def fmt(value, digits: int = 3) -> str:
    """A number rounded to significant digits; '–' for nothing."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.{digits}g}"
    return str(value)


def _cell(value) -> str:
    return fmt(value).replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict], columns: list[str], headers: list[str] | None = None) -> list[str]:
    if not rows:
        return []
    out = ["| " + " | ".join(headers or columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return out + [""]


def _trend(summary: dict) -> str:
    trend = summary.get("trend")
    if not trend:
        return "–"
    word = "" if trend["significant"] else " (not significant)"
    if not trend["significant"] and (summary.get("tenths_shift") or {}).get("significant"):
        word = (
            f" (no steady trend, but it moved: {summary['first_tenth_mean']:.3g} → {summary['last_tenth_mean']:.3g}, "
            "means of the first and last tenth)"
        )
    return f"{trend['slope']:+.3g} [{trend['ci'][0]:+.3g}, {trend['ci'][1]:+.3g}]{word}"


def render(doc: dict, out_dir: Path) -> str:
    s = doc["sections"]
    state = s["config_and_state"]
    lines = [
        f"# Run report: {state['name']}",
        "",
        f"`{doc['run_key']}` · {state.get('project') or ''} · group {state.get('group') or '–'} · "
        f"state {state.get('state') or '?'} · last step {fmt(state.get('last_step'))}",
        "",
        f"**Verdict: {VERDICT_MARK[doc['verdict']]}** — {doc['summary']} "
        f"({doc['rules_applied'][0]} of {doc['rules_applied'][1]} rules applied)",
        "",
    ]
    root = doc["root_cause"]
    if root:
        said = f"{story.severity_said(root)}; it weighs as a warning" if root.get("transient") else root["severity"]
        lines += [f"**Root cause:** `{root['check']}` ({said}) from step {root['step']}: {root['message']}"]
        window = f"{doc['story_window_steps']:.0f} steps"
        until, end = root.get("consequences_until"), root["step_end"]
        after = f"within {window} after it"
        if until is not None and end is not None and until >= end:  # an episode that ended explains less
            after = f"by step {until}, {until - end} step{'s' * (until - end != 1)} after it ended"
        for key, heading in (
            ("consequence_of", f"Consequences (starting at its onset or {after}):"),
            ("related_to", f"Related (starting within {window} before it, so not its consequences):"),
        ):
            told = [f for f in doc["findings"] if f.get(key) == root["check"]]
            if told:
                lines += ["", heading]
                lines += [
                    f"- `{f['check']}` ({f['severity']}) from step {f['step']}: {f['message']}"
                    for f in fold_recurring(told, "check")
                ]
        lines.append("")
    lines += ["**Recommendation:**", ""]
    lines += [f"{i}. {a['text']} — for {', '.join(a['because'])}" for i, a in enumerate(doc["actions"], 1)] or [
        doc["recommendation"]
    ]
    for note in doc.get("overruled", []):
        lines.append(f"- Not advised: {note}")
    lines.append("")
    plots = [Path(p) for p in doc["files"]["plots"]]
    for plot in plots:
        lines += [f"![{plot.stem}]({plot.name})", ""]
    gbu = s["good_bad_ugly"]
    for heading, key in (("The Good", "good"), ("The Bad", "bad"), ("The Ugly", "ugly")):
        lines += [f"## {heading}", ""] + ([f"- {item}" for item in gbu[key]] or ["- nothing"]) + [""]
    lines += _findings(doc) + _config(state) + _dynamics(s.get("learning_dynamics") or {})
    lines += _components(s.get("reward_composition")) + _elo(s.get("elo")) + _pipeline(s.get("pipeline_performance"))
    lines += _simple("Extraction quality", s.get("extraction")) + _simple("Prefix cache", s.get("prefix_cache"))
    lines += _power_law(s.get("power_law")) + _evaluation(s.get("evaluation")) + _standing(s.get("standing"))
    lines += _samples(s.get("samples"))
    if s.get("not_judged"):
        lines += ["## Not judged", ""] + [f"- {n['what']}: {n['why']}" for n in s["not_judged"]] + [""]
    return "\n".join(lines).rstrip() + "\n"


def _findings(doc: dict) -> list[str]:
    if not doc["findings"]:
        return []
    rows = [
        dict(
            f,
            step=span(f) + (f" ({f['episodes']} episodes)" if f.get("episodes") else ""),
        )
        for f in fold_recurring(doc["findings"], "check")
    ]
    return ["## Findings", ""] + table(
        rows,
        ["severity", "check", "step", "metric", "value", "consequence_of", "related_to"],
        ["severity", "check", "steps", "metric", "value", "consequence of", "related to"],
    )


def _config(state: dict) -> list[str]:
    lines = [
        "## Config and state",
        "",
        f"- created {state.get('created_at') or '?'}, last heard {state.get('heartbeat_at') or '?'}",
        f"- {state['logged_steps']} logged steps, from {fmt(state.get('first_step'))} to "
        f"{fmt(state.get('last_step'))}; {state['config_keys']} config keys",
    ]
    if state.get("step_source") == "ordinal":
        lines.append(
            "- steps are the order of the log's metric lines (the log prints no step): step 29 is the 29th line, "
            "not trainer step 29, when the trainer logs every few steps (logging_steps)"
        )
    elif state.get("step_source") == "logging_grid":
        lines.append(
            "- the log prints no step: its metric lines are placed on the trainer's logging grid (logging_steps, "
            "from its progress bar's total over the number of lines, which their printed epochs confirm)"
        )
    if state.get("tags"):
        lines.append(f"- tags: {', '.join(state['tags'])}")
    lines.append("")
    hp = [{"key": k, "value": v} for k, v in state["hyperparameters"].items()]
    return lines + table(hp, ["key", "value"])


def _dynamics(dynamics: dict) -> list[str]:
    if not dynamics:
        return []
    rows = [dict(summary, metric=name, trend=_trend(summary)) for name, summary in dynamics.items()]
    return [
        "## Learning dynamics",
        "",
        "Trend per 100 steps with its 95% interval (autocorrelation-corrected).",
        "",
    ] + table(
        rows,
        ["metric", "points", "first", "best", "last", "min", "max", "trend", "non_finite"],
        ["metric", "points", "first", "best", "last", "min", "max", "trend / 100 steps", "non-finite"],
    )


def _components(section: dict | None) -> list[str]:
    if not section:
        return []
    return ["## Reward composition", ""] + table(
        section["components"],
        ["component", "is_task", "first_mean", "last_mean", "gain", "gain_share"],
        ["component", "task?", "first", "last", "gain", "share of the reward's gain"],
    )


def _elo(section: dict | None) -> list[str]:
    if not section:
        return []
    lines = [
        "## Elo of fixed references",
        "",
        f"Gap best checkpoint − base model at step {section['step']}: **{fmt(section['gap'])} ± "
        f"{fmt(section['gap_se'])}** Elo (95% {fmt(section['gap_ci'][0])} to {fmt(section['gap_ci'][1])}); "
        f"peak {fmt(section['peak_gap'])} at step {section['peak_step']}; best checkpoint "
        f"`{section['best_checkpoint']}`. Verdict: {section['verdict']}.",
        "",
    ]
    return lines + table(
        section["references"],
        ["player", "start_rating", "end_rating", "change", "slope_per_100_steps", "verdict"],
        ["reference", "start", "end", "change", "slope / 100 steps", "verdict"],
    )


def _pipeline(section: dict | None) -> list[str]:
    if not section:
        return []
    lines = ["## Pipeline performance", ""]
    if section.get("bottleneck"):
        lines += [f"Bottleneck: **{section['bottleneck']}**.", ""]
    lines += table(
        section.get("phases") or [],
        ["phase", "share_of_step", "mean_s", "is_bottleneck"],
        ["phase", "share of step", "mean s", "bottleneck"],
    )
    for name in ("step_time_s", "trajectories_per_s", "tokens_per_s_per_gpu"):
        if section.get(name):
            m = section[name]
            # one step's time says little: the last often holds a checkpoint save or a validation pass
            if m.get("first_tenth_mean") is not None:
                span = f"{fmt(m['first_tenth_mean'])} → {fmt(m['last_tenth_mean'])} (means of the first and last tenth"
            else:
                span = f"{fmt(m.get('first'))} → {fmt(m.get('last'))} (first and last logged value"
            lines.append(f"- {name}: {span}; trend {_trend(m)})")
    if section.get("events"):
        e = section["events"]
        hours, failed = e["hours"], e["rollouts_failed"]
        lines.append(
            f"- events ({', '.join(e['datasets'])}, tied by {e['tied_by']}): {hours} hour{'s' * (hours != 1)}, "
            f"error rate {fmt(100 * (e['error_rate'] or 0))}%, {failed} failed rollout{'s' * (failed != 1)}, "
            f"worst hourly p95 {fmt(e['worst_p95_s'])} s"
        )
    return lines + [""]


def _simple(title: str, section: dict | None) -> list[str]:
    if not section:
        return []
    lines = [f"## {title}", ""]
    for name, m in section.items():
        if isinstance(m, dict):
            lines.append(
                f"- {name}: first {fmt(m.get('first'))}, last {fmt(m.get('last'))}, min {fmt(m.get('min'))} "
                f"(trend {_trend(m)})"
            )
    return lines + [""]


def _power_law(section: dict | None) -> list[str]:
    if not section:
        return []
    if section.get("missing_reason"):
        return ["## Power law", "", f"Not fitted: {section['missing_reason']}.", ""]
    left_out = ""
    if section.get("n_nonpositive"):  # a log-log fit sees only the positive rewards: say how many it could not
        n, of = section["n_nonpositive"], section["n_points"] + section.get("n_excluded", 0)
        left_out = f" {n} of {of} points have a reward ≤ 0 and are not in the fit" + (
            ": it describes the best steps only, not the run." if n * 2 > of else "."
        )
    return [
        "## Power law",
        "",
        f"{section.get('performance_metric')} ∝ compute^b over {section.get('compute_basis')} "
        f"({section.get('n_points')} points): b = **{fmt(section.get('exponent'))}** (95% "
        f"{fmt(section.get('exponent_ci_low'))} to {fmt(section.get('exponent_ci_high'))}), "
        f"R² = {fmt(section.get('r_squared'))}.{left_out}",
        "",
    ]


def _evaluation(section: dict | None) -> list[str]:
    if not section:
        return []
    lines = ["## Evaluation and artifacts", ""]
    lines += table(
        section.get("metrics") or [],
        ["key", "points", "first_value", "last_value", "best_value", "best_step"],
        ["key", "points", "first", "last", "best", "at step"],
    )
    for artifact in section.get("artifacts") or []:
        lines.append(f"- artifact `{artifact.get('artifact_name')}` ({artifact.get('artifact_type')})")
    return lines + [""]


def _standing(section: dict | None) -> list[str]:
    if not section:
        return []
    return [
        "## Among its peers",
        "",
        f"Rank {section['rank']} of {section['runs']} runs of the same {section['grouped_by'].replace('_name', '')} "
        f"on {section['metric']} ({section['over']}): {fmt(section['tail_reward'])}, percentile "
        f"{fmt(section['percentile'])}; best: {section['best_run']}.",
        "",
    ]


def _samples(section: dict | None) -> list[str]:
    if not section or not section.get("available"):
        return ["## Samples", "", section["note"], ""] if section and section.get("note") else []
    lines = ["## Samples around the root cause's onset", "", f"From the logged table `{section.get('key')}`."]
    if section.get("note"):
        lines.append(f"({section['note']})")
    lines.append("")
    for side in ("before", "after", "latest"):
        for sample in section.get(side) or []:
            lines += [
                f"**{side}, step {sample.get('step')}** — reward {fmt(sample.get('reward'))}, "
                f"{sample.get('length_chars')} characters:",
                "",
                "```text",
                (sample.get("completion") or "").replace("```", "'''"),
                "```",
                "",
            ]
    return lines
