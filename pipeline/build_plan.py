"""What a build must redo, so that a refresh costs what changed rather than what exists.

The per-run models (history, metrics and the marts derived run by run) are dbt incremental models that redo only
the runs in ``main._build_changed_runs``. A run has changed when a lake part holding its rows appeared, vanished or
was rewritten (size or mtime) since the last complete build. The parts the last complete build saw are recorded,
with the runs each held, in ``<home>/.built_parts.json``; a build about to run writes what it will have seen to a
pending file, and only a build that finished every model makes it the record. A build killed anywhere in between
leaves the record as it was, so the next one redoes the same runs (and what arrived since): each model replaces a
run's rows in one transaction, so redoing a run twice is the same as once.

A changed run that only gained parts (none of those holding it vanished or was rewritten) is a grown run: the plan
names, per source, the first ingest of its new parts (``main._build_grown_runs``), so that `history` can add the
rows of those ingests to what it holds instead of rewriting the run, when they turn out to be new (dbt's
macros/appended_runs.sql decides, from the data).

The other lake tables (events, ingest issues) are listed the same way, without runs. An incremental build runs
only the dbt nodes downstream of the lake tables that changed (``selection``): when only trainer logs grew, the
event marts and their tests are not touched, and when nothing changed dbt is not started at all.

A build is full (every model from the whole lake) when there is no record, when the dbt project or grpolens.yaml's
metric aliases changed (pipeline.aliases: every run's metrics change), when the warehouse lacks any of the
project's relations, or when asked (`grpolens build --full-refresh`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.settings import DBT_MANIFEST, DBT_PROJECT_DIR, Settings

RECORD = ".built_parts.json"
PENDING = ".built_parts.pending.json"
# The lake tables whose rows belong to runs; events and ingest issues feed full-rebuild (small) marts.
RUN_TABLES = ("history", "runs")
OTHER_TABLES = ("events", "ingest_issues")
CHANGED_RUNS_TABLE = "_build_changed_runs"
GROWN_RUNS_TABLE = "_build_grown_runs"
# A run's cluster key, as the dbt macro run_hash computes it: the SQL function, applied to a run_key.
RUN_HASH = "md5_number_upper"
INCREMENTAL_TABLES = ("history", "metrics")  # when the project's manifest cannot be read: the tables that must exist


@dataclass
class BuildPlan:
    full: bool
    reason: str
    changed_runs: list[str]
    parts: dict[str, list]  # lake path -> [size, mtime_ns, run_keys]: the lake this build sees
    dbt_digest: str
    changed_sources: list[str] = field(default_factory=list)  # dbt sources (lake.<source>_<table>) with changes
    # [run_key, lake source, first ingest id of its new parts] for each changed run that only gained parts
    grown_runs: list[list] = field(default_factory=list)

    def selection(self) -> list[str] | None:
        """dbt's --select for this build: None for everything (a full build), else the nodes downstream of the
        lake tables that changed (empty: nothing to do)."""
        return None if self.full else [f"source:lake.{name}+" for name in self.changed_sources]

    def describe(self) -> str:
        if self.full:
            return f"full build ({self.reason})"
        return f"incremental build: {len(self.changed_runs)} run(s) changed ({self.reason})"


def files_digest(base: Path) -> str:
    """The SQL, YAML and CSV files under ``base`` (names and bytes), leaving out dbt's target folder and hidden
    files: dbt writes its user id to ``.user.yml`` beside profiles.yml when something runs it with usage statistics
    on, which is no change of the project."""
    digest = hashlib.sha256()
    for path in sorted(base.rglob("*")):
        inside = path.relative_to(base).parts
        if (
            path.is_file()
            and path.suffix in {".sql", ".yml", ".csv"}
            and "target" not in inside
            and not any(part.startswith(".") for part in inside)
        ):
            digest.update(str(path.relative_to(base)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def dbt_digest() -> str:
    """The dbt project's models, macros, seeds and settings: when they change, every model is rebuilt."""
    return files_digest(DBT_PROJECT_DIR)


def build_digest(user_aliases: dict[str, str]) -> str:
    """What every model's rows depend on besides the lake: the dbt project and the metric aliases of grpolens.yaml."""
    from pipeline import aliases

    return dbt_digest() if not user_aliases else f"{dbt_digest()}+{aliases.digest(user_aliases)}"


