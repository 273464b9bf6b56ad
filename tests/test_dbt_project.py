"""What the incremental build assumes of the dbt project, checked on the project itself.

An incremental build tests only the changed runs of a per-run relation (the macro get_where_subquery, which reads
from the graph whether the relation documents a run_key column). That is right only if every relation with a
run_key column documents it, and if no uniqueness test on such a relation leaves run_key out of its columns (a
duplicate across a changed and an unchanged run would go unseen)."""

from __future__ import annotations

import json

import duckdb
import pytest

from pipeline import warehouse
from pipeline.settings import DBT_MANIFEST, Settings

UNIQUENESS = {"unique", "unique_combination_of_columns"}


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads(DBT_MANIFEST.read_text(encoding="utf-8"))


def _relations(manifest: dict) -> dict[str, dict]:
    return {node["name"]: node for node in manifest["nodes"].values() if node["resource_type"] in ("model", "seed")}


def test_every_relation_with_a_run_key_documents_it(tmp_path, manifest):
    settings = Settings(home=tmp_path / "home")
    warehouse.build(settings)  # an empty lake still builds every relation with its columns
    con = duckdb.connect(str(settings.duckdb_path), read_only=True)
    try:
        with_run_key = {
            name
            for (name,) in con.execute(
                "select distinct table_name from information_schema.columns where column_name = 'run_key' "
                "and table_schema = 'main'"
            ).fetchall()
        }
    finally:
        con.close()
    relations = _relations(manifest)
    assert {"history", "metrics", "int_metric__tails", "elo_gap"} <= with_run_key
    undocumented = sorted(name for name in with_run_key & set(relations) if "run_key" not in relations[name]["columns"])
    assert undocumented == [], f"document run_key in the YAML of {undocumented}"
    documented_but_absent = sorted(
        name for name, node in relations.items() if "run_key" in node["columns"] and name not in with_run_key
    )
    assert documented_but_absent == []


def test_uniqueness_tests_on_per_run_relations_include_run_key(manifest):
    relations = _relations(manifest)
    tests = [node for node in manifest["nodes"].values() if node["resource_type"] == "test"]
    checked = 0
    for test in tests:
        meta = test.get("test_metadata") or {}
        parent = (test.get("attached_node") or "").split(".")[-1]
        if meta.get("name") not in UNIQUENESS or parent not in relations:
            continue
        if "run_key" not in relations[parent]["columns"]:
            continue
        kwargs = meta.get("kwargs") or {}
        columns = kwargs.get("columns") or kwargs.get("combination_of_columns") or [kwargs.get("column_name")]
        assert "run_key" in columns, f"{test['name']} on the per-run {parent} must include run_key"
        checked += 1
    assert checked >= 10  # history, metrics, tails, the elo and training marts, runs, run_outcomes…


def test_clustered_relations_hold_only_rows_of_a_run(manifest):
    """A relation that documents run_hash is read for the changed runs without the `run_key is null` rows other
    per-run relations keep (macros/changed_runs.sql): that is right only if it has none, which its not_null test on
    run_key guarantees."""
    relations = _relations(manifest)
    clustered = sorted(name for name, node in relations.items() if "run_hash" in node["columns"])
    assert "history" in clustered
    not_null = {
        (test.get("attached_node") or "").split(".")[-1]
        for test in manifest["nodes"].values()
        if test["resource_type"] == "test"
        and (test.get("test_metadata") or {}).get("name") == "not_null"
        and test.get("column_name") == "run_key"
    }
    assert [name for name in clustered if name not in not_null] == []
