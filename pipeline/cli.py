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

    sources = tuple(args.source) if args.source else SOURCES
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

    ingest(settings, SOURCES, progress=_say)
    if warehouse.is_up_to_date(settings) and not args.force:
        _say(f"warehouse {settings.duckdb_path} is up to date: nothing new to build")
        return 0
    warehouse.build(settings, progress=_say, verbose=args.verbose)
    _say(f"warehouse built at {settings.duckdb_path}")
    return 0


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
    except Exception as exc:  # duckdb.Error subclasses; one line for the user
        raise UserError(f"query failed: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    return 0


def cmd_demo(args, settings: Settings) -> int:
    from pipeline.demo import run_demo

    run_demo(settings, scale=args.scale, progress=_say)
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
    parser = argparse.ArgumentParser(prog="grpolens",
                                     description="A local warehouse for diagnosing GRPO / RL fine-tuning runs.")
    parser.add_argument("--home", help="data home (default: $GRPOLENS_HOME or ./warehouse)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("ingest", help="read new data from the configured sources into the lake")
    p.add_argument("--source", action="append", choices=["wandb_offline"], help="only this source (repeatable)")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("build", help="build the DuckDB warehouse from the lake with dbt (models and tests)")
    p.add_argument("--select", help="dbt selection, e.g. +elo_gap")
    p.add_argument("--verbose", action="store_true", help="show dbt's own output")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("refresh", help="ingest, then build if anything changed")
    p.add_argument("--force", action="store_true", help="build even when nothing new was ingested")
    p.add_argument("--verbose", action="store_true", help="show dbt's own output")
    p.set_defaults(func=cmd_refresh)

    p = sub.add_parser("sql", help="run a read-only SQL query against the warehouse")
    p.add_argument("query", nargs="?", help="SQL text")
    p.add_argument("--file", help="read the query from a file (e.g. sql/questions/elo_gap.sql)")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--max-rows", type=int, default=40)
    p.set_defaults(func=cmd_sql)

    p = sub.add_parser("demo", help="write sample runs with wandb offline, ingest and build them, print a summary")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the runs' lengths (default 1.0)")
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
