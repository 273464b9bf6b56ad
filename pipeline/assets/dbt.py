"""The dbt models as Dagster assets; dbt's data and unit tests appear as asset checks."""


import dagster as dg
from dagster_dbt import DbtCliResource, dbt_assets

from pipeline import warehouse
from pipeline.ingest import ensure_lake
from pipeline.dbt_project import dbt_project
from pipeline.resources import GrpolensResource


@dbt_assets(manifest=dbt_project.manifest_path, project=dbt_project)
def grpolens_dbt_assets(context: dg.AssetExecutionContext, dbt: DbtCliResource, grpolens: GrpolensResource):
    settings = grpolens.settings()
    settings.export()  # profiles.yml and the sources read GRPOLENS_HOME
    ensure_lake(settings)  # a source never ingested still has its (empty) lake folders for dbt to read
    warehouse.wait_for_write_lock(settings)
    yield from dbt.cli(["build"], context=context).stream()
