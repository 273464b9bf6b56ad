"""`grpolens report RUN`: one run's answer — verdict, root cause, one recommendation, sections, plots, samples —
as a JSON document and a Markdown file with its PNGs in ``$GRPOLENS_HOME/reports/<run name>/``.

Reads only: every query goes through a read-only connection the caller opens, so a report never holds the
warehouse's writer lock.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import polars as pl

from pipeline.checks import Check, lacking
from pipeline.report import frames, markdown, sections, story

RUN_KEY_FILE = ".run_key"  # in a report folder: whose report it is, so two runs with one name never share a folder
# A run that logs no reward (a notebook's table of loss alone) passes every rule that could look at it, which says
# little of how it learnt: "healthy, no action needed" would read as a clean bill.
UNJUDGED_SUMMARY = ", but the run logs no reward: the checks of its learning had nothing to read"
UNJUDGED_RECOMMENDATION = (
    "Nothing to act on in what was logged. To judge how the run learns, log its reward (and KL, entropy and "
    "completion length, as TRL and verl do) or map the key that holds it in grpolens.yaml (`aliases:`), and refresh."
)


def folder_name(name: str | None, run_id: str | None) -> str:
    """A run name made safe as one folder name: hostile names (`../x`, slashes, control characters) cannot leave
    the reports folder."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name or "").strip("._-")[:80]
    return safe or re.sub(r"[^A-Za-z0-9._-]+", "_", run_id or "run").strip("._-") or "run"


def report_dir(reports: Path, run: dict) -> Path:
    base = folder_name(run.get("name"), run.get("run_id"))
    digest = hashlib.sha256(run["run_key"].encode()).hexdigest()[:10]
    for candidate in (base, f"{base}-{folder_name(run.get('run_id'), None)}", f"{base}-{digest}"):
        folder = reports / candidate
        marker = folder / RUN_KEY_FILE
        if not marker.exists() or marker.read_text(encoding="utf-8") == run["run_key"]:
            return folder
    return reports / base


def build(
    con,
    run_key: str,
    rules: list[Check],
    out_dir: Path | None = None,
    findings: list[dict] | None = None,
    draw: bool = True,
) -> dict:
    """The report document of one run; with ``out_dir`` also its Markdown and plots there."""
    data = frames.load(con, run_key, findings)
    told = story.tell(data.findings, {rule.name: rule for rule in rules}, data.steps)
    dynamics = sections.learning_dynamics(data)
    parts = {
        "config_and_state": sections.config_and_state(data),
        "learning_dynamics": dynamics,
        "reward_composition": sections.reward_composition(data),
        "elo": sections.elo(data),
        "pipeline_performance": sections.pipeline_performance(data),
        "extraction": sections.extraction(data),
        "prefix_cache": sections.prefix_cache(data),
        "power_law": sections.power_law(data),
        "evaluation": sections.evaluation(data),
        "standing": sections.standing(data),
        "good_bad_ugly": sections.good_bad_ugly(data, dynamics, told.findings, rules),
        "not_judged": sections.not_judged(data, rules),
    }
    root = told.root
    logged = set(data.metrics.get_column("metric").unique().to_list()) if data.metrics.height else set()
    unjudged = told.verdict == "healthy" and "reward_mean" not in logged
    doc: dict[str, Any] = {
        "run": data.run.get("name"),
        "run_key": run_key,
        "verdict": told.verdict,
        "summary": _summary(told) + (UNJUDGED_SUMMARY if unjudged else ""),
        # a run with no reward logged is "healthy" on the few rules that could look at it: say how few
        "rules_applied": [sum(not lacking(rule, logged) for rule in rules), len(rules)],
        "root_cause": {k: root[k] for k in ("check", "severity", "step", "step_end", "transient", "message")}
        | {"consequences_until": story.reach(root, told.window, told.lag)}
        if root
        else None,
        "findings": [
            {
                k: f[k]
                for k in (
                    "check",
                    "severity",
                    "step",
                    "step_end",
                    "metric",
                    "value",
                    "threshold",  # what a folded line measures its worst episode by (checks.fold_recurring)
                    "message",
                    "consequence_of",
                    "related_to",
                    "transient",
                )
            }
            for f in told.findings
        ],
        "recommendation": UNJUDGED_RECOMMENDATION if unjudged else told.recommendation,
        "actions": told.actions,
        "overruled": told.overruled,
        "story_window_steps": told.window,
        "sections": {k: v for k, v in parts.items() if v is not None},
        "files": {"markdown": None, "plots": []},
    }
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / RUN_KEY_FILE).write_text(run_key, encoding="utf-8")
        doc["sections"]["samples"] = _samples(con, run_key, root)
        if draw:
            doc["files"]["plots"] = [str(p) for p in _plots(data, told.findings, out_dir) if p is not None]
        path = out_dir / "report.md"
        doc["files"]["markdown"] = str(path)
        path.write_text(markdown.render(doc, out_dir), encoding="utf-8")
        (out_dir / "report.json").write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    return doc


