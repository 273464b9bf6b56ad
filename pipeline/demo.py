"""`grpolens demo`: sample runs written by the real wandb library in offline mode, ingested and built end to end."""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

from pipeline import warehouse
from pipeline.checks import check_warehouse
from pipeline.ingest import ingest
from pipeline.settings import Settings


def run_demo(settings: Settings, scale: float = 1.0, progress: Callable[[str], None] = print,
             axiom_emulator: bool = False) -> None:
    """Sample runs and events, ingested and built. Events come from NDJSON files, or with ``axiom_emulator``
    through the real Axiom client against the emulator on 127.0.0.1 (the API path end to end)."""
    from pipeline.demo_events import write_demo_events
    from pipeline.demo_runs import write_demo_runs

    started = time.perf_counter()
    out = settings.home / "demo_runs"
    logs = settings.home / "demo_trainer_logs"
    if out.exists() and any(out.rglob("run-*.wandb")):
        progress(f"sample runs already in {out}; delete that folder to write them again")
    else:
        progress(f"writing sample runs with wandb (offline mode) into {out} …")
        runs = write_demo_runs(out, scale=scale, progress=progress)
        progress(f"wrote {len(runs)} runs")
        write_trainer_state(logs / "trl-qwen-gsm8k-no-wandb", steps=max(30, int(120 * scale)))
        progress(f"wrote a Hugging Face trainer_state.json run (no W&B) into {logs}")
    events = settings.home / "demo_events" / "diplomacy.ndjson"
    if not events.exists():
        hours = max(1.0, 6 * scale)
        events.parent.mkdir(parents=True, exist_ok=True)
        truth = write_demo_events(events, datetime.now(timezone.utc) - timedelta(hours=hours), hours=hours)
        progress(f"wrote {sum(truth['counts'].values())} trainer events (slow rollouts, an error burst, "
                 f"extraction failures) into {events}")
    settings = replace(settings, wandb_dirs=_with(settings.wandb_dirs, out), trainer_logs=_with(settings.trainer_logs, logs))
    if not axiom_emulator:
        settings = replace(settings, event_files=_with(settings.event_files, events.parent))
    ingest(settings, progress=progress)
    if axiom_emulator:
        from pipeline.demo_events import serve_demo_events
        from pipeline.sources import axiom

        with serve_demo_events(events) as (url, token):
            progress(f"serving the events from the Axiom emulator at {url}")
            for line in axiom.ingest(settings.lake, ["diplomacy"], progress, url=url, token=token).lines():
                progress(line)
    warehouse.build(settings, progress=progress, stamp=False)
    outcomes = check_warehouse(settings)
    warehouse.stamp_build(settings)
    flagged = [row for outcome in outcomes for row in outcome.rows]
    progress(summary(settings))
    progress(f"Checks: {len(flagged)} anomalies flagged ({sum(r['severity'] == 'error' for r in flagged)} errors); "
             "list them with `.venv/bin/grpolens check`")
    from pipeline.report.batch import verdict_table, write_reports

    reports = write_reports(settings)
    progress(f"\nReports ({settings.reports_dir}; one run: `.venv/bin/grpolens report RUN`):")
    progress(verdict_table(reports, settings.reports_dir))
    from pipeline.report.sweep_report import write_group_reports

    progress("\nSweeps (one command each: `.venv/bin/grpolens sweep --group G`):")
    for result in write_group_reports(settings):
        doc = result["doc"]
        if doc is None:
            progress(f"  {result['selection']}: {result['error']}")
            continue
        tied = [r["run"] for r in doc["runs"][1:] if r["tied_with_best"]]
        progress(f"  {doc['selection']}: best {doc['runs'][0]['run']} on {doc['metric']}"
                 + (f" (tied with {', '.join(tied)})" if tied else "") + f" — {doc['files']['markdown']}")
    progress(f"demo finished in {time.perf_counter() - started:.1f}s")


def _with(paths: tuple[Path, ...], extra: Path) -> tuple[Path, ...]:
    return paths if extra in paths else (*paths, extra)


def write_trainer_state(run_dir: Path, steps: int = 120, seed: int = 3) -> Path:
    """A TRL GRPOTrainer run that logged only through the Hugging Face Trainer: checkpoint-N/trainer_state.json."""
    rng = random.Random(seed)
    history = []
    for step in range(1, steps + 1):
        accuracy = min(1.0, 0.15 + 0.6 * step / steps + rng.gauss(0, 0.08))
        fmt = min(1.0, 0.3 + 0.5 * step / steps + rng.gauss(0, 0.05))
        history.append({
            "loss": round(0.04 * step / steps + rng.gauss(0, 0.002), 6), "grad_norm": abs(rng.gauss(0.4, 0.1)),
            "learning_rate": 5e-6 * (1 - step / steps), "rewards/accuracy_reward": max(0.0, accuracy),
            "rewards/format_reward": max(0.0, fmt), "reward": max(0.0, accuracy) + max(0.0, fmt),
            "reward_std": abs(rng.gauss(0.35, 0.08)), "completion_length": 180 + 60 * step / steps + rng.gauss(0, 8),
            "kl": abs(0.002 + 0.03 * step / steps + rng.gauss(0, 0.004)), "epoch": round(step / steps, 4),
            "step": step,
        })
    state = {"global_step": steps, "max_steps": steps, "num_train_epochs": 1, "logging_steps": 1,
             "train_batch_size": 8, "log_history": history, "is_world_process_zero": True}
    path = run_dir / f"checkpoint-{steps}" / "trainer_state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2))
    return path


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
            for table in ("runs", "history", "metrics", "elo_ratings", "elo_gap", "events")
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
        health = con.sql("""select h.status, h.error_rate, h.completion_rate, r.duration_p95_s, t.trajectories_per_hour,
                                   e.full_share
                            from health h
                            left join rollout_timing r on r.dataset = h.dataset and r.grain = 'overall'
                            left join throughput t on t.dataset = h.dataset and t.grain = 'overall'
                            left join extraction e on e.dataset = h.dataset and e.grain = 'overall'
                            where h.grain = 'overall'""").fetchall()
        for status, errors, completion, p95, per_hour, full in health:
            lines.append("")
            lines.append(f"Rollout pipeline (events): {status}, error rate {errors:.1%}, completion {completion:.1%}, "
                         f"p95 rollout {p95:.0f}s, {per_hour:.0f} trajectories/hour, {full:.1%} orders fully extracted")
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
