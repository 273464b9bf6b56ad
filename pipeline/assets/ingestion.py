"""Ingest assets: each materialization appends what is new in a source to the lake (the dbt sources' tables)."""


import dagster as dg

from pipeline.resources import GrpolensResource
from pipeline.sources import wandb_offline

WANDB_OFFLINE_TABLES = ("wandb_offline_runs", "wandb_offline_history", "wandb_offline_ingest_issues")


@dg.multi_asset(
    specs=[
        dg.AssetSpec(["lake", table], group_name="lake", kinds={"parquet", "wandb"},
                     description=f"Lake table `{table}`, appended by the W&B offline run-file ingest.")
        for table in WANDB_OFFLINE_TABLES
    ],
    can_subset=False,
)
def wandb_offline_lake(context: dg.AssetExecutionContext, grpolens: GrpolensResource):
    """Read what was appended to the `run-*.wandb` files under GRPOLENS_WANDB_DIRS since the last ingest."""
    settings = grpolens.settings()
    if not settings.wandb_dirs:
        context.log.info("wandb offline: skipped, GRPOLENS_WANDB_DIRS is not set")
    report = wandb_offline.ingest(settings.lake, settings.wandb_dirs, progress=context.log.debug)
    for line in report.lines():
        context.log.info(line)
    shared = {
        "files_seen": report.files_seen,
        "files_read": report.files_read,
        "values": report.values,
        "runs_updated": len(report.runs_touched),
        "issues": len(report.issues),
        "ingest_id": report.ingest_id if report.ingest_id is not None else dg.MetadataValue.null(),
        "seconds": round(report.seconds, 3),
    }
    for table in WANDB_OFFLINE_TABLES:
        yield dg.MaterializeResult(asset_key=["lake", table], metadata=shared)
