"""Training-health checks: one SQL file per rule in sql/checks/, run against the warehouse.

A check file starts with a header of `--` lines that the runner reads:

    -- kl_spike: KL jumps far above the run's own recent baseline.
    -- severity: error                 default severity of its rows (a row may set its own)
    -- reads: metrics                  warehouse tables it reads; the first is the Dagster asset it checks
    -- requires: kl                    canonical metrics a run must have for the check to apply to it (`a | b`:
                                       either will do, for a rule that falls back on a second metric)
    -- role: symptom                   cause | symptom | outcome: how a report orders findings that start together
    -- advice: learning_rate down: Lower the learning rate     one action (lever, up|down|do, text); repeatable
    -- explains: reward_plateau        optional: the only rules whose findings this one can cause (`none`: no rule's);
                                       without it, any rule's that follows it (how a report tells consequences)
    -- param mad_factor = 6            a threshold, bound as the DuckDB parameter $mad_factor

and then one SELECT returning rows shaped like `anomalies` (ANOMALY_COLUMNS). Thresholds are real query
parameters, never pasted into the SQL text, and `grpolens.yaml` may override them per check.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.settings import SQL_DIR

ANOMALY_COLUMNS = ("run_key", "check_name", "severity", "step", "step_end", "metric", "value", "threshold", "message")
# Rules over the event marts flag a dataset's hours, not a run's steps: run_key and step are null, these say where.
EVENT_COLUMNS = ("dataset", "started_at", "ended_at")
SEVERITIES = ("info", "warn", "error")
# A finding's place in a story of findings that start together: a cause (length collapse) shows up as symptoms
# (grad-norm spike) and outcomes (reward collapse); a report names the cause first. Operations (a slow checkpoint,
# a logging artefact, a stale heartbeat) are about the machinery around the training, not its learning: they are
# no cause of a learning finding, nor its consequence.
ROLES = ("cause", "symptom", "outcome", "operations")
_ADVICE = re.compile(r"^(?P<lever>[a-z_]+)\s+(?P<direction>up|down|do)\s*:\s*(?P<text>\S.*)$")
_HEADER = re.compile(r"^--\s*(?P<key>[a-z_]+)\s*:\s*(?P<value>.*)$")
_PARAM = re.compile(r"^--\s*param\s+(?P<name>[a-z_][a-z0-9_]*)\s*=\s*(?P<value>[^\s]+)\s*(?:--\s*(?P<doc>.*))?$")


DETECTORS = SQL_DIR / "detectors.sql"  # shared macros the rules call (wilson_lower, hour_episode, ...)
CHECK_WORKERS = 2  # rules run at once (run_checks)
FOLD_AT = 3  # episodes of one rule on one run from which text output shows them as one (fold_recurring)


class CheckError(ValueError):
    pass


@dataclass(frozen=True)
class Advice:
    """One action a rule recommends. Two actions on the same lever in opposite directions (learning_rate up and
    down) conflict; the same lever and direction is one action however many rules ask for it."""

    lever: str
    direction: str  # up | down | do
    text: str


@dataclass(frozen=True)
class Check:
    name: str
    description: str
    severity: str
    reads: tuple[str, ...]
    requires: tuple[str, ...]
    params: dict[str, Any]
    param_docs: dict[str, str]
    sql: str
    path: Path
    role: str = "cause"
    advice: tuple[Advice, ...] = ()
    # The rules whose findings this one can cause, when its mechanism limits them (None: any that follows it). A
    # constant reward term changes no advantage, so it explains nothing; groups with tied rewards stop learning, they
    # do not make the reward fall.
    explains: tuple[str, ...] | None = None

    def bound(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        params = dict(self.params)
        for key, value in (overrides or {}).items():
            if key not in params:
                raise CheckError(f"{self.name}: unknown parameter {key!r} (known: {', '.join(sorted(params))})")
            params[key] = value
        return params


def _number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text.strip("'\"")


def parse_check(path: Path) -> Check:
    text = path.read_text(encoding="utf-8")
    name, description, severity, role = path.stem, "", "warn", "cause"
    reads: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    advice: list[Advice] = []
    explains: tuple[str, ...] | None = None
    params: dict[str, Any] = {}
    docs: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("--"):
            if line.strip():
                break
            continue
        if param := _PARAM.match(line):
            params[param["name"]] = _number(param["value"])
            docs[param["name"]] = (param["doc"] or "").strip()
        elif line.startswith(f"-- {path.stem}:"):
            description = line.split(":", 1)[1].strip()
        elif header := _HEADER.match(line):
            key, value = header["key"], header["value"].strip()
            if key == "severity":
                severity = value
            elif key == "reads":
                reads = tuple(v.strip() for v in value.split(",") if v.strip())
            elif key == "requires":
                requires = tuple(
                    " | ".join(a.strip() for a in v.split("|") if a.strip()) for v in value.split(",") if v.strip()
                )
            elif key == "role":
                role = value
            elif key == "advice":
                action = _ADVICE.match(value)
                if action is None:
                    raise CheckError(f"{path.name}: `-- advice:` must read `lever up|down|do: text`, not {value!r}")
                advice.append(Advice(action["lever"], action["direction"], action["text"].strip()))
            elif key == "explains":
                explains = () if value == "none" else tuple(v.strip() for v in value.split(",") if v.strip())
    if severity not in SEVERITIES:
        raise CheckError(f"{path.name}: severity must be one of {SEVERITIES}, not {severity!r}")
    if not reads:
        raise CheckError(f"{path.name}: the header must say which tables it reads (-- reads: ...)")
    if role not in ROLES:
        raise CheckError(f"{path.name}: role must be one of {ROLES}, not {role!r}")
    return Check(name, description, severity, reads, requires, params, docs, text, path, role, tuple(advice), explains)


def load_checks(directory: Path = SQL_DIR / "checks") -> list[Check]:
    checks = [parse_check(path) for path in sorted(Path(directory).glob("*.sql"))]
    names = {c.name for c in checks}
    for check in checks:
        if unknown := sorted(set(check.explains or ()) - names):
            raise CheckError(f"{check.path.name}: `-- explains:` names no rule: {', '.join(unknown)}")
    return checks


@dataclass
class CheckOutcome:
    check: Check
    rows: list[dict] = field(default_factory=list)
    error: str | None = None


def run_check(con, check: Check, overrides: dict[str, Any] | None = None, run_key: str | None = None) -> CheckOutcome:
    """Run one check on an open (read-only is enough) DuckDB connection; a failing query is an outcome, not a crash."""
    try:
        con.execute(DETECTORS.read_text(encoding="utf-8"))  # temporary macros: allowed on a read-only connection
    except Exception as exc:  # duckdb.Error: every rule that calls them would fail the same way
        return CheckOutcome(check, error=str(exc).splitlines()[0])
    return _run_prepared(con, check, overrides, run_key)


def _run_prepared(con, check: Check, overrides: dict[str, Any] | None, run_key: str | None) -> CheckOutcome:
    """One check on a connection that has the detectors already."""
    outcome = CheckOutcome(check)
    try:
        params = check.bound(overrides)
        used = {name: value for name, value in params.items() if f"${name}" in check.sql}
        relation = con.execute(f"select * from ({check.sql.rstrip().rstrip(';')}) as found", used)
        columns = [d[0] for d in relation.description]
        missing = [c for c in ANOMALY_COLUMNS if c not in columns]
        if missing:
            raise CheckError(f"result lacks columns {missing}")
        for values in relation.fetchall():
            row = dict(zip(columns, values, strict=True))
            if run_key is not None and row["run_key"] != run_key:
                continue
            row["check_name"] = check.name
            row["severity"] = row["severity"] or check.severity
            outcome.rows.append({c: row.get(c) for c in ANOMALY_COLUMNS + EVENT_COLUMNS})
    except Exception as exc:  # duckdb.Error and CheckError: reported per check
        outcome.error = str(exc).splitlines()[0]
    return outcome


def hours(row: dict) -> str:
    """Where an event-mart flag is, in time: ``2025-01-01 10:00-12:00 UTC``."""
    start, end = row.get("started_at"), row.get("ended_at")
    if start is None:
        return "time unknown"
    text = f"{start:%Y-%m-%d %H:%M}"
    return f"{text}-{end:%H:%M} UTC" if end is not None else f"{text} UTC"


def run_checks(
    con,
    checks: list[Check],
    overrides: dict[str, dict] | None = None,
    run_key: str | None = None,
    runs: list[str] | None = None,
) -> list[CheckOutcome]:
    """Every check, in order of ``checks``. With ``runs``, the rules read only those runs (and the event marts).

    The rules run two at a time on cursors of ``con``: most are small window queries that keep one core busy,
    so on two cores two of them at once take about half the time. A cursor is a connection of its own (DuckDB
    releases the GIL while it works), so each gets the detectors and the run views itself."""
    from concurrent.futures import ThreadPoolExecutor

    overrides = overrides or {}
    local = threading.local()
    cursors = []
    lock = threading.Lock()

    def run(check: Check) -> CheckOutcome:
        if not hasattr(local, "cursor"):
            local.cursor = con.cursor()
            with lock:
                cursors.append(local.cursor)
            try:
                local.cursor.execute(DETECTORS.read_text(encoding="utf-8"))
                if runs is not None:
                    _restrict_to_runs(local.cursor, runs)
            except Exception as exc:  # duckdb.Error: this cursor cannot run rules
                local.failed = str(exc).splitlines()[0]
        if getattr(local, "failed", None):
            return CheckOutcome(check, error=local.failed)
        return _run_prepared(local.cursor, check, overrides.get(check.name), run_key)

    try:
        with ThreadPoolExecutor(max_workers=CHECK_WORKERS) as pool:
            return list(pool.map(run, checks))
    finally:
        for cursor in cursors:
            cursor.close()


def fold_recurring(rows: list[dict], check_field: str = "check_name") -> list[dict]:
    """Flags for reading: FOLD_AT or more episodes of one rule on one run at one severity (and, in a report, in one
    place of its story and transient or not, as a folded row carries its worst episode's flags for all of them) as
    one row, where the first of them was, that tells the worst and how many there were.

    A signal that hovers at a rule's threshold over a long run comes and goes many times (a public 2,400-step TRL
    run: 68 episodes of zero-variance groups, 60 of a vanishing grad norm), and one line each buries the rest.
    Text output folds them; every episode stays a row of the anomalies table and of the JSON outputs. A folded
    row spans the first episode's onset to the last one's end (open if any is), carries ``episodes``, and tells
    the worst episode (farthest past the rule's threshold: the longest may be a mild one while a 110x KL spike
    hides among the others), and the longest too when that is another."""

    def key(row: dict) -> tuple:
        return (
            row.get("run_key"),
            row[check_field],
            row["severity"],
            row.get("consequence_of"),
            row.get("related_to"),
            row.get("transient"),
        )

    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if row.get("step") is not None:
            groups.setdefault(key(row), []).append(row)
    out, done = [], set()
    for row in rows:
        episodes = groups.get(key(row), []) if row.get("step") is not None else []
        if len(episodes) < FOLD_AT:
            out.append(row)
        elif key(row) not in done:
            done.add(key(row))
            out.append(_folded(episodes))
    return out


def _folded(episodes: list[dict]) -> dict:
    ordered = sorted(episodes, key=lambda r: r["step"])
    ends = [r["step_end"] for r in ordered]
    last = None if None in ends else max(ends)
    known = max(max(r["step"] for r in ordered), max((e for e in ends if e is not None), default=0))

    def length(row: dict) -> int:
        return (known if row["step_end"] is None else row["step_end"]) - row["step"]

    longest = max(ordered, key=length)
    excess = _past_bar(ordered)
    worst = max(ordered, key=lambda r: (excess[id(r)], length(r))) if excess else longest
    message = worst["message"] or ""
    head = first_clause(message)  # the note goes after what was found, outside the rule's own brackets
    until = f"step {last}" if last is not None else "the end"
    told = f"{len(ordered)} episodes from step {ordered[0]['step']} to {until}"
    if not excess:
        which = f"the longest of {told}"
    elif worst is longest or length(worst) == length(longest):
        which = f"the worst and longest of {told}"
    else:
        which = f"the worst of {told}; the longest: step {span(longest)}"
    return dict(
        worst,
        step=ordered[0]["step"],
        step_end=last,
        episodes=len(ordered),
        message=f"{head} ({which}){message[len(head) :]}",
    )


def first_clause(message: str) -> str:
    """A rule's message up to its first "; " outside brackets: what it found, before its advice. A "; " inside
    "(down to -0.2; first at steps …)" is part of the finding."""
    depth = 0
    for i, char in enumerate(message):
        depth += (char in "([") - (char in ")]")
        if depth <= 0 and message.startswith("; ", i):
            return message[:i]
    return message


def _past_bar(episodes: list[dict]) -> dict[int, float]:
    """How far past its threshold each episode of one rule went (id(row) -> amount), so a folded line can name the
    worst: a ratio when values and thresholds are positive (a KL spike 110x its level beats one 8x it), else a
    difference. A rule flags one side of its threshold (a spike above, a collapse below); when its episodes sit on
    both sides, or lack a value or threshold, there is no telling which was worst: empty."""
    numbers = [(r.get("value"), r.get("threshold")) for r in episodes]
    pairs = [(float(v), float(t)) for v, t in numbers if isinstance(v, (int, float)) and isinstance(t, (int, float))]
    if len(pairs) < len(episodes) or not all(math.isfinite(v) and math.isfinite(t) for v, t in pairs):
        return {}
    above = all(v >= t for v, t in pairs)
    if not above and not all(v <= t for v, t in pairs):
        return {}
    ratio = all(v > 0 and t > 0 for v, t in pairs)
    return {  # to 9 digits: episodes equal but for float rounding are tied, and the longer of them is told
        id(r): float(f"{(v / t if above else t / v) if ratio else (v - t if above else t - v):.9g}")
        for r, (v, t) in zip(episodes, pairs, strict=True)
    }


def span(row: dict) -> str:
    """A flag's steps as the tables show them: `205` (one step), `38-39`, `41+` (not over when last logged), `whole
    run` (a finding with no onset step)."""
    if row["step"] is None:
        return "whole run"
    if row["step_end"] is None:
        return f"{row['step']}+"
    return str(row["step"]) if row["step_end"] == row["step"] else f"{row['step']}-{row['step_end']}"


def lacking(check: Check, logged: set[str]) -> list[str]:
    """The requirements of ``check`` that a run logging the canonical metrics ``logged`` does not meet, as said to
    people (`frac_reward_zero_std or reward_std`)."""
    return [
        " or ".join(either)
        for either in (tuple(requirement.split(" | ")) for requirement in check.requires)
        if not any(metric in logged for metric in either)
    ]


def nothing_to_check(con) -> str | None:
    """Why a check of the whole warehouse judged nothing, said in place of its counts: no run and no rollout event
    in it (``30 checks: 0 errors, 0 warnings`` would read as an all-clear); None when there is something."""
    runs, events = con.sql("select (select count(*) from runs), (select count(*) from events)").fetchone()
    if runs or events:
        return None
    return (
        "no runs in the warehouse (and no rollout events): nothing was checked; ingest some first (`grpolens "
        "refresh` with GRPOLENS_TRAINER_LOGS or GRPOLENS_WANDB_DIRS set, or `grpolens report PATH` on one run)"
    )


