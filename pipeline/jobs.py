"""Jobs: a refresh is every ingest asset followed by the dbt models and their checks; W&B cloud runs are
ingested one partition (run) at a time by their own job."""

import dagster as dg

from pipeline.assets.wandb_cloud import wandb_cloud_lake

refresh_job = dg.define_asset_job(
    "refresh",
    selection=dg.AssetSelection.all() - dg.AssetSelection.assets(wandb_cloud_lake),
    description="Ingest what is new in every configured source, then build the warehouse and run its checks.",
)

wandb_cloud_job = dg.define_asset_job(
    "wandb_cloud_ingest",
    selection=dg.AssetSelection.assets(wandb_cloud_lake),  # partitioned as the asset is: one run per run
    description="Ingest one W&B cloud run (a partition): its new history, config, summary and artifacts.",
)