def lake_parts(settings: Settings) -> dict[str, tuple[int, int]]:
    """Every committed part of the lake tables, with its size and mtime (ns), by its path in the lake
    (``history/source=…/part-….parquet``): a home copied, moved or reached through a symlink is the same lake."""
    found = {}
    for table in RUN_TABLES + OTHER_TABLES:
        for path in (settings.lake / table).glob("source=*/part-*.parquet"):
            try:
                stat = path.stat()
            except FileNotFoundError:  # removed while listing
                continue
            found[path.relative_to(settings.lake).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return found


def _runs_in(lake: Path, parts: list[str]) -> tuple[dict[str, list[str]], dict[tuple[str, str], int]]:
    """The run_keys each part holds, and the first ingest id of each (part, run) (reads the run_key and ingest_id
    columns of new parts only)."""
    import duckdb

    held: dict[str, list[str]] = {part: [] for part in parts}
    first_ingest: dict[tuple[str, str], int] = {}
    if not parts:
        return held, first_ingest
    of_file = {str(lake / part): part for part in parts}
    con = duckdb.connect()
    try:
        rows = con.execute(
            "select filename, run_key, min(ingest_id) from read_parquet($paths, filename = true, "
            "union_by_name = true, hive_partitioning = false) group by all",
            {"paths": list(of_file)},
        ).fetchall()
    finally:
        con.close()
    for filename, run_key, ingest_id in rows:
        if run_key is not None:
            held[of_file[filename]].append(run_key)
            first_ingest[(of_file[filename], run_key)] = ingest_id
    return {part: sorted(keys) for part, keys in held.items()}, first_ingest


def load_record(settings: Settings, name: str = RECORD) -> dict | None:
    try:
        with open(settings.home / name, encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError):  # none yet, or cut short: a full build rewrites it
        return None
    if not isinstance(record, dict) or not isinstance(record.get("parts"), dict):
        return None
    # a record written before parts were named by their lake path (<home>/lake/<table>/source=…/part-…)
    record["parts"] = {_in_lake(path): entry for path, entry in record["parts"].items()}
    return record


def _in_lake(path: str) -> str:
    return "/".join(Path(path).parts[-3:]) if os.path.isabs(path) else path


def _relations() -> tuple[str, ...]:
    """Every model's and seed's relation in the project (its parsed manifest), else the incremental tables."""
    try:
        nodes = json.loads(DBT_MANIFEST.read_text(encoding="utf-8"))["nodes"]
        names = sorted(
            n.get("alias") or n["name"] for n in nodes.values() if n.get("resource_type") in ("model", "seed")
        )
    except (OSError, ValueError, KeyError, AttributeError):  # not parsed yet, or damaged
        return INCREMENTAL_TABLES
    return tuple(names) or INCREMENTAL_TABLES


def _missing_tables(settings: Settings) -> list[str]:
    """The project's relations the warehouse lacks (dropped by hand, or a build that never finished): an
    incremental build builds only what changed and would leave them missing, so the build is full."""
    from pipeline import warehouse

    expected = _relations()
    if not settings.duckdb_path.exists():
        return list(expected)
    con = warehouse.connect_readonly(settings)
    try:
        have = {
            name
            for (name,) in con.execute(
                "select table_name from information_schema.tables where table_schema = 'main'"
            ).fetchall()
        }
    finally:
        con.close()
    return [table for table in expected if table not in have]


def plan(settings: Settings, full_refresh: bool = False, user_aliases: dict[str, str] | None = None) -> BuildPlan:
    """Compare the lake with the last complete build's record."""
    record = load_record(settings)
    digest = build_digest(user_aliases or {})
    current = lake_parts(settings)
    known = (record or {}).get("parts", {})
    unchanged = {
        path: known[path]
        for path, (size, mtime) in current.items()
        if path in known and known[path][:2] == [size, mtime]
    }
    new = sorted(set(current) - set(unchanged))
    held, first_ingest = _runs_in(settings.lake, [path for path in new if _table_of(path) in RUN_TABLES])
    read: dict[str, list[str]] = {path: [] for path in new} | held
    parts = {**unchanged, **{path: [*current[path], read[path]] for path in read}}
    reason = (
        "asked for (--full-refresh)"
        if full_refresh
        else "no record of a complete build"
        if record is None
        else (
            "the dbt project changed"
            if str(record.get("dbt_digest")).split("+")[0] != dbt_digest()
            else "grpolens.yaml's metric aliases changed"
        )
        if record.get("dbt_digest") != digest
        else ""
    )
    if not reason:
        missing = _missing_tables(settings)
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        reason = f"the warehouse has no {', '.join(missing[:3])}{more} table" if missing else ""
    if reason:
        every = sorted({run for entry in parts.values() for run in entry[2]})
        return BuildPlan(True, reason, every, parts, digest)
    gone = set(known) - set(current)
    rewritten = [path for path in read if path in known]
    sources = sorted({_source_of(path) for path in (*read, *gone)})
    changed = {run for path in read for run in parts[path][2]}
    redone = {run for path in (*gone, *rewritten) for run in known[path][2]}
    bits = [f"{len(read) - len(rewritten)} new part(s)"]
    bits += [f"{len(rewritten)} rewritten"] if rewritten else []
    bits += [f"{len(gone)} vanished"] if gone else []
    grown = _grown_runs(first_ingest, changed - redone)
    return BuildPlan(False, ", ".join(bits), sorted(changed | redone), parts, digest, sources, grown)


def _grown_runs(first_ingest: dict[tuple[str, str], int], runs: set[str]) -> list[list]:
    """[run_key, lake source, first ingest id] of ``runs`` (which only gained parts) from their new parts, the
    smallest ingest id over a source's new parts of the run, in the runs and history tables alike."""
    first: dict[tuple[str, str], int] = {}
    for (path, run), ingest_id in first_ingest.items():
        if run in runs and ingest_id is not None:
            key = (run, _lake_source_of(path))
            first[key] = min(first.get(key, ingest_id), ingest_id)
    return [[run, source, ingest_id] for (run, source), ingest_id in sorted(first.items())]


def _table_of(path: str) -> str:
    """<table>/source=<source>/part-….parquet → <table>"""
    return Path(path).parent.parent.name


def _lake_source_of(path: str) -> str:
    """The ingest source that wrote a part (the rows' `lake_source`): history/source=trainer_log/… → trainer_log"""
    return Path(path).parent.name.removeprefix("source=")


def _source_of(path: str) -> str:
    """The dbt source table a part belongs to: history/source=trainer_log/… → trainer_log_history"""
    return f"{_lake_source_of(path)}_{_table_of(path)}"


def prepare(settings: Settings, full_refresh: bool = False) -> BuildPlan:
    """Plan the build, write the changed runs where the models read them, and keep the plan pending."""
    from pipeline import aliases, warehouse

    user_aliases = aliases.load(settings)
    build = plan(settings, full_refresh, user_aliases)
    settings.home.mkdir(parents=True, exist_ok=True)
    write_json(settings.home / PENDING, asdict(build))
    con = warehouse.connect_write(settings) if settings.duckdb_path.exists() else _create(settings)
    try:
        con.execute("begin")  # all or none
        aliases.write(con, user_aliases)
        write_changed_runs(con, f"main.{CHANGED_RUNS_TABLE}", build.changed_runs)
        con.execute(
            f"create or replace table main.{GROWN_RUNS_TABLE} as select g[1] as run_key, g[2] as lake_source, "
            "g[3]::bigint as from_ingest from (select unnest($grown::varchar[][]) as g)",
            {"grown": [[str(v) for v in entry] for entry in build.grown_runs]},
        )
        con.execute("commit")
    finally:
        con.close()
    return build


def write_changed_runs(con, table: str, runs: list[str], temporary: bool = False) -> None:
    """(Re)create ``table`` holding ``runs`` with their run_hash, as the dbt models and the checks read them."""
    kind = "temp table" if temporary else "table"
    con.execute(
        f"create or replace {kind} {table} as select run_key, {RUN_HASH}(run_key) as run_hash "
        "from (select unnest($runs::varchar[]) as run_key)",
        {"runs": runs},
    )


def _create(settings: Settings):
    import duckdb

    return duckdb.connect(str(settings.duckdb_path), config={**settings.duckdb_config})


def commit(settings: Settings) -> None:
    """Every model finished: what the pending plan saw is now what the warehouse reflects."""
    pending = settings.home / PENDING
    if pending.exists():
        os.replace(pending, settings.home / RECORD)


def pending_plan(settings: Settings) -> BuildPlan | None:
    data = load_record(settings, PENDING)
    return BuildPlan(**data) if data else None


def run_versions(record: dict | None) -> dict[str, str]:
    """A short digest per run of the parts holding its rows: it changes exactly when the run must be redone."""
    parts_of: dict[str, list] = {}
    for path, (size, mtime, runs) in sorted((record or {}).get("parts", {}).items()):
        for run in runs:
            parts_of.setdefault(run, []).append((path, size, mtime))
    return {run: hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16] for run, parts in parts_of.items()}


def other_parts_version(record: dict | None) -> str:
    """A short digest of the parts of the lake tables that hold no runs (events, ingest issues): it changes
    exactly when the event marts must be rebuilt and the rules over them run again."""
    parts = sorted(
        (path, size, mtime)
        for path, (size, mtime, _runs) in (record or {}).get("parts", {}).items()
        if _table_of(path) in OTHER_TABLES
    )
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def write_json(path: Path, data: dict) -> None:
    """Replace ``path`` whole: a reader sees the old or the new file, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)