def not_applicable(con, checks: list[Check]) -> list[tuple[str, str, str]]:
    """(check, run_key, reason) for every run that lacks a canonical metric a check requires."""
    out = []
    runs = [r for (r,) in con.sql("select run_key from runs order by run_key").fetchall()]
    have: dict[str, set[str]] = {r: set() for r in runs}
    for run, metric in con.sql("select distinct run_key, metric from metrics").fetchall():
        have.setdefault(run, set()).add(metric)
    for check in checks:
        for run in runs:
            missing = lacking(check, have.get(run, set()))
            if missing:
                out.append((check.name, run, f"no {', '.join(missing)} logged"))
    return out


# The same columns as dbt's on-run-start macro ensure_anomalies_table, which creates the table empty for run_outcomes.
ANOMALIES_DDL = """
create or replace table anomalies (
    run_key varchar, check_name varchar, severity varchar, step bigint, step_end bigint,
    metric varchar, value double, threshold double, message varchar,
    dataset varchar, started_at timestamptz, ended_at timestamptz
)
"""


def write_anomalies(con, outcomes: list[CheckOutcome]) -> int:
    """Replace the `anomalies` table with what the checks found (a write connection)."""
    rows = [row for outcome in outcomes for row in outcome.rows]
    con.execute("begin")
    con.execute(ANOMALIES_DDL)
    _insert_flags(con, rows)
    con.execute("commit")
    return len(rows)


