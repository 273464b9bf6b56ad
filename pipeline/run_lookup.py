"""Which run a user means (a name, run id or run_key; a mistyped one gets close names), how human output names
runs, and a run's one-line verdict."""

from __future__ import annotations

from pipeline.settings import Settings


class RunNotFound(Exception):
    """No run, or more than one, answers to what the user gave; the message says what to give instead."""


def resolve(settings: Settings, run: str) -> str:
    """A run given as its run_key, run id or name (a name must be unambiguous); an unknown one suggests close names."""
    from pipeline import warehouse

    con = warehouse.connect_readonly(settings)
    try:
        return find(con, run)
    finally:
        con.close()


def find(con, run: str) -> str:
    """`resolve` on an open connection to the warehouse."""
    import difflib

    found = con.execute(
        "select run_key, name from runs where run_key = $r or run_id = $r or name = $r", {"r": run}
    ).fetchall()
    known = [] if found else con.execute("select run_key, run_id, name from runs").fetchall()
    if not found:
        names = sorted({v for row in known for v in row if v})
        close = difflib.get_close_matches(run, names, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (give a run_key, run id or name)"
        raise RunNotFound(f"no run {run!r} in the warehouse{hint}")
    if len(found) > 1:
        raise RunNotFound(f"{run!r} names {len(found)} runs; use one of: " + ", ".join(f"{k} ({n})" for k, n in found))
    return found[0][0]


def labels(con) -> dict[str, str]:
    """How human output names each run: its name, with its run id when another run has the same name; the run_key
    when it has no name."""
    runs = con.sql("select run_key, name, run_id from runs").fetchall()
    taken = [name for _, name, _ in runs if name]
    return {
        key: (f"{name} [{run_id}]" if taken.count(name) > 1 else name) if name else key for key, name, run_id in runs
    }


def verdict_line(settings: Settings, run_key: str, outcomes, rows: list[dict], colour: bool = False) -> str:
    """`X: healthy (28 of 30 rules applied)`: the same verdict `grpolens report X` gives."""
    from pipeline import checks as checks_mod
    from pipeline import warehouse
    from pipeline.report import story
    from pipeline.terminal import paint

    con = warehouse.connect_readonly(settings)
    try:
        name = con.execute("select name from runs where run_key = $k", {"k": run_key}).fetchone()[0]
        steps = [
            s for (s,) in con.execute("select distinct step from metrics where run_key = $k", {"k": run_key}).fetchall()
        ]
        lacking = {
            rule for rule, run, _ in checks_mod.not_applicable(con, [o.check for o in outcomes]) if run == run_key
        }
    finally:
        con.close()
    findings = [
        {"check": r["check_name"], "severity": r["severity"], "step": r["step"], "step_end": r["step_end"]}
        for r in rows
        if r["run_key"] == run_key
    ]
    told = story.tell(findings, {o.check.name: o.check for o in outcomes}, steps)
    root = ""
    if told.root:
        said = f" ({story.severity_said(told.root)})" if told.root["transient"] else ""
        root = f"; root cause {told.root['check']}{said} from step {told.root['step']}"
    applied = f"{len(outcomes) - len(lacking)} of {len(outcomes)} rules applied"
    return f"{name or run_key}: {paint(told.verdict, told.verdict, colour)} ({applied}{root})"
