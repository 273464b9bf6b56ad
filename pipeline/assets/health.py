"""Training-health checks in Dagster: the `anomalies` table as an asset, and one asset check per rule on the
table that rule reads, so a flagged run shows on the asset in the UI with its worst value and onset."""

import dagster as dg

from pipeline import checks, warehouse
from pipeline.resources import GrpolensResource

RULES = checks.load_checks()


@dg.asset(
    group_name="health",
    kinds={"duckdb"},
    deps=sorted({table for rule in RULES for table in rule.reads}),
    description="Every flag of every check in sql/checks/ (columns as in DESIGN.md's `anomalies`).",
)
def anomalies(context: dg.AssetExecutionContext, grpolens: GrpolensResource) -> dg.MaterializeResult:
    outcomes = checks.check_warehouse(grpolens.settings())
    rows = [row for outcome in outcomes for row in outcome.rows]
    for outcome in outcomes:
        if outcome.error:
            context.log.warning(f"check {outcome.check.name} could not run: {outcome.error}")
    return dg.MaterializeResult(metadata={
        "flags": len(rows),
        "errors": sum(r["severity"] == "error" for r in rows),
        "warnings": sum(r["severity"] == "warn" for r in rows),
        "runs_flagged": len({r["run_key"] for r in rows if r["run_key"]}),
        "dataset_hours_flagged": sum(r["run_key"] is None for r in rows),
        "checks_failed_to_run": sum(1 for o in outcomes if o.error),
    })


def _asset_check(rule: checks.Check) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=dg.AssetKey(rule.reads[0]), name=rule.name, description=rule.description,
                    blocking=False)
    def _check(grpolens: GrpolensResource) -> dg.AssetCheckResult:
        settings = grpolens.settings()
        con = warehouse.connect_readonly(settings)
        try:
            outcome = checks.run_check(con, rule, checks.check_overrides(settings, RULES).get(rule.name))
        finally:
            con.close()
        if outcome.error:
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                       metadata={"error": outcome.error})
        flagged = [r for r in outcome.rows if r["severity"] in ("warn", "error")]
        worst = max(flagged, key=lambda r: (r["severity"] == "error", abs(r["value"] or 0)), default=None)
        metadata = {"runs_flagged": len({r["run_key"] for r in flagged if r["run_key"]}), "flags": len(outcome.rows)}
        if worst is not None:
            where = ({"worst_run": worst["run_key"], "onset_step": worst["step"]} if worst["run_key"] is not None else
                     {"worst_dataset": worst["dataset"], "when": checks.hours(worst)})
            metadata.update({**where, "worst_value": worst["value"], "message": worst["message"]})
        severity = dg.AssetCheckSeverity.ERROR if any(r["severity"] == "error" for r in flagged) else dg.AssetCheckSeverity.WARN
        return dg.AssetCheckResult(passed=not flagged, severity=severity, metadata=metadata)

    return _check


health_checks = [_asset_check(rule) for rule in RULES]
