"""Dagster resources: where grpolens keeps its data and where to look for runs, from the environment."""

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import dagster as dg
from dagster_dbt import DbtCliResource

from pipeline.dbt_project import dbt_project
from pipeline.settings import Settings


class GrpolensResource(dg.ConfigurableResource):
    """The data home (lake, warehouse) and the folders each source scans (os.pathsep-separated)."""

    home: str = "warehouse"
    wandb_dirs: str = ""
    trainer_logs: str = ""
    axiom_datasets: str = ""  # comma-separated; set only when AXIOM_TOKEN is (the client reads the token itself)
    event_files: str = ""
    wandb_projects: str = ""  # comma-separated entity/project or project (the client reads WANDB_API_KEY itself)

    def settings(self) -> Settings:
        return Settings.from_values(
            self.home, self.wandb_dirs, self.trainer_logs, self.axiom_datasets, self.event_files, self.wandb_projects
        )


def _env(name: str, default: str) -> str | dg.EnvVar:
    """EnvVar when the variable is set (the UI then shows where a value came from), else the default."""
    return dg.EnvVar(name) if os.environ.get(name) else default


def grpolens_resource() -> GrpolensResource:
    datasets = (os.environ.get("GRPOLENS_AXIOM_DATASETS") or "diplomacy") if os.environ.get("AXIOM_TOKEN") else ""
    return GrpolensResource(
        home=_env("GRPOLENS_HOME", "warehouse"),
        wandb_dirs=_env("GRPOLENS_WANDB_DIRS", ""),
        trainer_logs=_env("GRPOLENS_TRAINER_LOGS", ""),
        axiom_datasets=datasets,
        event_files=_env("GRPOLENS_EVENT_FILES", ""),
        wandb_projects=_env("GRPOLENS_WANDB_PROJECTS", ""),
    )


class DbtResource(DbtCliResource):
    """dagster-dbt's resource without the dbt adapter it sets up in this process before each invocation (it imports
    dbt and loads the project's macros: 2.2 s of a refresh). That adapter serves fetch_row_counts() and
    fetch_column_metadata(), which the dbt asset does not call (pipeline/assets/dbt.py says why); dagster-dbt
    carries on without one, as it does when setting one up fails."""

    def _initialize_dbt_core_adapter(self, args: Sequence[str]) -> None:  # type: ignore[override]  # None: no adapter
        return None


def dbt_resource() -> DbtResource:
    # The dbt installed beside this interpreter, so the UI works without the venv on PATH: grpolens-dbt, which
    # answers dagster-dbt's `--version` without importing dbt and exits without the teardown (pipeline/dbt_process.py).
    beside = next((p for p in (Path(sys.executable).with_name(n) for n in ("grpolens-dbt", "dbt")) if p.exists()), None)
    return DbtResource(
        project_dir=dbt_project,  # type: ignore[arg-type]  # a DbtProject, as DbtCliResource.__init__ takes
        profiles_dir=str(dbt_project.project_dir),
        dbt_executable=str(beside) if beside else "dbt",
    )


# Written once into a new DAGSTER_HOME: without a dagster.yaml Dagster warns on every start. Telemetry is off and so
# is the UI's "join the community" sign-up dialog: a local diagnosis tool should neither phone home nor ask for an
# email before the first click.
DAGSTER_YAML = """\
# The Dagster instance grpolens uses (`grpolens demo` records its run here; `grpolens ui` shows it).
# Storage (runs, event logs, schedules) defaults to this folder.
telemetry:
  enabled: false
nux:
  enabled: false
"""


def dagster_home(settings: Settings) -> Path:
    """$DAGSTER_HOME, else <GRPOLENS_HOME>/dagster: one instance, so what `grpolens demo` materializes is what
    `grpolens ui` shows. Creates the folder and its dagster.yaml when missing (an existing one is left alone)."""
    home = Path(os.environ.get("DAGSTER_HOME") or settings.home / "dagster").expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML, encoding="utf-8")
    return home