_NUMBERS = ("step", "step_end", "value", "threshold")  # DuckDB casts them to the table's types on insert
_TIMES = ("started_at", "ended_at")


def _insert_flags(con, rows: list[dict]) -> None:
    """Append flags to `anomalies` as one Arrow table: executemany binds them row by row (2 s for 1,700 flags
    against 0.08 s). Rules return their numbers as int, float or Decimal: each becomes a double here."""
    if not rows:
        return
    import pyarrow as pa

    columns = ANOMALY_COLUMNS + EVENT_COLUMNS
    arrays = []
    for column in columns:
        values = [row.get(column) for row in rows]
        if column in _NUMBERS:
            arrays.append(pa.array([None if v is None else float(v) for v in values], pa.float64()))
        elif column in _TIMES:
            arrays.append(pa.array(values, pa.timestamp("us", tz="UTC")))
        else:
            arrays.append(pa.array([None if v is None else str(v) for v in values], pa.string()))
    con.register("new_flags", pa.table(arrays, names=list(columns)))
    try:
        names = ", ".join(columns)
        con.execute(f"insert into anomalies ({names}) select {names} from new_flags")
    finally:
        con.unregister("new_flags")


def check_overrides(settings, rules: list[Check]) -> dict[str, dict]:
    """Per-check parameter overrides from grpolens.yaml (`checks: {kl_spike: {min_kl: 0.3}}`), validated against
    the rules the caller already loaded."""
    section = settings.load_config().get("checks") or {}
    where = settings.config_path or "grpolens.yaml"
    if not isinstance(section, dict):
        raise CheckError(f"{where}: `checks` must map check names to their parameters")
    known = {check.name for check in rules}
    unknown = sorted(map(str, set(section) - known))
    if unknown:
        raise CheckError(
            f"{where}: `checks` names unknown checks: {', '.join(unknown)} "
            f"(known: the file names in {SQL_DIR / 'checks'}, e.g. kl_spike)"
        )
    not_mappings = sorted(name for name, params in section.items() if not isinstance(params or {}, dict))
    if not_mappings:
        raise CheckError(
            f"{where}: `checks: {not_mappings[0]}:` must map parameter names to values "
            "(e.g. `kl_spike: {mad_factor: 8}`)"
        )
    return {name: params or {} for name, params in section.items()}


