"""Reports for many runs at once (the demo, the Dagster `run_reports` asset), regenerating only the runs whose
data or findings changed since their report was written: a refresh that touched two runs redraws two reports."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from pipeline import checks, warehouse
from pipeline.report import run_report

STATE_FILE = ".reports.json"  # in the reports folder: run_key -> the fingerprint its report was written from


def _fingerprints(con) -> dict[str, str]:
    """Per run: what its report depends on — its ingest (rows, last step, newest ingest) and its findings."""
    rows = con.execute("""
        with flags as (
            select run_key, string_agg(concat_ws('|', check_name, severity, step, step_end, round(value, 6)), ';'
                                       order by check_name, step) as flags
            from anomalies where run_key is not null group by run_key
        )
        select r.run_key, concat_ws('|', r.last_step, r.history_rows, r.ingested_at, r.state, f.flags)
        from runs r left join flags f using (run_key)
    """).fetchall()
    return {key: hashlib.sha256(str(text).encode()).hexdigest()[:16] for key, text in rows}


def _drawn(settings) -> dict[str, str | None]:
    """run_key -> the fingerprint its report was written from (STATE_FILE)."""
    try:
        state = json.loads((settings.reports_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or cut short: every report is redrawn
        return {}
    return state if isinstance(state, dict) else {}


def _up_to_date(state: dict[str, str | None], current: dict[str, str], run_key: str, kept: Path) -> bool:
    return state.get(run_key) == current.get(run_key) and kept.exists()


def stale_reports(settings, con) -> list[str]:
    """The run_keys whose report `write_reports` would redraw now (``con``: open on the warehouse, which has an
    anomalies table): new runs, and runs whose data or findings changed since their report was written."""
    state, current = _drawn(settings), _fingerprints(con)
    stale = []
    for run_key, name, run_id in con.execute("select run_key, name, run_id from runs order by run_key").fetchall():
        out = run_report.report_dir(settings.reports_dir, {"run_key": run_key, "name": name, "run_id": run_id})
        if not _up_to_date(state, current, run_key, out / "report.json"):
            stale.append(run_key)
    return stale


def write_reports(
    settings, only_changed: bool = True, draw: bool = True, progress: Callable[[str], None] | None = None
) -> list[dict]:
    """Write (or keep) the report of every run; returns one summary per run: run, run_key, verdict, root cause,
    onset, markdown path, main plot path, regenerated (bool). Findings come from the `anomalies` table, which the
    caller has just refreshed (the asset sits downstream of it)."""
    rules = checks.load_checks()
    reports = settings.reports_dir
    state_path = reports / STATE_FILE
    state = _drawn(settings) if only_changed else {}
    con = warehouse.connect_readonly(settings)
    summaries = []
    try:
        if "anomalies" not in {
            n for (n,) in con.execute("select table_name from information_schema.tables").fetchall()
        }:
            raise checks.CheckError("the warehouse has no anomalies table yet: run `grpolens refresh` (or `check`)")
        current = _fingerprints(con)
        runs = con.execute("select run_key, name, run_id from runs order by name, run_key").fetchall()
        for run_key, name, run_id in runs:
            out = run_report.report_dir(reports, {"run_key": run_key, "name": name, "run_id": run_id})
            kept = out / "report.json"
            if only_changed and _up_to_date(state, current, run_key, kept):
                doc, regenerated = json.loads(kept.read_text(encoding="utf-8")), False
            else:
                doc, regenerated = run_report.build(con, run_key, rules, out, draw=draw), True
                state[run_key] = current.get(run_key)
                if progress:
                    progress(f"report {name}: {doc['verdict']}")
            root = doc["root_cause"] or {}
            plots = doc["files"]["plots"]
            summaries.append(
                {
                    "run": doc["run"],
                    "run_key": run_key,
                    "verdict": doc["verdict"],
                    "root_cause": root.get("check"),
                    "onset": root.get("step"),
                    "markdown": doc["files"]["markdown"],
                    "main_plot": plots[0] if plots else None,
                    "regenerated": regenerated,
                }
            )
    finally:
        con.close()
    reports.mkdir(parents=True, exist_ok=True)
    temp = state_path.with_suffix(".tmp")
    temp.write_text(json.dumps({k: v for k, v in state.items() if k in current}, indent=1), encoding="utf-8")
    temp.replace(state_path)
    return summaries


def verdict_table(summaries: list[dict], relative_to: Path | None = None) -> str:
    """The Markdown table the UI and the demo show: run, verdict, root cause, onset, report file."""
    order = {"unhealthy": 0, "watch": 1, "healthy": 2}
    lines = ["| run | verdict | root cause | onset | report |", "|---|---|---|---|---|"]
    for s in sorted(summaries, key=lambda s: (order[s["verdict"]], s["run"] or "")):
        path = Path(s["markdown"]) if s["markdown"] else None
        link = str(path.relative_to(relative_to)) if path and relative_to and path.is_relative_to(relative_to) else path
        name = (s["run"] or s["run_key"]).replace("|", "\\|")
        lines.append(
            f"| {name} | {s['verdict']} | {s['root_cause'] or '–'} | "
            f"{s['onset'] if s['onset'] is not None else '–'} | {f'[report.md]({link})' if link else '–'} |"
        )
    return "\n".join(lines)
