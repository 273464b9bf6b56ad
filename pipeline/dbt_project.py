"""The dbt project as Dagster sees it. The manifest is built by `make setup` (dbt parse) and by the tests."""

from dagster_dbt import DbtProject

from pipeline.settings import DBT_PROJECT_DIR

dbt_project = DbtProject(project_dir=DBT_PROJECT_DIR, profiles_dir=DBT_PROJECT_DIR)
dbt_project.prepare_if_dev()
