"""`grpolens demo`: sample runs written by the real wandb library in offline mode, ingested and built end to end."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from pipeline import warehouse
from pipeline.ingest import ingest
from pipeline.settings import Settings


def run_demo(settings: Settings, scale: float = 1.0, progress: Callable[[str], None] = print) -> None:
    from pipeline.demo_runs import write_demo_runs

    started = time.perf_counter()
    out = settings.home / "demo_runs"
    if out.exists() and any(out.rglob("run-*.wandb")):
        progress(f"sample runs already in {out}; delete that folder to write them again")
    else:
        progress(f"writing sample runs with wandb (offline mode) into {out} …")
        runs = write_demo_runs(out, scale=scale, progress=progress)
        progress(f"wrote {len(runs)} runs")
    dirs = settings.wandb_dirs if out in settings.wandb_dirs else (*settings.wandb_dirs, out)
    settings = replace(settings, wandb_dirs=dirs)
    ingest(settings, progress=progress)
    warehouse.build(settings, progress=progress)
    progress(summary(settings))
    progress(f"demo finished in {time.perf_counter() - started:.1f}s")


def summary(settings: Settings) -> str:
    con = warehouse.connect_readonly(settings)
    try:
        lines = ["", "Runs:"]
        for project, name, state, steps, values in con.sql(
            """select r.project, r.name, r.state, r.last_step, count(h.key)
               from runs r left join history h using (run_key)
               group by all order by r.project, r.name"""
        ).fetchall():
            lines.append(f"  {project:<16} {name:<24} {state:<9} last step {steps!s:>5}  {values:>7} values")
        lines.append("")
        lines.append("Rows: " + ", ".join(
            f"{table} {con.sql(f'select count(*) from {table}').fetchone()[0]}"
            for table in ("runs", "history", "metrics", "elo_ratings", "elo_gap")
        ))
        lines.append("")
        lines.append("Elo gap, best checkpoint − base_model, at each league run's last step:")
        gaps = con.sql(
            """select r.name, g.step, g.best_checkpoint, g.gap, g.gap_se
               from elo_gap g join runs r using (run_key)
               qualify row_number() over (partition by g.run_key order by g.step desc) = 1
               order by r.name"""
        ).fetchall()
        for name, step, best, gap, se in gaps:
            error = f" ± {se:.1f}" if se is not None else ""
            lines.append(f"  {name:<24} step {step:>4}: {gap:+.1f}{error} Elo (best: {best})")
        if not gaps:
            lines.append("  (no league runs)")
        lines += [
            "",
            f"Warehouse: {settings.duckdb_path}",
            f"Lake:      {settings.lake}",
            "Try:       .venv/bin/grpolens sql \"select * from elo_reference_trends\"",
            "           make ui   (Dagster UI on http://127.0.0.1:3000)",
        ]
        return "\n".join(lines)
    finally:
        con.close()
