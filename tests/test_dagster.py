"""The Dagster code location: groups that show the architecture, descriptions from the dbt YAML (never SQL), a
refresh (the same selection as the UI's "Materialize all") that needs no partition and materializes everything
with row counts, column types and flag tables by run name, and a sensor that sees new files."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import dagster as dg
import pytest

from pipeline import warehouse
from pipeline.checks import load_checks
from pipeline.definitions import defs
from pipeline.ingest import SOURCES, source_module
from pipeline.resources import GrpolensResource, dbt_resource
from pipeline.sensors import FILE_SENSORS
from pipeline.settings import Settings
from pipeline.sources import wandb_offline
from tests.conftest import LENGTH_COLLAPSE, PLANTED, grpolens, plant_flag

# The same real run as its verl console log: a second run with the same collapse, so a check flags two runs.
CONSOLE_LOG = LENGTH_COLLAPSE / "run-20251130_144822-gjvwlq13" / "files" / "output.log"
GROUPS = {"lake", "staging", "core", "elo", "training", "pipeline", "health", "reports"}


def test_definitions_load_with_assets_checks_sensor_and_schedule():
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert {
        "lake/wandb_offline_history",
        "lake/wandb_offline_runs",
        "history",
        "metrics",
        "runs",
        "elo_ratings",
        "elo_gap",
        "elo_reference_trends",
        "learning_dynamics",
        "anomalies",
    } <= keys
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


def test_groups_follow_the_dbt_folders_and_the_pipeline_stages():
    graph = defs.resolve_asset_graph()
    group = {key.to_user_string(): graph.get(key).group_name for key in graph.get_all_asset_keys()}
    assert set(group.values()) == GROUPS  # nothing left in `default`
    assert {
        name: group[name]
        for name in (
            "lake/wandb_offline_history",
            "lake/wandb_cloud_history",
            "stg_lake__history",
            "stg_events__rollouts",
            "metric_aliases",
            "history",
            "runs",
            "metrics",
            "int_metric__tails",
            "run_outcomes",
            "int_elo__observations",
            "elo_gap",
            "learning_dynamics",
            "power_law_fit",
            "health",
            "rollout_timing",
            "anomalies",
            "checks/anomalies",
            "run_reports",
            "sweep_reports",
        )
    } == {
        "lake/wandb_offline_history": "lake",
        "lake/wandb_cloud_history": "lake",
        "stg_lake__history": "staging",
        "stg_events__rollouts": "staging",
        "metric_aliases": "staging",
        "history": "core",
        "runs": "core",
        "metrics": "core",
        "int_metric__tails": "core",
        "run_outcomes": "core",
        "int_elo__observations": "elo",
        "elo_gap": "elo",
        "learning_dynamics": "training",
        "power_law_fit": "training",
        "health": "pipeline",
        "rollout_timing": "pipeline",
        "anomalies": "health",
        "checks/anomalies": "health",
        "run_reports": "reports",
        "sweep_reports": "reports",
    }


def test_dbt_assets_are_described_by_their_yaml_never_their_sql():
    graph = defs.resolve_asset_graph()
    dbt_keys = [key for key in graph.get_all_asset_keys() if "dbt" in graph.get(key).kinds]
    assert len(dbt_keys) > 30
    for key in dbt_keys:
        description = graph.get(key).description or ""
        assert description and not description.startswith("dbt "), f"{key.to_user_string()} has no YAML description"
        assert not re.search(r"Raw SQL|```sql|\bselect\b.*\bfrom\b|\{\{\s*ref\(", description, re.I | re.S), (
            key.to_user_string(),
            description,
        )
    assert graph.get(dg.AssetKey("elo_gap")).description.startswith("The one definition of the Elo gap")
    # the YAML's column docs are the columns' descriptions
    columns = {
        c.name: c.description for c in graph.get(dg.AssetKey("history")).metadata["dagster/column_schema"].columns
    }
    assert columns["value_int"] == "Integers exactly (a double cannot hold 2**53 + 1)."


def test_materialize_all_needs_no_partition_and_nothing_upstream_of_it_is_left_unmaterialized():
    graph = defs.resolve_asset_graph()
    materializable = {key for key in graph.get_all_asset_keys() if graph.get(key).is_materializable}
    # the UI's "Materialize all" takes every materializable asset: one partitioned among them blocks it
    assert not [key for key in materializable if graph.get(key).partitions_def is not None]
    refresh = defs.resolve_job_def("refresh")
    assert set(refresh.asset_layer.executable_asset_keys) == materializable
    # W&B cloud runs: declared lake tables, one partition per run, filled by their own partitioned job
    cloud = dg.AssetKey(["lake", "wandb_cloud_history"])
    assert graph.get(cloud).partitions_def is not None and not graph.get(cloud).is_materializable
    assert defs.resolve_job_def("wandb_cloud_ingest").partitions_def == graph.get(cloud).partitions_def
    # what the refresh reads from outside itself can never be "not materialized yet" (the UI's "Are you sure?")
    upstream = {parent for key in materializable for parent in graph.get(key).parent_keys} - materializable
    assert cloud in upstream and not [key for key in upstream if graph.get(key).is_materializable]


@pytest.fixture(scope="module")
def refreshed(tmp_path_factory):
    """The refresh job on two real runs (the collapse as its W&B file and as its console log), as the UI runs it."""
    home = tmp_path_factory.mktemp("refresh") / "home"
    resource = GrpolensResource(home=str(home), wandb_dirs=str(LENGTH_COLLAPSE), trainer_logs=str(CONSOLE_LOG))
    result = defs.resolve_job_def("refresh").execute_in_process(
        resources={"grpolens": resource, "dbt": dbt_resource()}, instance=dg.DagsterInstance.ephemeral()
    )
    assert result.success
    materializations = {
        e.event_specific_data.materialization.asset_key.to_user_string(): e.event_specific_data.materialization.metadata
        for e in result.get_asset_materialization_events()
    }
    evaluations = {
        e.event_specific_data.asset_check_key.name: e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    return home, materializations, evaluations


@pytest.mark.slow  # the refresh job over the demo, ~15 s (the fixture)
def test_refresh_materializes_everything_and_reports(refreshed):
    home, materialized, evaluations = refreshed
    assert {
        "lake/wandb_offline_history",
        "lake/trainer_log_history",
        "history",
        "metrics",
        "learning_dynamics",
        "elo_gap",
        "anomalies",
        "run_reports",
        "sweep_reports",
    } <= set(materialized)
    # the reports asset shows each run's verdict, and the main plot of a run that is unhealthy
    reports = materialized["run_reports"]
    assert "| qwen2_3b_opd | unhealthy | response_length_collapse | 36 |" in reports["verdicts"].value
    assert reports["plot qwen2_3b_opd"].value.count("](data:image/png;base64,") == 1
    assert (home / "reports" / "qwen2_3b_opd" / "report.md").is_file()
    rules = {r.name for r in load_checks()}
    assert all(e.passed for name, e in evaluations.items() if name not in rules)  # dbt's data tests
    con = warehouse.connect_readonly(Settings(home=home))
    try:
        assert con.sql("select count(*) from history where run_key like 'wandb:%'").fetchone()[0] == 5650
        assert con.sql("select count(distinct metric) from metrics").fetchone()[0] >= 15
    finally:
        con.close()


@pytest.mark.slow  # three more refresh jobs and a `grpolens refresh`, ~40 s
def test_a_refresh_with_nothing_new_builds_nothing_and_one_with_new_data_builds_it(refreshed, tmp_path):
    """A scheduled refresh that finds nothing new runs no dbt build and skips what comes after it (checks, reports);
    one that finds a new run builds it, incrementally. After `grpolens refresh` took in a run (it draws no
    report), a refresh with nothing new still draws that run's report."""
    home, _, _ = refreshed
    copy = tmp_path / "home"
    shutil.copytree(home, copy)

    def refresh(trainer_logs: str) -> tuple[dg.ExecuteInProcessResult, str]:
        resource = GrpolensResource(home=str(copy), wandb_dirs=str(LENGTH_COLLAPSE), trainer_logs=trainer_logs)
        instance = dg.DagsterInstance.ephemeral()
        result = defs.resolve_job_def("refresh").execute_in_process(
            resources={"grpolens": resource, "dbt": dbt_resource()}, instance=instance
        )
        return result, "\n".join(entry.user_message for entry in instance.all_logs(result.run_id))

    def materialized(result) -> set[str]:
        return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}

    idle, said = refresh(str(CONSOLE_LOG))
    assert idle.success
    assert not materialized(idle) & {"history", "metrics", "anomalies", "run_reports"}
    skipped = {e.step_key for e in idle.all_events if e.event_type_value == "STEP_SKIPPED"}
    assert {"anomalies", "run_reports"} <= skipped
    assert "the lake has not changed since the last build" in said

    logs = tmp_path / "logs" / "newproj"
    logs.mkdir(parents=True)
    (logs / "run.jsonl").write_text("".join(f'{{"step": {s}, "reward": {s / 10}}}\n' for s in range(30)))
    target = copy / "dbt_target"
    manifest_written = (target / "manifest.json").stat().st_mtime_ns
    grown, said = refresh(os.pathsep.join([str(CONSOLE_LOG), str(logs.parent)]))
    assert grown.success
    assert {"history", "metrics", "anomalies", "run_reports"} <= materialized(grown)
    assert "incremental build: 1 run(s) changed" in said
    # dbt wrote no manifest (the full build's stands, the project unchanged); grpolens-dbt wrote its run results
    results = json.loads((target / "run_results.json").read_text())
    assert results["args"]["write_json"] is False and "model.grpolens.history" in str(results["results"])
    assert (target / "manifest.json").stat().st_mtime_ns == manifest_written

    (logs / "later.jsonl").write_text("".join(f'{{"step": {s}, "reward": {s / 20}}}\n' for s in range(30)))
    sources = os.pathsep.join([str(CONSOLE_LOG), str(logs.parent)])
    env = {"GRPOLENS_HOME": str(copy), "GRPOLENS_WANDB_DIRS": str(LENGTH_COLLAPSE), "GRPOLENS_TRAINER_LOGS": sources}
    assert "1 run(s) changed" in grpolens("refresh", env=env, check=True).stderr
    reports = Settings(home=copy).reports_dir
    assert not any(p.name.startswith("later") for p in reports.iterdir())
    caught_up, said = refresh(sources)
    assert caught_up.success
    assert {"anomalies", "run_reports"} <= materialized(caught_up)
    assert "but the reports of 1 run(s) lag behind the warehouse" in said
    assert [p.name for p in reports.iterdir() if p.name.startswith("later")] and "report later" in said


