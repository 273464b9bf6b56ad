"""The DuckDB warehouse: building it with dbt and opening it to read.

DuckDB lets one process write a database file at a time. The build holds the write lock only while dbt runs;
every read path opens read-only. A lock held by someone else becomes a clear message after a few retries, not a
traceback. The build records which lake ingests and which dbt sources it was built from, so a refresh with
nothing new skips dbt entirely.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from pipeline.settings import DBT_PROJECT_DIR, SQL_DIR, Settings

_LOCKED = re.compile(r"(could not set lock|conflicting lock)", re.I)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class WarehouseLocked(RuntimeError):
    pass


class BuildFailed(RuntimeError):
    pass


def connect_readonly(settings: Settings, retries: int = 5, wait: float = 0.5):
    """A read-only connection; waits briefly while a build holds the write lock."""
    return _connect(settings, True, retries, wait)


def connect_write(settings: Settings, retries: int = 5, wait: float = 0.5):
    """The one writing connection (held briefly: the anomalies table is replaced in one transaction)."""
    return _connect(settings, False, retries, wait)


def _connect(settings: Settings, read_only: bool, retries: int, wait: float):
    import duckdb

    if not settings.duckdb_path.exists():
        raise FileNotFoundError(f"no warehouse at {settings.duckdb_path}: run `grpolens refresh` (or `grpolens build`) first")
    for attempt in range(retries):
        try:
            return duckdb.connect(str(settings.duckdb_path), read_only=read_only)
        except duckdb.IOException as exc:
            if not _LOCKED.search(str(exc)) or attempt == retries - 1:
                raise WarehouseLocked(_lock_message(settings, exc)) from None
            time.sleep(wait * (attempt + 1))
    raise AssertionError("unreachable")


def _lock_message(settings: Settings, exc: Exception) -> str:
    holder = re.search(r"PID (\d+)", str(exc))
    who = f" (held by process {holder.group(1)})" if holder else ""
    return f"the warehouse {settings.duckdb_path} is locked by another writer{who}; try again when it finishes"


def wait_for_write_lock(settings: Settings, retries: int = 5, wait: float = 0.5) -> None:
    """dbt would fail deep inside with the lock error; find out first, and wait a little for a build to finish."""
    settings.home.mkdir(parents=True, exist_ok=True)
    if settings.duckdb_path.exists():
        _connect(settings, False, retries, wait).close()


def dbt_executable() -> str:
    beside = Path(sys.executable).with_name("dbt")
    return str(beside) if beside.exists() else "dbt"


def run_dbt(settings: Settings, command: str, *extra: str, echo: Callable[[str], None] | None = None) -> dict:
    """Run dbt in a child process against this settings' home; returns its run_results.json.

    A child process, not dbtRunner in this one: dbt-duckdb keeps its connection cached for the life of the
    process, which would hold the write lock and block this process's own read-only connections afterwards.
    """
    settings.export()
    target = settings.home / "dbt_target"
    args = [dbt_executable(), command, "--project-dir", str(DBT_PROJECT_DIR), "--profiles-dir", str(DBT_PROJECT_DIR),
            "--target-path", str(target), "--log-path", str(settings.home / "logs"), *extra]
    results = target / "run_results.json"
    results.unlink(missing_ok=True)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy())
    tail: list[str] = []
    for line in proc.stdout:
        line = _ANSI.sub("", line.rstrip())
        tail = (tail + [line])[-40:]
        if echo:
            echo(line)
    code = proc.wait()
    if not results.exists():
        text = "\n".join(tail)
        if _LOCKED.search(text):
            raise WarehouseLocked(_lock_message(settings, RuntimeError(text)))
        raise BuildFailed(f"dbt {command} could not run (exit {code}): " + next(
            (l for l in reversed(tail) if l.strip()), "no output"))
    with open(results, encoding="utf-8") as fh:
        return json.load(fh)


def build_fingerprint(settings: Settings) -> dict:
    """What a build depends on: every source's last ingest id and the dbt project's files."""
    ingests = {}
    state_dir = settings.lake / "_state"
    if state_dir.exists():
        for path in sorted(state_dir.glob("*.json")):
            with open(path, encoding="utf-8") as fh:
                ingests[path.stem] = json.load(fh).get("last_ingest_id", 0)
    digest = hashlib.sha256()
    for base in (DBT_PROJECT_DIR, SQL_DIR / "checks"):
        for path in sorted(base.rglob("*")):
            if path.is_file() and path.suffix in {".sql", ".yml", ".csv"} and "target" not in path.parts:
                digest.update(str(path.relative_to(base.parent)).encode())
                digest.update(path.read_bytes())
    config = settings.config_path
    if config is not None:
        digest.update(config.read_bytes())
    return {"ingests": ingests, "sql": digest.hexdigest()}


def _stamp_path(settings: Settings) -> Path:
    return settings.home / ".last_build.json"


def is_up_to_date(settings: Settings) -> bool:
    stamp = _stamp_path(settings)
    if not stamp.exists() or not settings.duckdb_path.exists():
        return False
    with open(stamp, encoding="utf-8") as fh:
        return json.load(fh) == build_fingerprint(settings)


def stamp_build(settings: Settings, fingerprint: dict | None = None) -> None:
    """Record what the warehouse now reflects, so a refresh with nothing new can skip dbt and the checks."""
    tmp = _stamp_path(settings).with_suffix(".tmp")
    tmp.write_text(json.dumps(fingerprint or build_fingerprint(settings)))
    os.replace(tmp, _stamp_path(settings))


def build(settings: Settings, select: str | None = None, progress: Callable[[str], None] | None = None,
          verbose: bool = False, stamp: bool = True) -> dict:
    """`dbt build` (seeds, models, data and unit tests); returns counts. Raises BuildFailed with dbt's failures."""
    from pipeline.ingest import ensure_lake

    ensure_lake(settings)
    fingerprint = build_fingerprint(settings)
    wait_for_write_lock(settings)
    started = time.perf_counter()
    if progress:
        progress("building the warehouse with dbt …")
    extra = ["--select", select] if select else []
    results = run_dbt(settings, "build", *extra, echo=progress if verbose else None)
    counts: dict[str, int] = {}
    failures = []
    for node in results.get("results", []):
        status = str(node.get("status", "unknown")).lower()
        counts[status] = counts.get(status, 0) + 1
        if status in {"error", "fail", "runtime error"}:
            name = node.get("unique_id", "?").split(".")[-1]
            message = (node.get("message") or status).strip().splitlines()[0]
            failures.append(f"{name}: {message}")
    if failures:
        text = "; ".join(failures)
        if _LOCKED.search(text):
            raise WarehouseLocked(_lock_message(settings, RuntimeError(text)))
        raise BuildFailed(f"dbt build failed: {text}")
    if stamp and not select:
        stamp_build(settings, fingerprint)
    counts["seconds"] = round(time.perf_counter() - started, 2)
    if progress:
        progress(f"dbt build: {_describe(counts)}")
    return counts


def _describe(counts: dict) -> str:
    return ", ".join(f"{value} {key}" for key, value in counts.items() if key != "seconds") + f" in {counts.get('seconds')}s"
