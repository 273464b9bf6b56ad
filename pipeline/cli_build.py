"""The `grpolens` commands that fill the data home: ingest, build, refresh and demo, and docs and ui, which run dbt
and Dagster on it. Heavy imports (dbt, Dagster, wandb) happen inside the commands that need them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipeline.cli_common import UserError, say
from pipeline.settings import PROJECT_ROOT, Settings


def cmd_ingest(args, settings: Settings) -> int:
    from pipeline.ingest import SOURCES, ingest

    sources = tuple(args.source) if args.source else tuple(SOURCES)
    _fail_on_source_problems(ingest(settings, sources, progress=say))
    return 0


def _fail_on_source_problems(reports: dict) -> None:
    """Every source has run and said what it skipped; a configured path that does not exist, or a remote dataset or
    project that could not be read (a refused token, a service down), fails the command so that a scheduler sees it."""
    from pipeline.ingest import failed_sources, misconfigured

    problems = misconfigured(reports)
    if problems:
        raise UserError("; ".join(problems) + " (fix the configuration: the other paths and sources were read)")
    failed = failed_sources(reports)
    if failed:
        raise UserError(
            f"could not read {', '.join(failed)}, as said above: the other sources were read; the next run "
            "resumes where this one stopped"
        )


def cmd_build(args, settings: Settings) -> int:
    from pipeline import warehouse

    warehouse.build(settings, select=args.select, progress=say, verbose=args.verbose, full_refresh=args.full_refresh)
    say(f"warehouse built at {settings.duckdb_path}")
    return 0


def cmd_refresh(args, settings: Settings) -> int:
    from pipeline import aliases, warehouse
    from pipeline.checks import check_overrides, check_warehouse, load_checks, nothing_to_check
    from pipeline.dbt_process import DbtProcess
    from pipeline.ingest import SOURCES, ingest

    check_overrides(settings, load_checks())  # a broken grpolens.yaml fails now, not after the ingest and the build
    aliases.load(settings)
    if not any(getattr(settings, source.setting) for source in SOURCES.values()):
        raise UserError(
            "no source is configured, so there is nothing to refresh: set GRPOLENS_WANDB_DIRS (W&B run "
            "folders), GRPOLENS_TRAINER_LOGS (trainer_state.json, JSONL or console logs), "
            "GRPOLENS_EVENT_FILES, AXIOM_TOKEN or GRPOLENS_WANDB_PROJECTS; or try `grpolens report "
            "PATH` on one run, or `grpolens demo`"
        )
    with DbtProcess(settings) as dbt:  # dbt imports itself while the sources are read
        reports = ingest(settings, tuple(SOURCES), progress=say)
        if warehouse.is_up_to_date(settings) and not args.force:
            say(f"warehouse {settings.duckdb_path} is up to date: nothing new to build or check")
            _fail_on_source_problems(reports)
            return 0
        warehouse.build(settings, progress=say, verbose=args.verbose, stamp=False, dbt=dbt)
    outcomes = check_warehouse(settings)
    warehouse.stamp_build(settings)
    found = [row for outcome in outcomes for row in outcome.rows]
    errors = sum(r["severity"] == "error" for r in found)
    con = warehouse.connect_readonly(settings)
    try:
        empty = nothing_to_check(con)
    finally:
        con.close()
    if empty:  # the sources held no run: "flagged 0 anomalies" would read as an all-clear
        say(f"warehouse built at {settings.duckdb_path}; no run found in the configured sources: nothing was checked")
    else:
        say(
            f"warehouse built at {settings.duckdb_path}; checks flagged {len(found)} "
            f"{'anomaly' if len(found) == 1 else 'anomalies'} ({errors} error{'s' * (errors != 1)}): "
            "`grpolens check` lists them"
        )
    for outcome in outcomes:
        if outcome.error:
            say(f"check {outcome.check.name} could not run: {outcome.error}")
    _fail_on_source_problems(reports)
    return 0


def ingest_path(settings: Settings, path: Path) -> str:
    """Ingest one run folder or log file into the home (building and checking if anything changed) and return the
    run it holds: a W&B run folder or `.wandb` file goes through the offline reader, anything else through the
    trainer-log reader."""
    from dataclasses import replace

    from pipeline import warehouse
    from pipeline.checks import check_warehouse
    from pipeline.ingest import ingest
    from pipeline.sources.trainer_log_runs import trainer_log_files

    target = path.resolve()
    is_wandb = target.suffix == ".wandb" or (target.is_dir() and next(target.rglob("*.wandb"), None) is not None)
    root = target.parent if target.is_file() and is_wandb else target
    if is_wandb:
        reports = ingest(replace(settings, wandb_dirs=(root,)), ("wandb_offline",), progress=say)
    else:
        reports = ingest(replace(settings, trainer_logs=(root,)), ("trainer_log",), progress=say)
    _fail_on_source_problems(reports)
    none_found = UserError(
        f"no run found in {path} (a W&B run folder, a .wandb file, a trainer_state.json, a JSONL or CSV metrics "
        "file, a notebook or a console log)"
    )
    touched = [run for report in reports.values() for run in getattr(report, "runs_touched", None) or []]
    if not touched and not settings.duckdb_path.exists():
        raise none_found  # nothing read and no warehouse that could hold it from before: no build to wait for
    if not warehouse.is_up_to_date(settings):
        warehouse.build(settings, progress=say, stamp=False)
        check_warehouse(settings)
        warehouse.stamp_build(settings)
    con = warehouse.connect_readonly(settings)
    try:
        rows = con.execute("select run_key, name, source_files from runs").fetchall()
    finally:
        con.close()
    # a trainer log's run keeps its files' real paths: those of a folder of links to run folders are elsewhere
    linked = set() if is_wandb else {str(p) for p in trainer_log_files(root)}
    inside = [
        (key, name)
        for key, name, files in rows
        if any(f in linked or Path(f) == target or Path(f).is_relative_to(target) for f in files or [])
    ]
    if not inside:
        raise none_found
    if len(inside) > 1:
        raise UserError(f"{path} holds {len(inside)} runs; name one: " + ", ".join(n or k for k, n in inside))
    return inside[0][0]


def cmd_demo(args, settings: Settings) -> int:
    from pipeline.demo.run import run_demo

    def answer(text: str) -> None:  # the summary; flushed, so that `demo 2>&1 | less` keeps it in order
        print(text, flush=True)

    run_demo(settings, scale=args.scale, progress=say, axiom_emulator=args.axiom_emulator, answer=answer)
    return 0


def cmd_docs(args, settings: Settings) -> int:
    from pipeline import dbt_docs

    try:
        folder = dbt_docs.generate(settings, progress=say, echo=say if args.verbose else None)
        if args.no_serve:
            print(folder)
            return 0
        server = dbt_docs.server(folder, args.port)
    except dbt_docs.DocsUnavailable as exc:
        raise UserError(str(exc)) from None
    host, port = server.server_address[:2]
    assert isinstance(host, str)  # an AF_INET server's address is (str, int)
    print(f"http://{host}:{port}/", flush=True)
    say(f"serving the dbt docs in {folder} on {host} only; Ctrl-C stops")
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # the way to stop it
        pass
    finally:
        server.server_close()
    return 0


def cmd_ui(args, settings: Settings) -> int:
    from pipeline.resources import dagster_home

    settings.export()
    # The code server re-parses the dbt project with the `dbt` on PATH: make it this environment's.
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    # The instance `grpolens demo` records into, with its dagster.yaml (no warning about a missing one, no telemetry).
    os.environ["DAGSTER_HOME"] = str(dagster_home(settings))
    # `dg dev` is what Dagster 1.12 recommends (`dagster dev` warns that it is superseded); given -w it serves the
    # same workspace. `dagster dev` stays for an install without dagster-dg-cli (a dev dependency).
    dg = Path(sys.executable).with_name("dg")
    dev = [str(dg), "dev"] if dg.exists() else [str(Path(sys.executable).with_name("dagster")), "dev"]
    cmd = [*dev, "-w", str(PROJECT_ROOT / "workspace.yaml"), "-p", str(args.port)]
    os.execv(cmd[0], cmd)
    return 0
