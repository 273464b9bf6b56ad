"""The `grpolens` command: its parser and entry point. The commands are in cli_build.py (those that fill the data
home) and cli_read.py (those that read the warehouse); heavy imports happen inside the commands that need them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pipeline.cli_build import cmd_build, cmd_demo, cmd_docs, cmd_ingest, cmd_refresh, cmd_ui
from pipeline.cli_common import UserError
from pipeline.cli_read import cmd_check, cmd_report, cmd_sql, cmd_sweep
from pipeline.settings import Settings

HOME_HELP = "data home (default: $GRPOLENS_HOME or ./warehouse)"


def build_parser() -> argparse.ArgumentParser:
    from pipeline.cli_parser import SQL_EXAMPLE, Parser, command, number, version
    from pipeline.ingest import SOURCES  # light: the source modules load only when one runs

    parser = Parser(
        prog="grpolens",
        description="A local warehouse for diagnosing GRPO / RL fine-tuning runs.",
        epilog="Examples:\n  grpolens refresh\n  grpolens check --run my-run\n"
        "  grpolens report ./wandb/latest-run\n\n"
        "`grpolens COMMAND --help` shows a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--home", help=HOME_HELP)
    parser.add_argument(
        "--version", action="version", version=f"grpolens {version()}", help="print the version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = command(
        sub,
        "ingest",
        "read new data from the configured sources into the lake",
        "GRPOLENS_WANDB_DIRS=~/train/wandb grpolens ingest --source wandb_offline",
    )
    p.add_argument("--source", action="append", choices=list(SOURCES), help="only this source (repeatable)")
    p.set_defaults(func=cmd_ingest)

    p = command(
        sub,
        "build",
        "build the DuckDB warehouse from the lake with dbt (models and tests)",
        "grpolens build --select +elo_gap",
    )
    p.add_argument("--select", help="dbt selection, e.g. +elo_gap")
    p.add_argument(
        "--full-refresh",
        action="store_true",
        help="rebuild every model from the whole lake instead of only the runs that changed",
    )
    p.add_argument("--verbose", action="store_true", help="show dbt's own output")
    p.set_defaults(func=cmd_build)

    p = command(
        sub,
        "refresh",
        "ingest, then build and check if anything changed",
        "GRPOLENS_WANDB_DIRS=~/train/wandb grpolens refresh",
    )
    p.add_argument("--force", action="store_true", help="build even when nothing new was ingested")
    p.add_argument("--verbose", action="store_true", help="show dbt's own output")
    p.set_defaults(func=cmd_refresh)

    p = command(
        sub,
        "check",
        "run the training-health checks and list what they flag",
        "grpolens check --run my-run --fail-on error",
        "grpolens check --format json",
    )
    p.add_argument("--run", help="only this run (run_key, run id or name); the anomalies table is left as is")
    p.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="table (default) or json (an array of anomaly rows)",
    )
    p.add_argument(
        "--fail-on",
        choices=["info", "warn", "error"],
        help="exit with status 2 when anything this severe or worse is flagged (for a training job's CI)",
    )
    p.add_argument(
        "--explain", action="store_true", help="also say which checks could not apply to which runs, and why"
    )
    p.set_defaults(func=cmd_check)

    p = command(
        sub,
        "report",
        "one run's verdict, root cause, recommendation, sections and plots",
        "grpolens report ./wandb/latest-run",
        "grpolens report my-run --format json",
        description="Write a run's report (Markdown + PNG) and print it. RUN is a run name, run id, "
        "run_key, or a path to a run (W&B run folder, .wandb file, trainer_state.json, "
        "JSONL or console log), which is ingested into the home first.",
    )
    p.add_argument(
        "run", metavar="RUN", nargs="?", help="run name, run id, run_key, or a path to a run folder or log file"
    )
    p.add_argument("--run", dest="run_option", metavar="RUN", help="the same as RUN, as `grpolens check --run` takes")
    p.add_argument(
        "--out", help="folder for report.md, report.json and the plots (default: $GRPOLENS_HOME/reports/<run name>/)"
    )
    p.add_argument(
        "--format",
        choices=["md", "json"],
        default="md",
        help="md: print the Markdown report; json: print one JSON document (fields in the README)",
    )
    p.add_argument(
        "--tracker",
        help="add or update this run's entry in a Markdown experiment tracker, e.g. docs/experiment-tracker.md",
    )
    p.set_defaults(func=cmd_report)

    def sweep_options(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--metric",
            help="canonical metric (reward_mean, task_score, elo_gap, ...) or a logged key the "
            "aliases map; default: the Elo gap, else a task/eval metric, else the reward",
        )
        p.add_argument("--lower-is-better", action="store_true", help="rank the lowest score first (losses)")
        p.add_argument(
            "--format",
            choices=["md", "json"],
            default="md",
            help="md: print the Markdown; json: print one JSON document (fields in the README)",
        )
        p.add_argument(
            "--out",
            help="folder for sweep.md, sweep.json and the plots (default: $GRPOLENS_HOME/reports/_sweeps/<selection>/)",
        )

    p = command(
        sub,
        "sweep",
        "rank a sweep's runs with intervals, estimate each hyper-parameter's effect, suggest the next experiments",
        "grpolens sweep --group lr-sweep",
        "grpolens sweep --prefix qwen-lr --metric task_score",
        description="Compare the runs of one W&B group, sweep, tag, name prefix or project.",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--group", help="W&B group name")
    which.add_argument("--sweep", help="W&B sweep id")
    which.add_argument("--tag", help="runs carrying this tag")
    which.add_argument("--prefix", help="runs whose name starts with this")
    which.add_argument("--project", help="every run of this project")
    sweep_options(p)
    p.set_defaults(func=cmd_sweep)

    p = command(
        sub,
        "compare",
        "the sweep analysis on an explicit list of runs, curves overlaid",
        "grpolens compare verl-healthy verl-plateau verl-kl-blowup",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run names, ids or run_keys (two or more)")
    sweep_options(p)
    p.set_defaults(func=cmd_sweep)

    p = command(
        sub,
        "sql",
        "run a read-only SQL query against the warehouse",
        'grpolens sql "select name, state, last_step from runs"',
        f"grpolens sql --file {SQL_EXAMPLE} --format csv",
    )
    p.add_argument("query", nargs="?", help="SQL text")
    p.add_argument("--file", help=f"read the query from a file (e.g. {SQL_EXAMPLE})")
    p.add_argument(
        "--format",
        choices=["table", "csv", "json"],
        default="table",
        help="table (default, fitted to the terminal), csv, or json (an array of row objects)",
    )
    p.add_argument(
        "--max-rows", type=number(int, 1), default=40, help="rows a table shows (default 40; csv and json show all)"
    )
    p.set_defaults(func=cmd_sql)

    p = command(
        sub,
        "docs",
        "generate the dbt docs of the warehouse (models, columns, lineage) and serve them on 127.0.0.1",
        "grpolens docs",
        "grpolens docs --port 8081",
        "grpolens docs --no-serve",
    )
    p.add_argument(
        "--port", type=number(int, 0, 65535), default=8080, help="port on 127.0.0.1 (default 8080; 0 picks a free one)"
    )
    p.add_argument("--no-serve", action="store_true", help="only generate the site and print its folder")
    p.add_argument("--verbose", action="store_true", help="show dbt's own output")
    p.set_defaults(func=cmd_docs)

    p = command(
        sub,
        "demo",
        "write sample runs with wandb offline, ingest and build them, print a summary",
        "grpolens --home /tmp/grpolens-demo demo --scale 0.5",
    )
    p.add_argument(
        "--scale",
        type=number(float, 0, low_allowed=False),
        default=1.0,
        help="multiply the runs' lengths (default 1.0)",
    )
    p.add_argument(
        "--axiom-emulator",
        action="store_true",
        help="serve the sample events from a local Axiom emulator and read them through the API client",
    )
    p.set_defaults(func=cmd_demo)

    p = command(sub, "ui", "start the Dagster UI (dagster dev) on this project", "grpolens ui --port 3001")
    p.add_argument("--port", type=number(int, 1, 65535), default=3000, help="port of the Dagster UI (default 3000)")
    p.set_defaults(func=cmd_ui)
    for p in sub.choices.values():  # `grpolens demo --home X` as well; absent, it leaves the one before the command
        p.add_argument("--home", default=argparse.SUPPRESS, help=HOME_HELP)
    return parser


def _os_message(exc: OSError, settings: Settings, command: str) -> str:
    """One line for a failure of the machine rather than of grpolens: a full disk, a read-only or foreign data home."""
    import errno
    import shutil

    path = Path(exc.filename) if exc.filename else None
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        where = path or settings.home
        probe = next((p for p in (where, *where.parents) if p.exists()), None)
        free = f"; {shutil.disk_usage(probe).free / 2**20:.1f} MiB free there now" if probe else ""
        return (
            f"{reason.lower()} writing {path or f'under {settings.home}'}{free}. Nothing already committed was "
            f"lost: free some space and run `grpolens {command}` again, it goes on from what was committed"
        )
    if exc.errno == errno.EROFS:
        return (
            f"cannot write {path or settings.home}: read-only file system; the data home {settings.home} must be "
            "writable (or point GRPOLENS_HOME / --home at another folder)"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (
            f"cannot use {path or settings.home}: {reason.lower()}; the data home {settings.home} must be readable "
            "and writable by this user (or point GRPOLENS_HOME / --home at another folder)"
        )
    if exc.errno in (errno.ENOTDIR, errno.EEXIST) and not settings.home.is_dir():
        blocker = next((p for p in (settings.home, *settings.home.parents) if p.exists() and not p.is_dir()), path)
        return (
            f"cannot use {path or settings.home}: {blocker} is a file, not a folder; point GRPOLENS_HOME "
            "(or --home) at a folder"
        )
    if exc.errno == errno.EIO:
        return (
            f"input/output error on {path or settings.home}: the disk may be failing; check it, then run "
            f"`grpolens {command}` again"
        )
    return f"{reason}: {path}" if path else str(exc)


def _ingest_busy(exc: Exception) -> bool:
    """Whether ``exc`` is the lake's IngestBusy, looked up only when an error happened and only if the lake is
    loaded (only an ingest raises it): no command imports the lake (numpy, pyarrow: 0.1-0.2 s) for the class."""
    lake = sys.modules.get("pipeline.lake")
    return lake is not None and isinstance(exc, lake.IngestBusy)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings.from_env(args.home)
    settings.export()
    from pipeline.checks import CheckError
    from pipeline.run_lookup import RunNotFound
    from pipeline.settings import ConfigError
    from pipeline.warehouse import BuildFailed, WarehouseDamaged, WarehouseLocked, WarehouseUnreadable, os_error_in

    def fail(message: str) -> int:
        print(f"grpolens {args.command}: {message}", file=sys.stderr)
        return 1

    try:
        if settings.home.exists() and not settings.home.is_dir():
            raise UserError(
                f"the data home {settings.home} is a file, not a folder: point GRPOLENS_HOME (or --home) at a folder"
            )
        return args.func(args, settings)
    except (
        UserError,
        RunNotFound,
        WarehouseLocked,
        WarehouseDamaged,
        WarehouseUnreadable,
        BuildFailed,
        ConfigError,
        CheckError,
        FileNotFoundError,
    ) as exc:
        return fail(str(exc))
    except OSError as exc:  # disk full, read-only or foreign data home, a file where a folder should be
        return fail(_os_message(exc, settings, args.command))
    except KeyboardInterrupt:
        print(f"grpolens {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `grpolens check --format json | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # DuckDB and others word an OS failure inside their own error; anything else is a bug
        if _ingest_busy(exc):
            return fail(str(exc))
        problem = os_error_in(str(exc))
        if problem is None:
            raise
        return fail(_os_message(problem, settings, args.command))


if __name__ == "__main__":
    sys.exit(main())
