"""W&B cloud runs as a dynamically partitioned asset: one partition per run (``entity/project/run_id``).

A sensor adds partitions as runs appear and requests the runs that changed, so ingestion fans out run by run
and one run can be re-materialized from the UI. Each partition appends that run's new history to the same lake
tables the full ``grpolens ingest`` writes (lake/<table>/source=wandb_cloud)."""

import dagster as dg

from pipeline.ingest import SOURCES
from pipeline.resources import GrpolensResource
from pipeline.sources import wandb_cloud

wandb_cloud_runs = dg.DynamicPartitionsDefinition(name="wandb_cloud_runs")


@dg.multi_asset(
    name="wandb_cloud_lake",
    specs=[
        dg.AssetSpec(["lake", f"wandb_cloud_{table}"], group_name="lake", kinds={"parquet", "wandb"},
                     description=f"Lake table `{table}`, appended run by run from the W&B cloud API.")
        for table in SOURCES["wandb_cloud"].tables
    ],
    partitions_def=wandb_cloud_runs,
    can_subset=False,
    description="Append one W&B cloud run's new history, config, summary and artifacts to the lake.",
)
def wandb_cloud_lake(context: dg.AssetExecutionContext, grpolens: GrpolensResource):
    settings = grpolens.settings()
    report = wandb_cloud.ingest(settings.lake, settings.wandb_projects, progress=context.log.info,
                                run_paths=[context.partition_key])
    if report.issues:
        raise dg.Failure(description="; ".join(f"{i.kind}: {i.message}" for i in report.issues),
                         metadata={"run": context.partition_key})
    metadata = {
        "history_rows": report.history_rows,
        "values": report.values,
        "ingest_id": report.ingest_id if report.ingest_id is not None else dg.MetadataValue.null(),
        "seconds": round(report.seconds, 3),
    }
    for table in SOURCES["wandb_cloud"].tables:
        yield dg.MaterializeResult(asset_key=["lake", f"wandb_cloud_{table}"], metadata=metadata)
