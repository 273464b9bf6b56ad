"""The Dagster code location: assembles assets, resources, jobs, sensors and schedules defined elsewhere."""

import dagster as dg

from pipeline.assets.dbt import grpolens_dbt_assets
from pipeline.assets.health import anomalies, health_checks
from pipeline.assets.ingestion import LAKE_ASSETS
from pipeline.jobs import refresh_job
from pipeline.resources import dbt_resource, grpolens_resource
from pipeline.schedules import refresh_schedule
from pipeline.sensors import FILE_SENSORS

defs = dg.Definitions(
    assets=[*LAKE_ASSETS.values(), grpolens_dbt_assets, anomalies],
    asset_checks=health_checks,
    jobs=[refresh_job],
    sensors=list(FILE_SENSORS.values()),
    schedules=[refresh_schedule],
    resources={"grpolens": grpolens_resource(), "dbt": dbt_resource()},
    # One process: DuckDB admits one writer, and the steps of a refresh are sequential anyway.
    executor=dg.in_process_executor,
)
