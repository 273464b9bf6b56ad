"""Where things are, from the environment (DESIGN.md's contract); one place so every entry point agrees."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DBT_PROJECT_DIR = PROJECT_ROOT / "dbt_project"
DBT_MANIFEST = DBT_PROJECT_DIR / "target" / "manifest.json"  # `dbt parse` (make setup, the tests) writes it
SQL_DIR = PROJECT_ROOT / "sql"


class ConfigError(ValueError):
    """grpolens.yaml cannot be used: the message names the file, where (line and column) and what is wrong."""


def _paths(value: str | None) -> list[Path]:
    return [Path(p).expanduser() for p in (value or "").split(os.pathsep) if p.strip()]


DEFAULT_MEMORY_LIMIT = "2GB"  # GRPOLENS_MEMORY_LIMIT; docs/scale.md has the figures behind it


def _names(value: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (value or "").split(",") if n.strip())


@dataclass(frozen=True)
class Settings:
    home: Path
    wandb_dirs: tuple[Path, ...] = ()
    trainer_logs: tuple[Path, ...] = ()
    axiom_datasets: tuple[str, ...] = ()  # empty when AXIOM_TOKEN is unset: the source is not configured
    event_files: tuple[Path, ...] = ()
    wandb_projects: tuple[str, ...] = ()  # W&B cloud: entity/project or project

    @classmethod
    def from_env(cls, home: str | os.PathLike | None = None) -> Settings:
        datasets = os.environ.get("GRPOLENS_AXIOM_DATASETS") or "diplomacy"
        return cls.from_values(
            home or os.environ.get("GRPOLENS_HOME"),
            os.environ.get("GRPOLENS_WANDB_DIRS"),
            os.environ.get("GRPOLENS_TRAINER_LOGS"),
            datasets if os.environ.get("AXIOM_TOKEN") else "",
            os.environ.get("GRPOLENS_EVENT_FILES"),
            os.environ.get("GRPOLENS_WANDB_PROJECTS"),
        )

    @classmethod
    def from_values(
        cls,
        home: str | os.PathLike | None,
        wandb_dirs: str | None,
        trainer_logs: str | None = None,
        axiom_datasets: str | None = None,
        event_files: str | None = None,
        wandb_projects: str | None = None,
    ) -> Settings:
        home_path = Path(home or "warehouse").expanduser().resolve()
        return cls(
            home=home_path,
            wandb_dirs=tuple(_paths(wandb_dirs)),
            trainer_logs=tuple(_paths(trainer_logs)),
            axiom_datasets=_names(axiom_datasets),
            event_files=tuple(_paths(event_files)),
            wandb_projects=_names(wandb_projects),
        )

    @property
    def lake(self) -> Path:
        return self.home / "lake"

    @property
    def duckdb_path(self) -> Path:
        return self.home / "grpolens.duckdb"

    @property
    def reports_dir(self) -> Path:
        return self.home / "reports"

    @property
    def config_path(self) -> Path | None:
        """`grpolens.yaml`: $GRPOLENS_CONFIG, else ./grpolens.yaml, else one in the data home."""
        candidates = [os.environ.get("GRPOLENS_CONFIG"), "grpolens.yaml", str(self.home / "grpolens.yaml")]
        return next((Path(c) for c in candidates if c and Path(c).is_file()), None)

    def load_config(self) -> dict:
        import yaml

        path = self.config_path
        if path is None:
            return {}
        try:
            with open(path, encoding="utf-8") as fh:
                data = yaml.safe_load(fh) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
            if context and start is not None and (mark is None or start.line != mark.line):
                problem += f" ({context} that starts at line {start.line + 1}, column {start.column + 1})"
            raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        if not isinstance(data, dict):
            raise ConfigError(
                f"{path}: expected a mapping at the top level (keys such as `checks:`), found a {type(data).__name__}"
            )
        return data

    @property
    def duckdb_config(self) -> dict[str, str]:
        """DuckDB's memory and threads, set on purpose rather than left at 80 % of RAM and every core: a scheduled
        refresh shares the machine. Past the limit DuckDB spills to grpolens.duckdb.tmp/ beside the database, in
        the home (sorts, joins and aggregates of a full build at 3·10⁷ values do). dbt gets the same values through
        profiles.yml."""
        return {
            "memory_limit": os.environ.get("GRPOLENS_MEMORY_LIMIT") or DEFAULT_MEMORY_LIMIT,
            "threads": os.environ.get("GRPOLENS_THREADS") or str(os.cpu_count() or 1),
        }

    def export(self) -> None:
        """dbt and child processes read GRPOLENS_HOME themselves: make it the absolute path we resolved."""
        os.environ["GRPOLENS_HOME"] = str(self.home)
        config = self.duckdb_config  # profiles.yml reads these for dbt's connection
        os.environ["GRPOLENS_MEMORY_LIMIT"], os.environ["GRPOLENS_THREADS"] = config["memory_limit"], config["threads"]