def test_every_table_asset_carries_its_row_count_columns_and_first_rows(refreshed):
    home, materialized, _ = refreshed
    con = warehouse.connect_readonly(Settings(home=home))
    try:
        tables = dict(
            con.sql(
                "select table_name, table_type from information_schema.tables where table_schema = 'main'"
            ).fetchall()
        )
        for name in ("history", "runs", "metrics", "learning_dynamics", "elo_references", "health"):
            assert tables[name] == "BASE TABLE"
            metadata = materialized[name]
            rows = con.sql(f'select count(*) from "{name}"').fetchone()[0]
            assert metadata["dagster/row_count"].value == rows
            columns = con.execute(
                "select column_name, data_type from information_schema.columns "
                "where table_name = ? order by ordinal_position",
                [name],
            ).fetchall()
            assert [(c.name, c.type) for c in metadata["dagster/column_schema"].schema.columns] == columns
            preview = metadata["preview"].value  # a Markdown table of the first rows (`health`: no events here)
            assert preview.startswith(f"| {columns[0][0]} |") if rows else preview == "(no rows)"
    finally:
        con.close()
    history = {c.name: c for c in materialized["history"]["dagster/column_schema"].schema.columns}
    assert history["step"].type == "BIGINT" and history["value"].type == "DOUBLE"
    assert history["versions"].description.startswith("How many records carried")  # the YAML's column doc
    assert materialized["runs"]["dagster/row_count"].value == 2
    # a view gets its columns, but no count: counting it would run its whole query over the lake
    view = materialized["stg_lake__history"]
    assert "dagster/row_count" not in view and "lake_source" in {
        c.name for c in view["dagster/column_schema"].schema.columns
    }


