"""Per-run reports as a Dagster asset: downstream of `anomalies` (and so of every mart the checks read), it
redraws the reports of the runs that changed and shows the verdict of every run, with the main plot of the
unhealthy ones, on the asset page."""

from typing import Any

import dagster as dg

from pipeline.report import batch
from pipeline.resources import GrpolensResource

MAX_PLOTS_IN_METADATA = 6  # each plot travels base64 inside the event log: a few, not one per run


@dg.asset(
    group_name="reports",
    kinds={"markdown"},
    deps=["anomalies"],
    description="One report per run (verdict, root cause, recommendation, sections, plots) in "
    "$GRPOLENS_HOME/reports/<run name>/; only runs whose data or findings changed are redrawn.",
)
def run_reports(context: dg.AssetExecutionContext, grpolens: GrpolensResource) -> dg.MaterializeResult:
    from pipeline.report.plots import markdown_image

    settings = grpolens.settings()
    summaries = batch.write_reports(settings, progress=context.log.info)
    metadata: dict[str, Any] = {
        "verdicts": dg.MetadataValue.md(batch.verdict_table(summaries, settings.reports_dir)),
        "runs": len(summaries),
        "unhealthy": sum(s["verdict"] == "unhealthy" for s in summaries),
        "watch": sum(s["verdict"] == "watch" for s in summaries),
        "regenerated": sum(s["regenerated"] for s in summaries),
        "reports_dir": dg.MetadataValue.path(str(settings.reports_dir)),
    }
    flagged = [s for s in summaries if s["verdict"] == "unhealthy" and s["main_plot"]]
    for summary in flagged[:MAX_PLOTS_IN_METADATA]:
        caption = f"**{summary['run']}**: {summary['root_cause']} from step {summary['onset']}\n\n"
        metadata[f"plot {summary['run']}"] = dg.MetadataValue.md(
            caption + markdown_image(summary["main_plot"], f"{summary['run']} core curves")
        )
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    group_name="reports",
    kinds={"markdown"},
    deps=["anomalies", "run_outcomes"],
    description="One sweep comparison per W&B sweep and per group of two or more runs (ranking with intervals, "
    "hyper-parameter effects, next experiments) in $GRPOLENS_HOME/reports/_sweeps/.",
)
def sweep_reports(context: dg.AssetExecutionContext, grpolens: GrpolensResource) -> dg.MaterializeResult:
    from pipeline.report import sweep_report

    settings = grpolens.settings()
    results = sweep_report.write_group_reports(settings)
    metadata: dict[str, Any] = {
        "sweeps": sum(r["doc"] is not None for r in results),
        "summary": dg.MetadataValue.text(sweep_summary(results)),
    }
    for result in results:
        if result["doc"] is None:
            context.log.info(f"{result['selection']}: {result['error']}")
            metadata[result["selection"]] = dg.MetadataValue.text(result["error"])
            continue
        doc = result["doc"]
        header = (
            f"**{doc['selection']}** on `{doc['metric']}`: best **{doc['runs'][0]['run']}** "
            f"([sweep.md]({doc['files']['markdown']}))\n\n"
        )
        metadata[result["selection"]] = dg.MetadataValue.md(header + sweep_report.ranking_table(doc))
    return dg.MaterializeResult(metadata=metadata)


def sweep_summary(results: list[dict]) -> str:
    """The `summary` entry: one line per sweep or group (sweep_lines)."""
    return "\n".join(sweep_lines(results)) or "no groups"


def sweep_lines(results: list[dict]) -> list[str]:
    """One line per sweep or group: its winner (and the runs tied with it) and where the comparison is, or why it
    could not be compared. `grpolens demo` prints them from this asset's metadata."""
    lines = []
    for result in results:
        doc = result["doc"]
        if doc is None:
            lines.append(f"{result['selection']}: {result['error']}")
            continue
        tied = [r["run"] for r in doc["runs"][1:] if r["tied_with_best"]]
        lines.append(
            f"{doc['selection']}: best {doc['runs'][0]['run']} on {doc['metric']}"
            + (f" (tied with {', '.join(tied)})" if tied else "")
            + f" — {doc['files']['markdown']}"
        )
    return lines
