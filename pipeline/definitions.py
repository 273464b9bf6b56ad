"""The Dagster code location: assembles assets, resources, jobs, sensors and schedules defined elsewhere."""

import dagster as dg

from pipeline.assets.dbt import ANOMALIES_TABLE, grpolens_dbt_assets
from pipeline.assets.health import anomalies, health_checks
from pipeline.assets.ingestion import LAKE_ASSETS
from pipeline.assets.reports import run_reports, sweep_reports
from pipeline.assets.wandb_cloud import WANDB_CLOUD_TABLES
from pipeline.jobs import refresh_job, wandb_cloud_job
from pipeline.resources import dbt_resource, grpolens_resource
from pipeline.schedules import refresh_schedule
from pipeline.sensors import FILE_SENSORS, wandb_cloud_sensor

defs = dg.Definitions(
    assets=[
        *LAKE_ASSETS.values(),
        *WANDB_CLOUD_TABLES,
        ANOMALIES_TABLE,
        grpolens_dbt_assets,
        anomalies,
        run_reports,
        sweep_reports,
    ],
    asset_checks=health_checks,
    jobs=[refresh_job, wandb_cloud_job],
    sensors=[*FILE_SENSORS.values(), wandb_cloud_sensor],
    schedules=[refresh_schedule],
    resources={"grpolens": grpolens_resource(), "dbt": dbt_resource()},
    # One process: DuckDB admits one writer, and the steps of a refresh are sequential anyway.
    executor=dg.in_process_executor,
)
