"""A run's entry in a Markdown experiment tracker (the seeds keep `docs/experiment-tracker.md`): added at the end,
or replaced where it is, between two HTML comments that name the run; the rest of the file is never touched.
Writing the same report twice leaves the same file."""

from __future__ import annotations

import os
import re
from pathlib import Path

HEADING = "## Runs diagnosed by grpolens"


def _markers(run_key: str) -> tuple[str, str]:
    return f"<!-- grpolens:run {run_key} -->", f"<!-- /grpolens:run {run_key} -->"


def entry(doc: dict, report_path: str | None, tracker: Path) -> str:
    state = doc["sections"]["config_and_state"]
    start, end = _markers(doc["run_key"])
    root = doc["root_cause"]
    link = os.path.relpath(report_path, tracker.resolve().parent) if report_path else None
    lines = [
        start,
        f"### {doc['run']} — {doc['verdict']}",
        "",
        f"- run `{doc['run_key']}`, last step {state.get('last_step')}, state {state.get('state')}",
    ]
    if state.get("hyperparameters"):
        lines.append("- config: " + ", ".join(f"{k}={v}" for k, v in list(state["hyperparameters"].items())[:8]))
    lines.append(f"- root cause: `{root['check']}` from step {root['step']}" if root else "- root cause: none")
    lines.append(f"- next: {doc['recommendation']}")
    if link:
        lines.append(f"- report: [{link}]({link})")
    return "\n".join(lines + [end])


def update(tracker: Path, doc: dict, report_path: str | None) -> bool:
    """Add or replace the run's entry; True when the file changed."""
    text = tracker.read_text(encoding="utf-8") if tracker.exists() else ""
    new = entry(doc, report_path, tracker)
    start, end = _markers(doc["run_key"])
    block = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if block.search(text):
        updated = block.sub(lambda _m: new, text, count=1)
    else:
        if HEADING not in text:
            text = (text.rstrip("\n") + "\n\n" if text.strip() else "# Experiment tracker\n\n") + HEADING + "\n"
        updated = text.rstrip("\n") + "\n\n" + new + "\n"
    if updated == text:
        return False
    tracker.parent.mkdir(parents=True, exist_ok=True)
    temp = tracker.with_name(f".{tracker.name}.{os.getpid()}.tmp")
    temp.write_text(updated, encoding="utf-8")
    temp.replace(tracker)
    return True
