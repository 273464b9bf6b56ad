"""The `grpolens` command. Heavy imports (dbt, Dagster, wandb) happen inside the subcommands that need them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pipeline.settings import PROJECT_ROOT, Settings


class UserError(Exception):
    """A failure the user can act on: printed as one line, exit status 1."""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_ingest(args, settings: Settings) -> int:
    from pipeline.ingest import SOURCES, ingest

    sources = tuple(args.source) if args.source else tuple(SOURCES)
    ingest(settings, sources, progress=_say)
    return 0


def cmd_build(args, settings: Settings) -> int:
    from pipeline import warehouse

    warehouse.build(settings, select=args.select, progress=_say, verbose=args.verbose)
    _say(f"warehouse built at {settings.duckdb_path}")
    return 0


def cmd_refresh(args, settings: Settings) -> int:
    from pipeline import warehouse
    from pipeline.ingest import SOURCES, ingest

    from pipeline.checks import check_warehouse

    ingest(settings, tuple(SOURCES), progress=_say)
    if warehouse.is_up_to_date(settings) and not args.force:
        _say(f"warehouse {settings.duckdb_path} is up to date: nothing new to build or check")
        return 0
    warehouse.build(settings, progress=_say, verbose=args.verbose, stamp=False)
    outcomes = check_warehouse(settings)
    warehouse.stamp_build(settings)
    found = [row for outcome in outcomes for row in outcome.rows]
    errors = sum(r["severity"] == "error" for r in found)
    _say(f"warehouse built at {settings.duckdb_path}; checks flagged {len(found)} anomalies ({errors} errors): "
         "`grpolens check` lists them")
    for outcome in outcomes:
        if outcome.error:
            _say(f"check {outcome.check.name} could not run: {outcome.error}")
    return 0


def _resolve_run(settings: Settings, run: str) -> str:
    """A run given as its run_key, run id or name (a name must be unambiguous)."""
    from pipeline import warehouse

    con = warehouse.connect_readonly(settings)
    try:
        found = con.execute("select run_key, name from runs where run_key = $r or run_id = $r or name = $r",
                            {"r": run}).fetchall()
    finally:
        con.close()
    if not found:
        raise UserError(f"no run {run!r} in the warehouse (give a run_key, run id or name)")
    if len(found) > 1:
        raise UserError(f"{run!r} names {len(found)} runs; use one of: " + ", ".join(k for k, _ in found))
    return found[0][0]


def cmd_check(args, settings: Settings) -> int:
    import json

    from pipeline import checks as checks_mod
    from pipeline import warehouse

    run_key = _resolve_run(settings, args.run) if args.run else None
    try:
        outcomes = checks_mod.check_warehouse(settings, run_key, persist=run_key is None)
    except checks_mod.CheckError as exc:
        raise UserError(str(exc)) from None
    rows = [row for outcome in outcomes for row in outcome.rows]
    rows.sort(key=lambda r: (r["run_key"], -checks_mod.SEVERITIES.index(r["severity"]), r["step"] or 0))
    if args.format == "json":
        print(json.dumps(rows, default=str, indent=1))
    else:
        con = warehouse.connect_readonly(settings)
        try:
            names = dict(con.sql("select run_key, name from runs").fetchall())
        finally:
            con.close()
        for row in rows:
            end = f"-{row['step_end']}" if row["step_end"] is not None else "+"
            run = f"{names.get(row['run_key'], '?')} ({row['run_key']})"
            print(f"{row['severity'].upper():<5} {row['check_name']:<28} {run}  step {row['step']}{end}")
            print(f"      {row['message']}")
        counts = {sev: sum(r["severity"] == sev for r in rows) for sev in checks_mod.SEVERITIES}
        _say(f"{len(outcomes)} checks: {counts['error']} errors, {counts['warn']} warnings, {counts['info']} info")
    for outcome in outcomes:
        if outcome.error:
            _say(f"check {outcome.check.name} could not run: {outcome.error}")
    if args.explain:
        con = warehouse.connect_readonly(settings)
        try:
            lacking = checks_mod.not_applicable(con, [o.check for o in outcomes])
        finally:
            con.close()
        for name, run, reason in lacking:
            if run_key is None or run == run_key:
                _say(f"not applicable: {name} for {run}: {reason}")
    if args.fail_on:
        worst = checks_mod.SEVERITIES.index(args.fail_on)
        if any(checks_mod.SEVERITIES.index(r["severity"]) >= worst for r in rows):
            return 2
    return 1 if any(o.error for o in outcomes) else 0


def cmd_sql(args, settings: Settings) -> int:
    from pipeline import warehouse

    query = Path(args.file).read_text() if args.file else args.query
    if not query:
        raise UserError("give a query, or --file FILE")
    con = warehouse.connect_readonly(settings)
    try:
        relation = con.sql(query)
        if relation is None:
            return 0
        if args.format == "csv":
            import csv

            writer = csv.writer(sys.stdout)
            writer.writerow(relation.columns)
            writer.writerows(relation.fetchall())
        elif args.format == "json":
            import json

            cols = relation.columns
            for row in relation.fetchall():
                print(json.dumps(dict(zip(cols, row)), default=str))
        else:
            relation.show(max_rows=args.max_rows, max_width=200)
    except BrokenPipeError:  # `grpolens sql … | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # duckdb.Error subclasses; one line for the user
        raise UserError(f"query failed: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    return 0


def cmd_demo(args, settings: Settings) -> int:
    from pipeline.demo import run_demo

    run_demo(settings, scale=args.scale, progress=_say, axiom_emulator=args.axiom_emulator)
    return 0


def cmd_ui(args, settings: Settings) -> int:
    settings.export()
    # dagster dev re-parses the dbt project with the `dbt` on PATH: make it this environment's.
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("DAGSTER_HOME", str(settings.home / "dagster"))
    Path(os.environ["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    dagster = Path(sys.executable).with_name("dagster")
    cmd = [str(dagster), "dev", "-w", str(PROJECT_ROOT / "workspace.yaml"), "-p", str(args.port)]
    os.execv(cmd[0], cmd)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from pipeline.ingest import SOURCES  # light: the source modules load only when one runs

    parser = argparse.ArgumentParser(prog="grpolens",
                                     description="A local warehouse for diagnosing GRPO / RL fine-tuning runs.")
    parser.add_argument("--home", help="data home (default: $GRPOLENS_HOME or ./warehouse)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("ingest", help="read new data from the configured sources into the lake")
    p.add_argument("--source", action="append", choices=list(SOURCES),
                   help="only this source (repeatable)")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("build", help="build the DuckDB warehouse from the lake with dbt (models and tests)")
    p.add_argument("--select", help="dbt selection, e.g. +elo_gap")
    p.add_argument("--verbose", action="store_true", help="show dbt's own output")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("refresh", help="ingest, then build and check if anything changed")
    p.add_argument("--force", action="store_true", help="build even when nothing new was ingested")
    p.add_argument("--verbose", action="store_true", help="show dbt's own output")
    p.set_defaults(func=cmd_refresh)

    p = sub.add_parser("check", help="run the training-health checks and list what they flag")
    p.add_argument("--run", help="only this run (run_key, run id or name); the anomalies table is left as is")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--fail-on", choices=["info", "warn", "error"],
                   help="exit with status 2 when anything this severe or worse is flagged (for a training job's CI)")
    p.add_argument("--explain", action="store_true", help="also say which checks could not apply to which runs, and why")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("sql", help="run a read-only SQL query against the warehouse")
    p.add_argument("query", nargs="?", help="SQL text")
    p.add_argument("--file", help="read the query from a file (e.g. sql/questions/elo_gap.sql)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--max-rows", type=int, default=40)
    p.set_defaults(func=cmd_sql)

    p = sub.add_parser("demo", help="write sample runs with wandb offline, ingest and build them, print a summary")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the runs' lengths (default 1.0)")
    p.add_argument("--axiom-emulator", action="store_true",
                   help="serve the sample events from a local Axiom emulator and read them through the API client")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("ui", help="start the Dagster UI (dagster dev) on this project")
    p.add_argument("--port", type=int, default=3000)
    p.set_defaults(func=cmd_ui)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings.from_env(args.home)
    settings.export()
    from pipeline.lake import IngestBusy
    from pipeline.warehouse import BuildFailed, WarehouseLocked

    try:
        return args.func(args, settings)
    except (UserError, IngestBusy, WarehouseLocked, BuildFailed, FileNotFoundError) as exc:
        print(f"grpolens {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"grpolens {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
