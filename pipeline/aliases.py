"""Metric aliases of your own, from grpolens.yaml: the keys a trainer nobody here wrote logs, mapped onto the
canonical vocabulary so every check, mart and report reads them.

    aliases:
      score: reward_mean        # the logged key (as the lake keeps it) -> a canonical metric
      pg: loss

The seed ``dbt_project/seeds/metric_aliases.csv`` holds the vocabulary and the aliases of the trainers grpolens
knows; a key named here replaces the seed's mapping of that key, and wins over the seed's other keys for its metric
in a run that logs both. A build writes them into the warehouse (``main._user_metric_aliases``, which the
``metrics`` model reads) and rebuilds every run when they change, as when the dbt project changes.
"""

from __future__ import annotations

import csv
import hashlib
import json
from functools import cache

from pipeline.settings import DBT_PROJECT_DIR, ConfigError, Settings

SEED = DBT_PROJECT_DIR / "seeds" / "metric_aliases.csv"
TABLE = "main._user_metric_aliases"


@cache
def canonical_metrics() -> frozenset[str]:
    """The metrics the seed defines: an alias must map onto one of them."""
    with open(SEED, encoding="utf-8", newline="") as fh:
        return frozenset(row["metric"] for row in csv.DictReader(fh))


def load(settings: Settings) -> dict[str, str]:
    """grpolens.yaml's `aliases`, checked: logged key -> canonical metric."""
    section = settings.load_config().get("aliases") or {}
    where = settings.config_path or "grpolens.yaml"
    if not isinstance(section, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in section.items()):
        raise ConfigError(f"{where}: `aliases` must map logged keys to canonical metrics (e.g. `score: reward_mean`)")
    unknown = sorted(metric for metric in set(section.values()) if metric not in canonical_metrics())
    if unknown:
        raise ConfigError(
            f"{where}: `aliases` maps onto unknown metrics: {', '.join(unknown)} (known: "
            f"{', '.join(sorted(canonical_metrics()))})"
        )
    return dict(sorted(section.items()))


def digest(aliases: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(aliases, sort_keys=True).encode()).hexdigest()[:16]


def write(con, aliases: dict[str, str]) -> None:
    """(Re)create the table the `metrics` model reads, on a connection inside the build's preparation."""
    con.execute(
        f"create or replace table {TABLE} as select k as source_key, v as metric "
        "from (select unnest($keys::varchar[]) as k, unnest($metrics::varchar[]) as v)",
        {"keys": list(aliases), "metrics": list(aliases.values())},
    )


def known_sql(con) -> str:
    """A query of every alias the warehouse maps (source_key, metric): grpolens.yaml's, then the seed's other keys
    (a warehouse built before grpolens.yaml's aliases existed has the seed's alone)."""
    seed = "select source_key, metric from metric_aliases"
    has_table = con.execute(
        "select count(*) from duckdb_tables() where database_name = current_database() and schema_name = 'main' "
        "and table_name = $t",
        {"t": TABLE.split(".")[-1]},
    ).fetchone()[0]
    if not has_table:
        return seed
    others = f"{seed} where source_key not in (select source_key from {TABLE})"
    return f"select source_key, metric from {TABLE} union all ({others})"
