"""Training-health checks in Dagster: the `anomalies` table as an asset, and one asset check per rule on the
table that rule reads. The asset runs the rules (on the runs that changed); the asset checks come after it and read
its table, so a refresh runs every rule once. Both list every flag as a Markdown table by run name (what people call
a run, not its run_key; a rule's recurring episodes on a run as one row), values to 3 significant digits, so the UI
answers "which runs, how bad, against what threshold" without a trip to `grpolens check`."""

import math
from collections import Counter

import dagster as dg

from pipeline import checks, warehouse
from pipeline.resources import GrpolensResource

RULES = checks.load_checks()
MAX_TABLE_ROWS = 300  # a metadata entry travels inside the event log: beyond this, `grpolens check` lists the rest
SEVERITY_ORDER = {"error": 0, "warn": 1, "info": 2}


@dg.asset(
    group_name="health",
    kinds={"duckdb"},
    deps=sorted({table for rule in RULES for table in rule.reads}),
    description="Every flag of every check in sql/checks/ (columns as in DESIGN.md's `anomalies`).",
)
def anomalies(context: dg.AssetExecutionContext, grpolens: GrpolensResource) -> dg.MaterializeResult:
    settings = grpolens.settings()
    outcomes = checks.check_warehouse(settings)
    rows = [row for outcome in outcomes for row in outcome.rows]
    for outcome in outcomes:
        if outcome.error:
            context.log.warning(f"check {outcome.check.name} could not run: {outcome.error}")
    con = warehouse.connect_readonly(settings)
    try:
        names = run_names(con)
    finally:
        con.close()
    return dg.MaterializeResult(
        metadata={
            "flags": len(rows),
            "errors": sum(r["severity"] == "error" for r in rows),
            "warnings": sum(r["severity"] == "warn" for r in rows),
            "runs_flagged": len({r["run_key"] for r in rows if r["run_key"]}),
            "dataset_hours_flagged": sum(r["run_key"] is None for r in rows),
            "checks_failed_to_run": sum(1 for o in outcomes if o.error),
            "flagged": dg.MetadataValue.md(flags_table(rows, names, with_check=True)),
        }
    )


def run_names(con) -> dict[str, str]:
    """run_key → the run's name (runs.name); a name that several runs share keeps their run_keys apart."""
    pairs = con.execute("select run_key, coalesce(name, run_key) from runs").fetchall()
    shared = {name for name, count in Counter(name for _, name in pairs).items() if count > 1}
    return {key: f"{name} ({key})" if name in shared else name for key, name in pairs}


def flags_table(rows: list[dict], names: dict[str, str], with_check: bool = False, with_message: bool = False) -> str:
    """Every flag as one Markdown row: where (run name, or dataset and hours for an event-mart flag), severity, onset
    and end step, value and threshold to 3 significant digits; errors first. A rule's recurring episodes on a run
    are one row (checks.fold_recurring) with their number in an `episodes` column."""
    from pipeline.report.markdown import table

    if not rows:
        return "No flags."
    folded = checks.fold_recurring(rows)
    ordered = sorted(folded, key=lambda r: (SEVERITY_ORDER.get(r["severity"], 3), _where(r, names), r["check_name"]))
    episodes = len(folded) < len(rows)
    shown = [
        {
            **row,
            "where": _where(row, names),
            "value": rounded(row["value"]),
            "threshold": rounded(row["threshold"]),
            "episodes": row.get("episodes", 1),
        }
        for row in ordered[:MAX_TABLE_ROWS]
    ]
    columns = [
        "where",
        *(["check_name"] if with_check else []),
        "severity",
        "step",
        "step_end",
        *(["episodes"] if episodes else []),
        "metric",
        "value",
        "threshold",
        *(["message"] if with_message else []),
    ]
    headers = [
        "run",
        *(["check"] if with_check else []),
        "severity",
        "onset step",
        "until step",
        *(["episodes"] if episodes else []),
        "metric",
        "value",
        "threshold",
        *(["message"] if with_message else []),
    ]
    lines = table(shown, columns, headers)
    if len(ordered) > MAX_TABLE_ROWS:
        lines.append(f"… and {len(ordered) - MAX_TABLE_ROWS} more: `grpolens check` lists them all.")
    return "\n".join(lines).rstrip()


