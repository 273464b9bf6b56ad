"""`grpolens demo`: sample runs written by the real wandb library in offline mode, ingested and built end to end."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pipeline import warehouse
from pipeline.ingest import SOURCES, ingest
from pipeline.settings import Settings


def run_demo(
    settings: Settings,
    scale: float = 1.0,
    progress: Callable[[str], None] = print,
    axiom_emulator: bool = False,
    answer: Callable[[str], None] = print,
) -> None:
    """Sample runs and events, ingested and built. Events come from NDJSON files, or with ``axiom_emulator``
    through the real Axiom client against the emulator on 127.0.0.1 (the API path end to end). The summary (runs,
    Elo gaps, checks, verdicts, sweeps) goes to ``answer``, what is being done to ``progress``."""
    from pipeline.demo.events import write_demo_events
    from pipeline.demo.runs import write_demo_runs

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
        truth = write_demo_events(events, datetime.now(UTC) - timedelta(hours=hours), hours=hours)
        progress(
            f"wrote {sum(truth['counts'].values())} trainer events (slow rollouts, an error burst, "
            f"extraction failures) into {events}"
        )
    settings = replace(
        settings, wandb_dirs=_with(settings.wandb_dirs, out), trainer_logs=_with(settings.trainer_logs, logs)
    )
    if not axiom_emulator:
        settings = replace(settings, event_files=_with(settings.event_files, events.parent))
    else:
        from pipeline.demo.events import serve_demo_events
        from pipeline.sources import axiom

        with serve_demo_events(events) as (url, token):
            progress(f"serving the events from the Axiom emulator at {url}")
            for line in axiom.ingest(settings.lake, ["diplomacy"], progress, url=url, token=token).lines():
                progress(line)
    if settings.wandb_projects:  # W&B cloud runs are ingested run by run in Dagster, not by its refresh job
        ingest(settings, sources=("wandb_cloud",), progress=progress)
    results = materialize(settings, progress)
    results = {key: results.get(key) or _held(settings, key) for key in SUMMARISED}
    warehouse.stamp_build(settings)  # a `grpolens refresh` right after has nothing new to build
    answer(summary(settings))
    flags = results["anomalies"]
    answer(
        f"Checks: {flags['flags']} {'anomaly' if flags['flags'] == 1 else 'anomalies'} flagged "
        f"({flags['errors']} error{'s' * (flags['errors'] != 1)}); "
        "list them with `.venv/bin/grpolens check`"
    )
    answer(f"\nReports ({settings.reports_dir}; one run: `.venv/bin/grpolens report RUN`):")
    answer(results["run_reports"]["verdicts"])
    answer("\nSweeps (one command each: `.venv/bin/grpolens sweep --group G`):")
    for line in results["sweep_reports"]["summary"].splitlines():
        answer(f"  {line}")
    progress(f"demo finished in {time.perf_counter() - started:.1f}s")


def materialize(settings: Settings, progress: Callable[[str], None]) -> dict[str, dict]:
    """Run Dagster's `refresh` job in this process, recorded in the instance `grpolens ui` shows (see
    pipeline.resources.dagster_home), so the UI opens on the demo's materializations and check results, not on
    "Never materialized". Returns each materialized asset's metadata values by asset key; raises DemoFailed with
    the failing step's error."""
    import dagster as dg

    from pipeline.definitions import defs
    from pipeline.resources import GrpolensResource, dagster_home, dbt_resource

    home = dagster_home(settings)
    progress(f"materializing every asset with Dagster's `refresh` job (instance {home}) …")
    resource = GrpolensResource(
        home=str(settings.home),
        wandb_dirs=os.pathsep.join(map(str, settings.wandb_dirs)),
        trainer_logs=os.pathsep.join(map(str, settings.trainer_logs)),
        axiom_datasets=",".join(settings.axiom_datasets),
        event_files=os.pathsep.join(map(str, settings.event_files)),
    )
    started = time.perf_counter()
    # dagster-dbt echoes dbt's log to stdout; the summary below says what matters, a failure names its step
    with dg.DagsterInstance.from_config(str(home)) as instance, contextlib.redirect_stdout(io.StringIO()):
        result = defs.resolve_job_def("refresh").execute_in_process(
            instance=instance,
            resources={"grpolens": resource, "dbt": dbt_resource()},
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            tags={"grpolens/trigger": "demo"},
        )
    if not result.success:
        raise DemoFailed(_first_failure(result))
    metadata = {}
    for event in result.get_asset_materialization_events():
        materialization = event.step_materialization_data.materialization
        metadata[materialization.asset_key.to_user_string()] = {k: v.value for k, v in materialization.metadata.items()}
    checks = [
        e.asset_check_evaluation_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
    ]
    for name in SOURCES:
        lake = next((m for key, m in metadata.items() if key.startswith(f"lake/{name}_")), None)
        if lake and lake.get("configured"):
            progress(f"  {name}: {lake['files_read']} of {lake['files_seen']} files read, {lake['values']} values")
    progress(
        f"Dagster run {result.run_id[:8]}: {len(metadata)} assets materialized, {len(checks)} asset checks "
        f"({sum(c.passed for c in checks)} passed) in {time.perf_counter() - started:.1f}s; "
        "`make ui` shows them"
    )
    return metadata