def _table_rows(markdown: str) -> list[dict]:
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [
        dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=False)) for line in lines[2:]
    ]


def _significant_digits(cell: str) -> int:
    mantissa = re.sub(r"e[+-]?\d+$", "", cell.lstrip("-"))
    digits = mantissa.replace(".", "").lstrip("0")
    return len(digits if "." in mantissa else digits.rstrip("0"))  # 516000 is 3 digits, 0.0275 too


def test_anomalies_show_every_flag_by_run_name_with_rounded_values(refreshed):
    _, materialized, _ = refreshed
    rows = _table_rows(materialized["anomalies"]["flagged"].value)
    assert len(rows) == materialized["anomalies"]["flags"].value
    assert {"qwen2_3b_opd", "run-20251130_144822-gjvwlq13"} <= {row["run"] for row in rows}
    assert not [row for row in rows if row["run"].startswith(("wandb:", "trainer_log:"))]  # names, not run_keys
    collapse = [row for row in rows if row["check"] == "response_length_collapse"]
    assert {(row["run"], row["onset step"]) for row in collapse} == {
        ("qwen2_3b_opd", "36"),
        ("run-20251130_144822-gjvwlq13", "36"),
    }
    numbers = [row[column] for row in rows for column in ("value", "threshold") if row[column] != "–"]
    assert numbers and all(_significant_digits(n) <= 3 for n in numbers), numbers