def _summary(told: story.Story) -> str:
    """The verdict's one line."""
    if told.root is None:
        return (
            "no check flagged anything at warn or error level"
            if told.verdict == "healthy"
            else "only findings without an onset step"
        )
    root = told.root
    own = [f for f in told.findings if f is not root and f["check"] == root["check"]]  # never its consequences
    end = root["step_end"] if root["step_end"] is not None else float("inf")
    during = {id(f) for f in own if f["step"] is not None and root["step"] <= f["step"] <= end}  # another branch
    again = [f for f in own if f["severity"] != "info" and id(f) not in during]  # the condition came back
    told_apart = {id(root)} | {id(f) for f in own}
    rest = [f for f in told.findings if id(f) not in told_apart]
    # rules, not episodes: two episodes of one rule are one consequence, however the text folds them
    others = len({f["check"] for f in rest if f["consequence_of"] == root["check"]})
    related = len({f["check"] for f in rest if f["related_to"] == root["check"]})
    told_with = {f["check"] for f in rest if f["consequence_of"] or f["related_to"]}
    more = len({f["check"] for f in rest if f["severity"] in ("warn", "error")} - told_with)
    tail = f" (and {len(again)} more time{'s' * (len(again) != 1)})" if again else ""
    tail += f", with {others} consequence{'s' * (others != 1)}" if others else ""
    tail += f"{' and' if others else ', with'} {related} related finding{'s' * (related != 1)}" if related else ""
    tail += f"; {more} other finding{'s' * (more != 1)}" if more else ""
    said = f" ({story.severity_said(root)})" if root.get("transient") else ""
    return f"{root['check']}{said} from step {root['step']}{tail}"


def _samples(con, run_key: str, root: dict | None) -> dict:
    """Completions just before and after the root cause's onset, and the latest ones when they come later: an
    evaluation table logged every few steps can lag the training collapse it should show."""
    from pipeline.report.samples import completion_samples

    around = completion_samples(con, run_key, root["step"] if root else None)
    if root and around.get("available"):
        latest = completion_samples(con, run_key, None).get("after") or []
        seen = max((s["step"] for s in around["after"] if s["step"] is not None), default=None)
        if seen is not None and latest and all(s["step"] is not None and s["step"] > seen for s in latest):
            around["latest"] = latest
    return around


def _plots(data: frames.RunData, findings: list[dict], out_dir: Path) -> list[Path | None]:
    from pipeline.report import plots

    name = data.run.get("name") or data.run["run_key"]
    core = data.metrics.filter(pl.col("metric").is_in(frames.CORE_METRICS))
    phases = data.metrics.filter(pl.col("metric").str.starts_with("phase_")).select(
        "step",
        pl.col("metric").str.strip_prefix("phase_").str.strip_suffix("_s").alias("phase"),
        pl.col("value").alias("seconds"),
    )
    components = data.table("component_history")
    gap = data.table("elo_gap")
    return [
        plots.core_curves(core, findings, out_dir / "core_curves.png", f"{name}: core curves"),
        plots.elo_gap(
            gap.select("step", "gap", "gap_ci_low", "gap_ci_high"), out_dir / "elo_gap.png", f"{name}: Elo gap"
        )
        if gap.height
        else None,
        plots.reward_components(components, out_dir / "reward_components.png", f"{name}: reward components")
        if components.height
        else None,
        plots.step_time_shares(phases, out_dir / "step_time.png", f"{name}: step time") if phases.height else None,
    ]