def rounded(value):
    """A float to 3 significant digits, written plainly: 1000 (not 1e+03), 0.0275, 1.23e+06 past a million."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{float(f'{value:.3g}'):g}"
    return value


def _where(row: dict, names: dict[str, str]) -> str:
    if row["run_key"] is None:  # an event-mart flag: a dataset over some hours, no run
        return f"dataset {row['dataset']}, {checks.hours(row)}"
    return names.get(row["run_key"], row["run_key"])


def _thresholds(rule: checks.Check, params: dict | None) -> str:
    """The thresholds the check ran with (grpolens.yaml's overrides applied), e.g. `mad_factor=6, min_ratio=4`."""
    try:
        bound = rule.bound(params)
    except checks.CheckError:  # an unknown override: the check's own error says so; show the defaults
        bound = rule.params
    return ", ".join(f"{name}={value}" for name, value in bound.items()) or "none"


def _result(
    rule: checks.Check, outcome: checks.CheckOutcome, params: dict | None, names: dict[str, str]
) -> dg.AssetCheckResult:
    """A rule's outcome as its asset check shows it: failed (WARN or ERROR) when it flagged anything at warn or
    error, with every flagged run, its values and the thresholds it ran with."""
    key = dg.AssetCheckKey(dg.AssetKey(rule.reads[0]), rule.name)
    thresholds = _thresholds(rule, params)
    if outcome.error:
        return dg.AssetCheckResult(
            check_name=key.name,
            asset_key=key.asset_key,
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"error": outcome.error, "thresholds": thresholds},
        )
    flagged = [r for r in outcome.rows if r["severity"] in ("warn", "error")]
    severity = (
        dg.AssetCheckSeverity.ERROR if any(r["severity"] == "error" for r in flagged) else dg.AssetCheckSeverity.WARN
    )
    return dg.AssetCheckResult(
        check_name=key.name,
        asset_key=key.asset_key,
        passed=not flagged,
        severity=severity,
        metadata={
            "runs_flagged": len({r["run_key"] for r in flagged if r["run_key"]}),
            "flags": len(outcome.rows),
            "flagged": dg.MetadataValue.md(flags_table(outcome.rows, names, with_message=True)),
            "thresholds": thresholds,
        },
    )


# One step answers every selected rule: 30 steps of their own would each pay a step's bookkeeping in the event
# log. They read the `anomalies` table (after the asset in a run that materializes it); only when that table does
# not reflect the warehouse (the models were rebuilt without it) do they run the rules themselves, read-only.
@dg.multi_asset_check(
    specs=[
        dg.AssetCheckSpec(
            rule.name,
            asset=dg.AssetKey(rule.reads[0]),
            description=rule.description,
            blocking=False,
            additional_deps=[dg.AssetKey("anomalies")],
        )
        for rule in RULES
    ],
    can_subset=True,
    name="training_health_checks",
)
def training_health_checks(context: dg.AssetCheckExecutionContext, grpolens: GrpolensResource):
    settings = grpolens.settings()
    overrides = checks.check_overrides(settings, RULES)
    selected = {key.name for key in context.selected_asset_check_keys}
    outcomes = {o.check.name: o for o in checks.check_warehouse(settings, persist=False)}
    con = warehouse.connect_readonly(settings)
    try:
        names = run_names(con)
    finally:
        con.close()
    for rule in RULES:
        if rule.name in selected:
            yield _result(rule, outcomes[rule.name], overrides.get(rule.name), names)


health_checks = [training_health_checks]
