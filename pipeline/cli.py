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
    _fail_if_misconfigured(ingest(settings, sources, progress=_say))
    return 0


def _fail_if_misconfigured(reports: dict) -> None:
    """Every source has run and said what it skipped; a configured path that does not exist fails the command."""
    from pipeline.ingest import misconfigured

    problems = misconfigured(reports)
    if problems:
        raise UserError("; ".join(problems) + " (fix the configuration: the other paths and sources were read)")


def cmd_build(args, settings: Settings) -> int:
    from pipeline import warehouse

    warehouse.build(settings, select=args.select, progress=_say, verbose=args.verbose, full_refresh=args.full_refresh)
    _say(f"warehouse built at {settings.duckdb_path}")
    return 0


def cmd_refresh(args, settings: Settings) -> int:
    from pipeline import warehouse
    from pipeline.checks import check_overrides, check_warehouse, load_checks
    from pipeline.ingest import SOURCES, ingest

    check_overrides(settings, load_checks())  # a broken grpolens.yaml fails now, not after the ingest and the build
    if not any(getattr(settings, source.setting) for source in SOURCES.values()):
        raise UserError(
            "no source is configured, so there is nothing to refresh: set GRPOLENS_WANDB_DIRS (W&B run "
            "folders), GRPOLENS_TRAINER_LOGS (trainer_state.json, JSONL or console logs), "
            "GRPOLENS_EVENT_FILES, AXIOM_TOKEN or GRPOLENS_WANDB_PROJECTS; or try `grpolens report "
            "PATH` on one run, or `grpolens demo`"
        )
    reports = ingest(settings, tuple(SOURCES), progress=_say)
    if warehouse.is_up_to_date(settings) and not args.force:
        _say(f"warehouse {settings.duckdb_path} is up to date: nothing new to build or check")
        _fail_if_misconfigured(reports)
        return 0
    warehouse.build(settings, progress=_say, verbose=args.verbose, stamp=False)
    outcomes = check_warehouse(settings)
    warehouse.stamp_build(settings)
    found = [row for outcome in outcomes for row in outcome.rows]
    errors = sum(r["severity"] == "error" for r in found)
    _say(
        f"warehouse built at {settings.duckdb_path}; checks flagged {len(found)} anomalies ({errors} errors): "
        "`grpolens check` lists them"
    )
    for outcome in outcomes:
        if outcome.error:
            _say(f"check {outcome.check.name} could not run: {outcome.error}")
    _fail_if_misconfigured(reports)
    return 0


def _ingest_path(settings: Settings, path: Path) -> str:
    """Ingest one run folder or log file into the home (building and checking if anything changed) and return the
    run it holds: a W&B run folder or `.wandb` file goes through the offline reader, anything else through the
    trainer-log reader."""
    from dataclasses import replace

    from pipeline import warehouse
    from pipeline.checks import check_warehouse
    from pipeline.ingest import ingest

    target = path.resolve()
    is_wandb = target.suffix == ".wandb" or (target.is_dir() and next(target.rglob("*.wandb"), None) is not None)
    root = target.parent if target.is_file() and is_wandb else target
    if is_wandb:
        reports = ingest(replace(settings, wandb_dirs=(root,)), ("wandb_offline",), progress=_say)
    else:
        reports = ingest(replace(settings, trainer_logs=(root,)), ("trainer_log",), progress=_say)
    _fail_if_misconfigured(reports)
    if not warehouse.is_up_to_date(settings):
        warehouse.build(settings, progress=_say, stamp=False)
        check_warehouse(settings)
        warehouse.stamp_build(settings)
    con = warehouse.connect_readonly(settings)
    try:
        rows = con.execute("select run_key, name, source_files from runs").fetchall()
    finally:
        con.close()
    inside = [
        (key, name)
        for key, name, files in rows
        if any(Path(f) == target or Path(f).is_relative_to(target) for f in files or [])
    ]
    if not inside:
        raise UserError(
            f"no run found in {path} (a W&B run folder, a .wandb file, a trainer_state.json, a JSONL "
            "metrics file or a console log)"
        )
    if len(inside) > 1:
        raise UserError(f"{path} holds {len(inside)} runs; name one: " + ", ".join(n or k for k, n in inside))
    return inside[0][0]


def cmd_report(args, settings: Settings) -> int:
    from pipeline import checks as checks_mod
    from pipeline import json_output, run_lookup, terminal, warehouse
    from pipeline.report import run_report, tracker

    as_path = Path(args.run).expanduser()
    if as_path.exists() and ("/" in args.run or as_path.suffix or as_path.is_dir()):
        run_key = _ingest_path(settings, as_path)
    else:
        run_key = run_lookup.resolve(settings, args.run)
    rules = checks_mod.load_checks()
    findings = [row for outcome in checks_mod.check_warehouse(settings, run_key, persist=False) for row in outcome.rows]
    con = warehouse.connect_readonly(settings)
    try:
        run = dict(
            zip(
                ("run_key", "name", "run_id"),
                con.execute("select run_key, name, run_id from runs where run_key = $k", {"k": run_key}).fetchone(),
                strict=False,
            )
        )
        out = Path(args.out) if args.out else run_report.report_dir(settings.reports_dir, run)
        doc = run_report.build(con, run_key, rules, out, findings)
    finally:
        con.close()
    if args.tracker:
        tracker.update(Path(args.tracker), doc, doc["files"]["markdown"])
    if args.format == "json":
        json_output.write(doc, sys.stdout)
    else:
        print(Path(doc["files"]["markdown"]).read_text(encoding="utf-8"), end="")
    verdict = terminal.paint(doc["verdict"], doc["verdict"], terminal.colour_enabled(sys.stderr))
    _say(f"{doc['run']}: {verdict} — report in {doc['files']['markdown']}")
    return 0