def test_a_flag_table_shows_a_rules_recurring_episodes_on_a_run_as_one_row():
    from pipeline.assets.health import flags_table

    def flag(run, step, end):
        return {
            "run_key": run,
            "check_name": "reward_zero_variance",
            "severity": "warn",
            "step": step,
            "step_end": end,
            "metric": "frac_reward_zero_std",
            "value": 0.7,
            "threshold": 0.5,
            "message": f"tied from step {step}; advice",
        }

    names = {"k1": "long-run", "k2": "short-run"}
    rows = _table_rows(flags_table([flag("k1", s, s + 5) for s in (10, 40, 70, 100)] + [flag("k2", 3, 9)], names))
    assert [(r["run"], r["onset step"], r["until step"], r["episodes"]) for r in rows] == [
        ("long-run", "10", "105", "4"),
        ("short-run", "3", "9", "1"),
    ]
    once = _table_rows(flags_table([flag("k2", 3, 9)], names))
    assert "episodes" not in once[0]  # the column appears only when something recurs


def test_an_asset_check_lists_every_flagged_run_with_its_threshold(refreshed):
    _, _, evaluations = refreshed
    collapse = evaluations["response_length_collapse"]
    assert not collapse.passed and collapse.severity == dg.AssetCheckSeverity.ERROR
    assert collapse.metadata["runs_flagged"].value == 2
    rows = _table_rows(collapse.metadata["flagged"].value)
    assert {row["run"]: row["threshold"] for row in rows} == {
        "qwen2_3b_opd": "251",  # 0.3 x the median of the 20 logged lengths ending 10 before the onset
        "run-20251130_144822-gjvwlq13": "258",
    }
    assert all(row["message"].startswith("mean response length collapsed") for row in rows)
    assert "drop_ratio=0.3" in collapse.metadata["thresholds"].value
    quiet = evaluations["loss_nonfinite"]
    assert quiet.passed and quiet.metadata["flagged"].value == "No flags."


def test_a_wandb_cloud_run_is_one_partition_of_its_own_job(tmp_path, monkeypatch):
    from pipeline.jobs import wandb_cloud_job
    from tests.wandb_emulator import WandbEmulator

    WandbEmulator.client_settings(retry_max=2, wait_seconds=1, timeout_seconds=5)
    resource = GrpolensResource(home=str(tmp_path / "home"), wandb_projects="testers/grpo")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("wandb_cloud_runs", ["testers/grpo/p1", "testers/grpo/p2"])
    with WandbEmulator() as emu:
        for run_id in ("p1", "p2"):
            emu.add_run("testers", "grpo", run_id, history=[{"_step": s, "w": s} for s in range(10)])
        monkeypatch.setenv("WANDB_BASE_URL", emu.base_url)
        monkeypatch.setenv("WANDB_API_KEY", emu.api_key)
        result = wandb_cloud_job.execute_in_process(
            partition_key="testers/grpo/p1", instance=instance, resources={"grpolens": resource}
        )
    assert result.success
    history = dg.AssetKey(["lake", "wandb_cloud_history"])
    (event,) = [
        e.event_specific_data.materialization
        for e in result.get_asset_materialization_events()
        if e.event_specific_data.materialization.asset_key == history
    ]
    assert event.partition == "testers/grpo/p1" and event.metadata["history_rows"].value == 10
    # the UI shows the run as the materialized partition of the declared lake table; the other run waits its turn
    assert instance.get_materialized_partitions(history) == {"testers/grpo/p1"}


