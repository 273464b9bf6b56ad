"""Shared fixtures. dbt, DuckDB, Dagster and wandb all run for real; nothing of ours is mocked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pipeline.settings import DBT_PROJECT_DIR, PROJECT_ROOT, Settings

# The project's development runs (public GRPO runs with their SOURCE and license notes), vendored so a clone with
# nothing beside it passes; the labelled evaluation set is tests/fixtures/real/.
REAL_RUNS = PROJECT_ROOT / "tests" / "fixtures" / "real-runs"
LENGTH_COLLAPSE = REAL_RUNS / "wandb-binary-verl-opd-qwen2-3b-lengthcollapse"
BIN = Path(sys.executable).parent


# The developer's own data home, W&B folders and keys. `make test` exports the demo's folders (the Makefile's
# defaults), which `make demo` has filled: no test may read them, module-scoped fixtures included.
USER_ENV = (
    "GRPOLENS_HOME",
    "GRPOLENS_WANDB_DIRS",
    "GRPOLENS_TRAINER_LOGS",
    "GRPOLENS_CONFIG",
    "WANDB_ENTITY",
    "WANDB_API_KEY",
    "WANDB_BASE_URL",
    "AXIOM_TOKEN",
    "AXIOM_ORG_ID",
    "AXIOM_URL",
    "GRPOLENS_AXIOM_DATASETS",
    "GRPOLENS_EVENT_FILES",
    "GRPOLENS_WANDB_PROJECTS",
    "GRPOLENS_WANDB_CONCURRENCY",
)


def pytest_configure(config):
    """The session runs without the user's variables. Dagster builds dbt assets from the manifest when
    pipeline.definitions is imported, which happens while tests are collected: parse the project first, the way
    `make setup` does, so the manifest is never stale."""
    for name in USER_ENV:
        os.environ.pop(name, None)
    if hasattr(config, "workerinput"):  # an xdist worker: the controller parsed before starting it
        return
    with tempfile.TemporaryDirectory(prefix="grpolens-parse-") as home:
        subprocess.run(
            [str(BIN / "dbt"), "parse", "--quiet", "--profiles-dir", "."],
            cwd=DBT_PROJECT_DIR,
            env={**os.environ, "GRPOLENS_HOME": home},
            check=True,
        )


def pytest_collection_modifyitems(items):
    """Files holding a test marked slow go first: xdist hands out whole files in this order, so the long ones start
    early and the short ones fill in around them instead of one worker finishing a long file alone at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: each file keeps its own order


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    """Each test starts without the user's variables (as the session did), whatever an earlier test set."""
    for name in USER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))


@pytest.fixture
def home(tmp_path) -> Settings:
    return Settings(home=tmp_path / "home")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """A metric log as a trainer appends it: one JSON object per line (its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def grpolens(*args: str, env: dict | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """Run the installed `grpolens` command as a user would."""
    proc = subprocess.run(
        [str(BIN / "grpolens"), *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=600
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"grpolens {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


PLANTED = "planted in the table"


def plant_flag(settings: Settings, run_name: str) -> str:
    """Add to `anomalies` a `loss_nonfinite` flag on ``run_name`` that no rule raises there: a check or report that
    shows it read the table rather than running the rules. Returns the run's run_key."""
    from pipeline import warehouse

    con = warehouse.connect_write(settings)
    try:
        (run_key,) = con.execute("select run_key from runs where name = $name", {"name": run_name}).fetchone()
        con.execute(
            "insert into anomalies (run_key, check_name, severity, step, metric, value, threshold, message) "
            "values ($run, 'loss_nonfinite', 'error', 7, 'loss', 'nan'::double, 0, $planted)",
            {"run": run_key, "planted": PLANTED},
        )
    finally:
        con.close()
    return run_key