def cmd_check(args, settings: Settings) -> int:
    from pipeline import checks as checks_mod
    from pipeline import json_output, run_lookup, terminal, warehouse

    run_key = run_lookup.resolve(settings, args.run) if args.run else None
    try:
        outcomes = checks_mod.check_warehouse(settings, run_key, persist=run_key is None)
    except checks_mod.CheckError as exc:
        raise UserError(str(exc)) from None
    rows = [row for outcome in outcomes for row in outcome.rows]
    rows.sort(
        key=lambda r: (
            r["run_key"] or "",
            -checks_mod.SEVERITIES.index(r["severity"]),
            r["step"] or 0,
            str(r["started_at"] or ""),
        )
    )
    if args.format == "json":
        json_output.write(rows, sys.stdout)
    else:
        con = warehouse.connect_readonly(settings)
        try:
            labels = run_lookup.labels(con)
        finally:
            con.close()
        for line in terminal.check_table(rows, labels, terminal.width(sys.stdout), terminal.colour_enabled(sys.stdout)):
            print(line)
        counts = {sev: sum(r["severity"] == sev for r in rows) for sev in checks_mod.SEVERITIES}
        colour = terminal.colour_enabled(sys.stderr)
        said = [
            terminal.paint(f"{counts[sev]} {word}", sev, colour and counts[sev] > 0)
            for sev, word in (("error", "errors"), ("warn", "warnings"), ("info", "info"))
        ]
        _say(f"{len(outcomes)} checks: " + ", ".join(said))
        if run_key is not None:
            _say(run_lookup.verdict_line(settings, run_key, outcomes, rows, colour))
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


def cmd_sweep(args, settings: Settings) -> int:
    """`sweep` and `compare`: the same analysis, on a selection or on an explicit list of runs."""
    from pipeline import json_output, warehouse
    from pipeline.report import run_report, sweep, sweep_report

    runs = getattr(args, "runs", None)
    con = warehouse.connect_readonly(settings)
    try:
        selection = sweep.select(
            con,
            group=getattr(args, "group", None),
            sweep=getattr(args, "sweep", None),
            tag=getattr(args, "tag", None),
            prefix=getattr(args, "prefix", None),
            project=getattr(args, "project", None),
            runs=runs,
        )
        label = "compare-" + "-".join(selection.runs["name"].to_list())[:60] if runs else selection.label
        out = (
            Path(args.out)
            if args.out
            else (settings.reports_dir / sweep_report.SWEEPS_FOLDER / run_report.folder_name(label, None))
        )
        doc = sweep_report.build(con, selection, args.metric, args.lower_is_better, out, compare=bool(runs))
    except sweep.SweepError as exc:
        raise UserError(str(exc)) from None
    finally:
        con.close()
    if args.format == "json":
        json_output.write(doc, sys.stdout)
    else:
        print(Path(doc["files"]["markdown"]).read_text(encoding="utf-8"), end="")
    _say(f"{doc['selection']}: best {doc['runs'][0]['run']} on {doc['metric']} — report in {doc['files']['markdown']}")
    return 0


def cmd_sql(args, settings: Settings) -> int:
    import duckdb

    from pipeline import json_output, warehouse

    query = Path(args.file).read_text() if args.file else args.query
    if not query:
        raise UserError("give a query, or --file FILE")
    try:
        duckdb.extract_statements(query)  # a syntax error whole: DuckDB's LINE and caret lines show where
        warehouse.refuse_writes(query)
    except (duckdb.Error, warehouse.QueryRefused) as exc:
        raise UserError(f"query failed: {str(exc).strip()}") from None
    con = warehouse.connect_query(settings)
    try:
        relation = con.sql(query)
        if relation is None:
            return 0
        if args.format == "csv":
            import csv

            writer = csv.writer(sys.stdout)
            writer.writerow(relation.columns)
            writer.writerows(_all_rows(relation))
        elif args.format == "json":
            json_output.write_rows(
                relation.columns, _all_rows(relation), sys.stdout, [str(t) == "JSON" for t in relation.types]
            )
        else:
            _print_sql_table(relation, args.max_rows)
    except BrokenPipeError:  # `grpolens sql … | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # duckdb.Error subclasses
        raise UserError(_query_failure(settings, exc)) from None
    finally:
        con.close()
    return 0


def _all_rows(relation, chunk: int = 4096):
    while rows := relation.fetchmany(chunk):
        yield from rows


PIPED_WIDTH = 200  # the width of a table printed to a pipe or a file (csv and json are never cut)