CHECKED = ".checked_runs.json"  # in the data home: which version of each run the anomalies table reflects


def checks_digest(checks: list[Check], overrides: dict[str, dict]) -> str:
    """The rules, the detectors they call and their thresholds: when any changes, every run is checked again."""
    import hashlib
    import json

    digest = hashlib.sha256(DETECTORS.read_bytes())
    for check in checks:
        digest.update(check.name.encode() + check.sql.encode())
    digest.update(json.dumps(overrides, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _restrict_to_runs(con, runs: list[str]) -> None:
    """Temporary views named like every per-run table, holding only ``runs`` (and rows of no run, the event
    marts' dataset hours): the rules then read only what changed, with their SQL untouched. A table with a
    run_hash column (stored ordered by it, every row a run's) is filtered on it too, so its other runs' row
    groups are skipped rather than read (macros/changed_runs.sql says why run_key alone cannot)."""
    from pipeline.build_plan import write_changed_runs

    database = con.execute("select current_database()").fetchone()[0]
    write_changed_runs(con, "changed_runs", runs, temporary=True)
    columns: dict[str, set[str]] = {}
    for table, column in con.execute(
        "select table_name, column_name from information_schema.columns where table_catalog = current_database() "
        "and table_schema = 'main' and column_name in ('run_key', 'run_hash') and table_name not in ('anomalies') "
        "and not starts_with(table_name, '_') and not starts_with(table_name, 'stg_')"
    ).fetchall():
        columns.setdefault(table, set()).add(column)
    for table, found in columns.items():
        if "run_key" not in found:
            continue
        quoted = '"' + table.replace('"', '""') + '"'
        keep = "run_key is null or run_key in (select run_key from changed_runs)"
        if "run_hash" in found:
            keep = "run_hash in (select run_hash from changed_runs) and run_key in (select run_key from changed_runs)"
        con.execute(f'create or replace temp view {quoted} as select * from "{database}".main.{quoted} where {keep}')


def check_warehouse(settings, run_key: str | None = None, persist: bool = True) -> list[CheckOutcome]:
    """Every check's flags on the warehouse as built now (only ``run_key``'s with a run filter).

    The `anomalies` table is the answer whenever it reflects the warehouse: the same rules and thresholds, and
    every run and event part as the last complete build saw them (pipeline.build_plan's record). Then this reads
    it, with the errors of the check run that wrote it, and runs no rule. Otherwise, with ``persist``, it brings
    the table up to date incrementally: only the runs whose lake parts changed since they were last checked are
    checked again, the flags of the others are kept, those of runs that are gone are dropped, and the rules over
    the event marts (rows of no run) are run whole; a change of rules, detectors, thresholds, dbt models or metric
    aliases checks every run.
    Without ``persist`` (a read path: reports, Dagster's asset checks, `grpolens check --run`) it writes nothing
    and runs the rules itself, over ``run_key``'s rows only when given."""
    from pipeline import build_plan, warehouse

    checks = load_checks()
    overrides = check_overrides(settings, checks)
    con = warehouse.connect_readonly(settings)
    try:
        todo = _to_check(settings, con, checks, overrides)
        if todo.current:  # the table is the answer
            errors = todo.state.get("errors", {})
            return _stored_outcomes(con, [CheckOutcome(c, error=errors.get(c.name)) for c in checks], run_key)
        if not persist:
            return run_checks(con, checks, overrides, run_key, runs=None if run_key is None else [run_key])
        outcomes = run_checks(con, checks, overrides, runs=None if todo.whole else todo.redo)
    finally:
        con.close()
    con = warehouse.connect_write(settings)
    try:
        if todo.whole:
            write_anomalies(con, outcomes)
        else:
            _replace_runs(con, outcomes, todo.redo + todo.gone)
        outcomes = _stored_outcomes(con, outcomes, run_key)
    finally:
        con.close()
    errors = {o.check.name: o.error for o in outcomes if o.error}
    state = {"digest": todo.digest, "versions": todo.versions, "events": todo.events, "errors": errors}
    build_plan.write_json(settings.home / CHECKED, state)
    return outcomes


@dataclass
class ToCheck:
    """How far the anomalies table is behind the warehouse: every run (``whole``: no table yet, or the rules,
    detectors or thresholds changed, or the dbt project or metric aliases the warehouse was built with), else the
    runs to check again and the runs that are gone."""

    digest: str  # of the rules and thresholds, and of the build
    versions: dict[str, Any]  # run_key -> its lake parts, as the last complete build saw them
    events: Any  # the event parts, likewise
    state: dict  # what the table reflects (CHECKED)
    whole: bool
    redo: list[str]
    gone: list[str]

    @property
    def current(self) -> bool:
        return not self.whole and not self.redo and not self.gone and self.state.get("events") == self.events


def _to_check(settings, con, checks: list[Check], overrides: dict[str, dict]) -> ToCheck:
    from pipeline import build_plan

    record = build_plan.load_record(settings)
    # and what the warehouse was built with: a changed dbt model or metric alias changes every run's marts while
    # its lake parts stay as they were
    digest = checks_digest(checks, overrides) + f"@{(record or {}).get('dbt_digest')}"
    versions, events = build_plan.run_versions(record), build_plan.other_parts_version(record)
    state = _checked_state(settings)
    has_table = bool(
        con.execute(
            "select count(*) from information_schema.tables where table_catalog = "
            "current_database() and table_name = 'anomalies'"
        ).fetchone()[0]
    )
    # no record of a complete build: every run (a lake of events alone has a record with no runs)
    whole = record is None or state.get("digest") != digest or not has_table
    known = state.get("versions", {}) if not whole else {}
    redo = sorted(run for run, version in versions.items() if known.get(run) != version)
    gone = sorted(set(known) - set(versions))
    return ToCheck(digest, versions, events, state, whole, redo, gone)


def anomalies_current(settings, con) -> bool:
    """Whether the anomalies table reflects the warehouse as built now (``con``: open on it, read-only is enough),
    with today's rules and thresholds: then checking would change nothing."""
    checks = load_checks()
    return _to_check(settings, con, checks, check_overrides(settings, checks)).current


def _checked_state(settings) -> dict:
    """What the anomalies table reflects (written by check_warehouse beside the warehouse)."""
    import json

    try:
        state = json.loads((settings.home / CHECKED).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or cut short: everything is checked again
        return {}
    return state if isinstance(state, dict) else {}


def _replace_runs(con, outcomes: list[CheckOutcome], runs: list[str]) -> None:
    """The flags of ``runs`` and of no run are replaced by what the checks just found, in one transaction."""
    redone = set(runs)
    rows = [row for outcome in outcomes for row in outcome.rows if row["run_key"] is None or row["run_key"] in redone]
    con.execute("begin")
    con.execute(
        "delete from anomalies where run_key is null or run_key in (select unnest($runs::varchar[]))", {"runs": runs}
    )
    _insert_flags(con, rows)
    con.execute("commit")


def _stored_outcomes(con, outcomes: list[CheckOutcome], run_key: str | None = None) -> list[CheckOutcome]:
    """Every check's flags as the anomalies table now holds them (the kept runs' and the new; only ``run_key``'s
    when given), with the errors ``outcomes`` carry."""
    columns = ANOMALY_COLUMNS + EVENT_COLUMNS
    stored: dict[str, list[dict]] = {}
    relation = con.execute(
        f"select {', '.join(columns)} from anomalies where $run is null or run_key = $run "
        "order by run_key, check_name, step",
        {"run": run_key},
    )
    for values in relation.fetchall():
        row = dict(zip(columns, values, strict=True))
        stored.setdefault(row["check_name"], []).append(row)
    return [CheckOutcome(o.check, stored.get(o.check.name, []), o.error) for o in outcomes]
