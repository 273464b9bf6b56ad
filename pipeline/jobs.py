"""Jobs: a refresh is every asset (ingest, the dbt models and their checks, anomalies, reports), the same
selection as the UI's "Materialize all"; W&B cloud runs are ingested one partition (run) at a time by their own job,
which is why their lake tables are declared, not assets (pipeline.assets.wandb_cloud says why)."""

import dagster as dg

from pipeline.assets.wandb_cloud import ingest_wandb_cloud_run, wandb_cloud_runs
from pipeline.resources import grpolens_resource

refresh_job = dg.define_asset_job(
    "refresh",
    selection=dg.AssetSelection.all(),  # declared tables (W&B cloud's, checks/anomalies) are not materialized here
    description="Ingest what is new in every configured source, then build the warehouse, run its checks and "
    "redraw the reports.",
)


# The resource is bound here rather than by Definitions: binding it there rebuilds wandb_cloud_sensor around the bound
# job, which Dagster 1.12 does through a beta parameter, with a BetaWarning on every load of the code location.
@dg.job(
    name="wandb_cloud_ingest",
    partitions_def=wandb_cloud_runs,
    resource_defs={"grpolens": grpolens_resource()},
    description="Ingest one W&B cloud run (a partition, entity/project/run_id): its new history, config, "
    "summary and artifacts.",
)
def wandb_cloud_job():
    ingest_wandb_cloud_run()