def _print_sql_table(relation, max_rows: int) -> None:
    """The first ``max_rows`` rows as a table fitting the terminal, then how many rows and columns it left out."""
    import textwrap

    from pipeline import terminal

    rows = relation.fetchmany(max_rows + 1)
    more = 0
    if len(rows) > max_rows:
        rows = rows[:max_rows]
        try:
            more = relation.aggregate("count(*)").fetchone()[0] - max_rows
        except Exception:  # a result DuckDB cannot count again: count what is left of this one
            more = 1 + sum(1 for _ in _all_rows(relation))
    room = terminal.width(sys.stdout, fallback=PIPED_WIDTH)
    assert room is not None  # a fallback width is given
    lines, hidden = terminal.table(relation.columns, rows, room, colour=terminal.colour_enabled(sys.stdout))
    if more > 0:
        lines.append(f"… {more} more row{'s' * (more != 1)} (use --max-rows or --format csv)")
    if hidden:
        lines += textwrap.wrap(
            f"… {len(hidden)} more column{'s' * (len(hidden) != 1)} not shown: "
            f"{', '.join(hidden)} (select fewer columns, widen the terminal or use --format csv)",
            room,
            subsequent_indent="  ",
        )
    print("\n".join(lines))


def _query_failure(settings: Settings, exc: Exception) -> str:
    """DuckDB's whole message, with its "Did you mean" hint and LINE/caret context; the warehouse's own message when
    it recognises a damaged database or lake part."""
    from pipeline import warehouse

    message = warehouse.query_error_message(settings, exc)
    text = str(exc).strip()
    if text and message == f"query failed: {text.splitlines()[0]}":
        return f"query failed: {text}"
    return message


def cmd_demo(args, settings: Settings) -> int:
    from pipeline.demo.run import run_demo

    run_demo(settings, scale=args.scale, progress=_say, axiom_emulator=args.axiom_emulator)
    return 0


def cmd_docs(args, settings: Settings) -> int:
    from pipeline import dbt_docs

    try:
        folder = dbt_docs.generate(settings, progress=_say, echo=_say if args.verbose else None)
        if args.no_serve:
            print(folder)
            return 0
        server = dbt_docs.server(folder, args.port)
    except dbt_docs.DocsUnavailable as exc:
        raise UserError(str(exc)) from None
    host, port = server.server_address[:2]
    assert isinstance(host, str)  # an AF_INET server's address is (str, int)
    print(f"http://{host}:{port}/", flush=True)
    _say(f"serving the dbt docs in {folder} on {host} only; Ctrl-C stops")
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


def build_parser() -> argparse.ArgumentParser:
    from pipeline.cli_parser import SQL_EXAMPLE, Parser, command, version
    from pipeline.ingest import SOURCES  # light: the source modules load only when one runs

    parser = Parser(
        prog="grpolens",
        description="A local warehouse for diagnosing GRPO / RL fine-tuning runs.",
        epilog="Examples:\n  grpolens refresh\n  grpolens check --run my-run\n"
        "  grpolens report ./wandb/latest-run\n\n"
        "`grpolens COMMAND --help` shows a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--home", help="data home (default: $GRPOLENS_HOME or ./warehouse)")
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
    p.add_argument("run", metavar="RUN", help="run name, run id, run_key, or a path to a run folder or log file")
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
    p.add_argument("--max-rows", type=int, default=40, help="rows a table shows (default 40; csv and json show all)")
    p.set_defaults(func=cmd_sql)

    p = command(
        sub,
        "docs",
        "generate the dbt docs of the warehouse (models, columns, lineage) and serve them on 127.0.0.1",
        "grpolens docs",
        "grpolens docs --port 8081",
        "grpolens docs --no-serve",
    )
    p.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1 (default 8080; 0 picks a free one)")
    p.add_argument("--no-serve", action="store_true", help="only generate the site and print its folder")
    p.add_argument("--verbose", action="store_true", help="show dbt's own output")
    p.set_defaults(func=cmd_docs)

    p = command(
        sub,
        "demo",
        "write sample runs with wandb offline, ingest and build them, print a summary",
        "grpolens --home /tmp/grpolens-demo demo --scale 0.5",
    )
    p.add_argument("--scale", type=float, default=1.0, help="multiply the runs' lengths (default 1.0)")
    p.add_argument(
        "--axiom-emulator",
        action="store_true",
        help="serve the sample events from a local Axiom emulator and read them through the API client",
    )
    p.set_defaults(func=cmd_demo)

    p = command(sub, "ui", "start the Dagster UI (dagster dev) on this project", "grpolens ui --port 3001")
    p.add_argument("--port", type=int, default=3000, help="port of the Dagster UI (default 3000)")
    p.set_defaults(func=cmd_ui)
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings.from_env(args.home)
    settings.export()
    from pipeline.checks import CheckError
    from pipeline.lake import IngestBusy
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
        IngestBusy,
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
        problem = os_error_in(str(exc))
        if problem is None:
            raise
        return fail(_os_message(problem, settings, args.command))


if __name__ == "__main__":
    sys.exit(main())
