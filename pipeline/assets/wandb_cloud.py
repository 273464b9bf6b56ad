"""W&B cloud runs in Dagster: the lake tables they fill, partitioned per run (``entity/project/run_id``), and the op
that ingests one run.

The tables are declared here, not materialized by an asset: the `wandb_cloud_ingest` job (pipeline.jobs), which
`wandb_cloud_sensor` launches per new or changed run, ingests one partition and records its materializations on
them. Were they a partitioned asset, every selection over the whole graph (the UI's "Materialize all") would need
a partition picked, and with no W&B project configured there is none: the launch is disabled. As declared tables
they stay out of "Materialize all" and out of the refresh, and the UI does not ask whether to build the warehouse
without them. Each partition appends that run's new history to the same lake tables the full
``grpolens ingest`` writes (lake/<table>/source=wandb_cloud)."""

import dagster as dg

from pipeline.ingest import SOURCES
from pipeline.resources import GrpolensResource
from pipeline.sources import wandb_cloud

wandb_cloud_runs = dg.DynamicPartitionsDefinition(name="wandb_cloud_runs")

WANDB_CLOUD_TABLES = [
    dg.AssetSpec(
        ["lake", f"wandb_cloud_{table}"],
        group_name="lake",
        kinds={"parquet", "wandb"},
        partitions_def=wandb_cloud_runs,
        description=f"Lake table `{table}`, appended run by run from the W&B cloud API by the "
        "`wandb_cloud_ingest` job (one partition per run; `wandb_cloud_sensor` adds and "
        "launches them when GRPOLENS_WANDB_PROJECTS is set).",
    )
    for table in SOURCES["wandb_cloud"].tables
]


@dg.op(out={}, description="Append one W&B cloud run's new history, config, summary and artifacts to the lake.")
def ingest_wandb_cloud_run(context: dg.OpExecutionContext, grpolens: GrpolensResource):
    settings = grpolens.settings()
    report = wandb_cloud.ingest(
        settings.lake, settings.wandb_projects, progress=context.log.info, run_paths=[context.partition_key]
    )
    if report.issues:
        raise dg.Failure(
            description="; ".join(f"{i.kind}: {i.message}" for i in report.issues),
            metadata={"run": context.partition_key},
        )
    metadata = {
        "history_rows": report.history_rows,
        "values": report.values,
        "ingest_id": report.ingest_id if report.ingest_id is not None else dg.MetadataValue.null(),
        "seconds": round(report.seconds, 3),
    }
    for spec in WANDB_CLOUD_TABLES:
        yield dg.AssetMaterialization(asset_key=spec.key, partition=context.partition_key, metadata=metadata)