SUMMARISED = ("anomalies", "run_reports", "sweep_reports")  # the assets whose metadata the summary prints


def _held(settings: Settings, asset: str) -> dict:
    """The metadata the summary prints of ``asset``, from what the warehouse and the reports folder hold. With
    nothing new in the lake (a second demo in the same home) the Dagster run skips the checks and the reports
    (pipeline.assets.dbt says why): they hold what those steps would say."""
    if asset == "anomalies":
        con = warehouse.connect_readonly(settings)
        try:
            flags, errors = con.sql("select count(*), count(*) filter (severity = 'error') from anomalies").fetchone()
        finally:
            con.close()
        return {"flags": flags, "errors": errors}
    if asset == "run_reports":  # every report is up to date: each is read back, none redrawn
        from pipeline.report import batch

        return {"verdicts": batch.verdict_table(batch.write_reports(settings), settings.reports_dir)}
    from pipeline.assets.reports import sweep_summary
    from pipeline.report import sweep_report

    return {"summary": sweep_summary(sweep_report.write_group_reports(settings))}


class DemoFailed(warehouse.BuildFailed):
    """A step of the demo's Dagster run failed; the message is that step's error."""


def _first_failure(result) -> str:
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error
            cause = error.cause or error
            text = cause.message.strip().splitlines()[-1]
            _, found, rest = text.partition(f"{cause.cls_name}: ")  # "pipeline.warehouse.WarehouseDamaged: …"
            return f"step {event.step_key} failed: {rest if found else text}"
    return "the Dagster run failed (see the instance's event log with `make ui`)"


def _with(paths: tuple[Path, ...], extra: Path) -> tuple[Path, ...]:
    return paths if extra in paths else (*paths, extra)


def write_trainer_state(run_dir: Path, steps: int = 120, seed: int = 3) -> Path:
    """A TRL GRPOTrainer run that logged only through the Hugging Face Trainer: checkpoint-N/trainer_state.json."""
    rng = random.Random(seed)
    history = []
    for step in range(1, steps + 1):
        accuracy = min(1.0, 0.15 + 0.6 * step / steps + rng.gauss(0, 0.08))
        fmt = min(1.0, 0.3 + 0.5 * step / steps + rng.gauss(0, 0.05))
        history.append(
            {
                "loss": round(0.04 * step / steps + rng.gauss(0, 0.002), 6),
                "grad_norm": abs(rng.gauss(0.4, 0.1)),
                "learning_rate": 5e-6 * (1 - step / steps),
                "rewards/accuracy_reward": max(0.0, accuracy),
                "rewards/format_reward": max(0.0, fmt),
                "reward": max(0.0, accuracy) + max(0.0, fmt),
                "reward_std": abs(rng.gauss(0.35, 0.08)),
                "completion_length": 180 + 60 * step / steps + rng.gauss(0, 8),
                "kl": abs(0.002 + 0.03 * step / steps + rng.gauss(0, 0.004)),
                "epoch": round(step / steps, 4),
                "step": step,
            }
        )
    state = {
        "global_step": steps,
        "max_steps": steps,
        "num_train_epochs": 1,
        "logging_steps": 1,
        "train_batch_size": 8,
        "log_history": history,
        "is_world_process_zero": True,
    }
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
        lines.append(
            "Rows: "
            + ", ".join(
                f"{table} {con.sql(f'select count(*) from {table}').fetchone()[0]}"
                for table in ("runs", "history", "metrics", "elo_ratings", "elo_gap", "events")
            )
        )
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
        health = con.sql("""select h.dataset, h.status, h.error_rate, h.completion_rate, r.duration_p95_s,
                                   t.trajectories_per_hour, e.full_share
                            from health h
                            left join rollout_timing r on r.dataset = h.dataset and r.grain = 'overall'
                            left join throughput t on t.dataset = h.dataset and t.grain = 'overall'
                            left join extraction e on e.dataset = h.dataset and e.grain = 'overall'
                            where h.grain = 'overall'""").fetchall()
        for dataset, status, errors, completion, p95, per_hour, full in health:
            lines.append("")
            lines.append(
                f"Rollout pipeline (events): {status} over the whole log, error rate {errors:.1%}, completion "
                f"{completion:.1%}, p95 rollout {p95:.0f}s, {per_hour:.0f} trajectories/hour, {full:.1%} orders "
                "fully extracted"
            )
            # the checks judge hour by hour: a bad hour inside a healthy whole is said too
            flagged = con.execute(
                """select check_name, arg_max(severity, rank) from (
                       select *, case severity when 'error' then 2 when 'warn' then 1 else 0 end as rank
                       from anomalies where dataset = ?
                   ) group by check_name order by max(rank) desc, check_name""",
                [dataset],
            ).fetchall()
            if flagged:
                named = ", ".join(f"{check} ({severity})" for check, severity in flagged)
                lines.append(f"  hour by hour the checks flag {named}: `grpolens check` lists them")
        lines += [
            "",
            f"Warehouse: {settings.duckdb_path}",
            f"Lake:      {settings.lake}",
            'Try:       .venv/bin/grpolens sql "select * from elo_reference_trends"',
            "           make ui   (Dagster UI on http://127.0.0.1:3000)",
        ]
        return "\n".join(lines)
    finally:
        con.close()
