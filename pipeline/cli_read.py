"""The `grpolens` commands that read the warehouse: check, report, sweep and compare, sql. DuckDB and the report
code load inside the commands that need them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipeline.cli_build import ingest_path
from pipeline.cli_common import UserError, say
from pipeline.settings import Settings


def cmd_report(args, settings: Settings) -> int:
    from pipeline import checks as checks_mod
    from pipeline import json_output, run_lookup, terminal, warehouse
    from pipeline.report import run_report, tracker

    if args.run and args.run_option and args.run != args.run_option:
        raise UserError(f"two runs given, {args.run!r} and --run {args.run_option!r}: a report is of one run")
    name = args.run or args.run_option
    if not name:
        raise UserError("which run? grpolens report RUN (a run name, run id, run_key, or a path to a run)")
    as_path = Path(name).expanduser()
    if as_path.exists() and ("/" in name or as_path.suffix or as_path.is_dir()):
        run_key = ingest_path(settings, as_path)
    else:
        run_key = run_lookup.resolve(settings, name)
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
    say(f"{doc['run']}: {verdict} — report in {doc['files']['markdown']}")
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
    con = warehouse.connect_readonly(settings)
    try:
        labels = run_lookup.labels(con)
        empty = checks_mod.nothing_to_check(con) if run_key is None else None
    finally:
        con.close()
    if args.format == "json":
        json_output.write(rows, sys.stdout)
        if empty:
            say(empty)
    elif empty:
        say(empty)
    else:
        shown = checks_mod.fold_recurring(rows)  # each episode stays in the JSON
        for line in terminal.check_table(
            shown, labels, terminal.width(sys.stdout), terminal.colour_enabled(sys.stdout)
        ):
            print(line)
        counts = {sev: sum(r["severity"] == sev for r in shown) for sev in checks_mod.SEVERITIES}
        colour = terminal.colour_enabled(sys.stderr)
        said = [
            terminal.paint(f"{counts[sev]} {one if counts[sev] == 1 else many}", sev, colour and counts[sev] > 0)
            for sev, one, many in (
                ("error", "error", "errors"),
                ("warn", "warning", "warnings"),
                ("info", "info", "info"),
            )
        ]
        folded = f" ({len(rows)} flags, repeats folded; `--format json` lists each)" if len(shown) < len(rows) else ""
        say(f"{len(outcomes)} checks: " + ", ".join(said) + folded)
        if run_key is not None:
            say(run_lookup.verdict_line(settings, run_key, outcomes, rows, colour))
    for outcome in outcomes:
        if outcome.error:
            say(f"check {outcome.check.name} could not run: {outcome.error}")
    if args.explain:
        con = warehouse.connect_readonly(settings)
        try:
            lacking = checks_mod.not_applicable(con, [o.check for o in outcomes])
        finally:
            con.close()
        out = sys.stderr if args.format == "json" else sys.stdout  # stdout holds one JSON document, nothing else
        for name, run, reason in lacking:
            if run_key is None or run == run_key:
                print(f"not applicable: {name} for {run}: {reason}", file=out)
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
        label = "compare-" + "-".join(selection.runs["run"].to_list())[:60] if runs else selection.label
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
    say(f"{doc['selection']}: best {doc['runs'][0]['run']} on {doc['metric']} — report in {doc['files']['markdown']}")
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
