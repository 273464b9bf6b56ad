"""The Dagster code location loads, materializes the ingest and dbt assets, and its sensor sees new files."""

from __future__ import annotations

import dagster as dg

from pipeline import warehouse
from pipeline.assets.dbt import grpolens_dbt_assets
from pipeline.assets.health import anomalies
from pipeline.assets.ingestion import LAKE_ASSETS
from pipeline.assets.reports import run_reports
from pipeline.checks import load_checks
from pipeline.definitions import defs
from pipeline.resources import GrpolensResource, dbt_resource
from pipeline.sensors import FILE_SENSORS
from pipeline.settings import Settings
from pipeline.sources import wandb_offline
from tests.conftest import LENGTH_COLLAPSE


def test_definitions_load_with_assets_checks_sensor_and_schedule():
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert {"lake/wandb_offline_history", "lake/wandb_offline_runs", "history", "metrics", "runs",
            "elo_ratings", "elo_gap", "elo_reference_trends", "learning_dynamics", "anomalies"} <= keys
    # dbt's data tests became asset checks on the models they test
    checks = {key.asset_key.to_user_string() for key in graph.asset_check_keys}
    assert {"history", "runs", "metrics", "elo_gap"} <= checks
    assert graph.get(dg.AssetKey("run_reports")).parent_keys == {dg.AssetKey("anomalies")}
    # and one asset check per training-health rule, on the table the rule reads
    rules = {(r.name, r.reads[0]) for r in load_checks()}
    assert rules <= {(key.name, key.asset_key.to_user_string()) for key in graph.asset_check_keys}
    # the dbt models depend on the ingest asset, so one job runs them in order
    assert dg.AssetKey(["lake", "wandb_offline_history"]) in graph.get(dg.AssetKey("stg_lake__history")).parent_keys
    assert defs.resolve_sensor_def("wandb_offline_files_sensor")
    assert defs.resolve_schedule_def("hourly_refresh").cron_schedule == "0 * * * *"


def test_materialize_everything_on_the_real_run(tmp_path):
    home = tmp_path / "home"
    resource = GrpolensResource(home=str(home), wandb_dirs=str(LENGTH_COLLAPSE))
    result = dg.materialize([LAKE_ASSETS["wandb_offline"], grpolens_dbt_assets, anomalies, run_reports],
                            resources={"grpolens": resource, "dbt": dbt_resource()},
                            instance=dg.DagsterInstance.ephemeral())
    assert result.success
    materialized = {m.asset_key.to_user_string() for m in result.get_asset_materialization_events()
                    for m in [m.event_specific_data.materialization]}
    assert {"lake/wandb_offline_history", "history", "metrics", "learning_dynamics", "elo_gap",
            "run_reports"} <= materialized
    # the reports asset shows each run's verdict, and the main plot of a run that is unhealthy
    (reports,) = [m.event_specific_data.materialization.metadata for m in result.get_asset_materialization_events()
                  if m.event_specific_data.materialization.asset_key == dg.AssetKey("run_reports")]
    assert "| qwen2_3b_opd | unhealthy | response_length_collapse | 36 |" in reports["verdicts"].value
    assert reports["plot qwen2_3b_opd"].value.count("](data:image/png;base64,") == 1
    assert (home / "reports" / "qwen2_3b_opd" / "report.md").is_file()
    evaluations = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert evaluations and all(e.passed for e in evaluations)
    con = warehouse.connect_readonly(Settings(home=home))
    try:
        assert con.sql("select count(*) from history").fetchone()[0] == 5650
        assert con.sql("select count(distinct metric) from metrics").fetchone()[0] >= 15
    finally:
        con.close()


def test_sensor_requests_a_run_for_new_or_grown_files_only(tmp_path):
    home = tmp_path / "home"
    resource = GrpolensResource(home=str(home), wandb_dirs=str(LENGTH_COLLAPSE))
    first = FILE_SENSORS["wandb_offline"](dg.build_sensor_context(resources={"grpolens": resource}))
    assert isinstance(first, dg.RunRequest)
    wandb_offline.ingest(Settings(home=home).lake, [LENGTH_COLLAPSE])
    after = FILE_SENSORS["wandb_offline"](dg.build_sensor_context(resources={"grpolens": resource}))
    assert isinstance(after, dg.SkipReason) and "no new" in after.skip_message