def test_a_source_that_could_not_be_read_fails_its_check_not_the_step(tmp_path, monkeypatch):
    """A refused Axiom token: the ingest step succeeds (the build after it goes on with the other sources) and the
    lake asset's `source_read` check fails, naming the dataset; once the token is right it passes."""
    import time

    from pipeline.assets.ingestion import LAKE_ASSETS
    from tests.axiom_emulator import AxiomEmulator
    from tests.test_axiom import make_events

    resource = GrpolensResource(home=str(tmp_path / "home"), axiom_datasets="alpha")
    with AxiomEmulator() as em:
        em.add("alpha", make_events(5, time.time_ns() - 100 * 10**9))
        monkeypatch.setenv("AXIOM_URL", em.url)
        outcomes = []
        for token in ("xaat-wrong-0123456789abcdef", em.token):
            monkeypatch.setenv("AXIOM_TOKEN", token)
            result = dg.materialize([LAKE_ASSETS["axiom"]], resources={"grpolens": resource})
            assert result.success
            (check,) = result.get_asset_check_evaluations()
            assert check.asset_check_key == dg.AssetCheckKey(dg.AssetKey(["lake", "axiom_events"]), "source_read")
            outcomes.append((check.passed, check.metadata["unread"].value))
    assert outcomes == [(False, "axiom:alpha (auth)"), (True, "none")]


def test_every_file_source_has_a_sensor_and_loading_the_definitions_imports_no_wandb():
    """A source says whether it reads files (`Source.files`); its module then lists the pending ones and a sensor
    watches them. The definitions need not import every reader to find out: wandb alone was 0.45 s of the start
    of every Dagster process (a run, the UI's code server)."""
    readers = {name for name in SOURCES if hasattr(source_module(name), "pending_files")}
    assert {name for name, source in SOURCES.items() if source.files} == readers == set(FILE_SENSORS)
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, pipeline.definitions; print('wandb' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "False"


def test_sensor_requests_a_run_for_new_or_grown_files_only(tmp_path):
    home = tmp_path / "home"
    resource = GrpolensResource(home=str(home), wandb_dirs=str(LENGTH_COLLAPSE))
    first = FILE_SENSORS["wandb_offline"](dg.build_sensor_context(resources={"grpolens": resource}))
    assert isinstance(first, dg.RunRequest)
    wandb_offline.ingest(Settings(home=home).lake, [LENGTH_COLLAPSE])
    after = FILE_SENSORS["wandb_offline"](dg.build_sensor_context(resources={"grpolens": resource}))
    assert isinstance(after, dg.SkipReason) and "no new" in after.skip_message


def test_the_asset_checks_read_the_anomalies_table(refreshed, tmp_path):
    """A flag planted in the table shows in its rule's asset check: the checks read what the `anomalies` asset
    wrote instead of running the rules again (which would find no non-finite loss in these runs)."""
    home, _, evaluations = refreshed
    assert evaluations["loss_nonfinite"].passed
    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    plant_flag(Settings(home=copy), "qwen2_3b_opd")
    keys = [dg.AssetCheckKey(dg.AssetKey(rule.reads[0]), rule.name) for rule in load_checks()]
    job = dg.define_asset_job("health_checks_only", selection=dg.AssetSelection.checks(*keys))
    result = (
        dg.Definitions.merge(defs, dg.Definitions(jobs=[job]))
        .resolve_job_def("health_checks_only")
        .execute_in_process(
            resources={"grpolens": GrpolensResource(home=str(copy)), "dbt": dbt_resource()},
            instance=dg.DagsterInstance.ephemeral(),
        )
    )
    assert result.success
    found = {
        e.event_specific_data.asset_check_key.name: e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    assert set(found) == {key.name for key in keys}
    planted = found["loss_nonfinite"]
    assert not planted.passed and PLANTED in planted.metadata["flagged"].value
    assert found["response_length_collapse"].metadata["runs_flagged"].value == 2  # the asset's flags, as written
