"""The dbt models as Dagster assets; dbt's data and unit tests appear as asset checks.

The translator files each model under the group of its folder (staging, core, elo, training, pipeline), so the
lineage shows the warehouse's layers, and describes it with its YAML description, never its SQL. Once dbt has
exited, one read-only connection adds what a table's page should show: row count, column types (with the YAML's
column docs) and its first rows. dagster-dbt's own fetch_row_counts()/fetch_column_metadata() are not used: they
open the warehouse through the dbt-duckdb adapter inside this process with another configuration (read-only) and
keep it open, after which the `anomalies` asset, in the same process, can open the file neither to read nor to write.
"""

from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg
from dagster_dbt import DagsterDbtTranslator, DbtCliResource, dbt_assets

from pipeline import build_plan, warehouse
from pipeline.dbt_groups import group_of
from pipeline.dbt_project import dbt_project
from pipeline.ingest import ensure_lake
from pipeline.resources import GrpolensResource
from pipeline.settings import Settings

# The keys the UI shows as a table's row count and columns (dagster's TableMetadataSet, not exported at the top level)
ROW_COUNT, COLUMN_SCHEMA = "dagster/row_count", "dagster/column_schema"
PREVIEW_ROWS = 5
PREVIEW_CELL = 40  # characters: a config or message column would otherwise make the preview unreadable


class GrpolensTranslator(DagsterDbtTranslator):
    """Groups from the folder a model lives in, descriptions from its YAML."""

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        return group_of(dict(dbt_resource_props)) or super().get_group_name(dbt_resource_props)

    def get_description(self, dbt_resource_props: Mapping[str, Any]) -> str:
        return (dbt_resource_props.get("description") or "").strip() or (
            f"dbt {dbt_resource_props['resource_type']} `{dbt_resource_props['name']}` "
            f"({dbt_resource_props.get('original_file_path', '')})"
        )


# dbt's source `checks.anomalies` is the table the `anomalies` asset writes. run_outcomes is a view that reads it at
# query time, so it is no build dependency (making it one would put the checks in the middle of the dbt build).
ANOMALIES_TABLE = dg.AssetSpec(
    ["checks", "anomalies"],
    group_name="health",
    kinds={"duckdb"},
    description="The `anomalies` table as dbt reads it (source `checks.anomalies`): written by the `anomalies` asset "
    "after each build, read by the run_outcomes view when it is queried.",
)


@dbt_assets(manifest=dbt_project.manifest_path, project=dbt_project, dagster_dbt_translator=GrpolensTranslator())
def grpolens_dbt_assets(context: dg.AssetExecutionContext, dbt: DbtCliResource, grpolens: GrpolensResource):
    settings = grpolens.settings()
    settings.export()  # profiles.yml and the sources read GRPOLENS_HOME
    ensure_lake(settings)  # a source never ingested still has its (empty) lake folders for dbt to read
    warehouse.wait_for_write_lock(settings)
    plan = build_plan.prepare(settings)  # the runs whose lake parts changed: the incremental models redo only those
    behind = None
    if not context.is_subset and plan.selection() == []:
        # A scheduled refresh with nothing new costs no dbt build: no model is materialized, so the steps after
        # this one (anomalies, reports) are skipped too — unless they lag behind the warehouse (`grpolens refresh`
        # built it, which draws no report): dbt then runs, redoing no run, so that they run. Asked for by name,
        # dbt runs.
        behind = lagging_steps(settings)
        if not behind:
            build_plan.commit(settings)
            context.log.info(
                "the lake has not changed since the last build: no model to rebuild, nothing to check again "
                "(materialize `anomalies` alone to apply new check thresholds)"
            )
            return
    context.log.info(
        f"the lake has not changed since the last build, but {behind} lag behind the warehouse: every model runs "
        "(redoing no run) so that the steps after it run"
        if behind
        else plan.describe()
    )
    # dbt's target folder in the data home, as `grpolens build` has it, not a new one in the checkout per run
    invocation = dbt.cli(
        ["build", *warehouse.dbt_build_args(plan)], context=context, target_path=settings.home / "dbt_target"
    )
    yield from with_table_metadata(invocation, settings)
    if not context.is_subset:  # every model took the plan in (a failed build raised above)
        build_plan.commit(settings)


def lagging_steps(settings: Settings) -> str | None:
    """What after the dbt step has not caught up with the warehouse as built now: its anomalies table, or the
    reports of some runs (None when both have)."""
    from pipeline import checks
    from pipeline.report import batch

    con = warehouse.connect_readonly(settings)
    try:
        if not checks.anomalies_current(settings, con):
            return "the anomalies table and the reports"
        stale = batch.stale_reports(settings, con)
    finally:
        con.close()
    return f"the reports of {len(stale)} run(s)" if stale else None


def with_table_metadata(invocation, settings: Settings) -> Iterator:
    """dbt's events, once dbt has exited (DuckDB admits one writer: its lock must be free), each built table's
    materialization with its row count, column types and first rows. A failed build still reports what it built,
    then fails the step with dbt's error."""
    events, failure = [], None
    try:
        events.extend(invocation.stream())
    except Exception as exc:  # dagster-dbt raises at the end of a failed build, after its events
        failure = exc
    nodes = invocation.manifest["nodes"]
    built = {
        uid: nodes[uid]
        for uid in map(_unique_id, events)
        if uid in nodes and nodes[uid]["resource_type"] in ("model", "seed", "snapshot")
    }
    extra = _table_metadata(settings, list(built.values())) if built else {}
    for event in events:
        metadata = extra.get(uid) if (uid := _unique_id(event)) is not None else None
        yield event.with_metadata({**event.metadata, **metadata}) if metadata else event
    if failure is not None:
        raise failure


def _unique_id(event) -> str | None:
    value = (getattr(event, "metadata", None) or {}).get("unique_id")
    return getattr(value, "value", value)


def _table_metadata(settings: Settings, nodes: list[dict]) -> dict[str, dict]:
    try:
        con = warehouse.connect_readonly(settings)
    except warehouse.WarehouseLocked as exc:  # someone else writes now: the build stands, without these figures
        dg.get_dagster_logger().warning(f"no row counts or column types this time: {exc}")
        return {}
    try:
        types: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for schema, table, column, data_type in con.execute(
            "select table_schema, table_name, column_name, data_type from information_schema.columns "
            "order by table_schema, table_name, ordinal_position"
        ).fetchall():
            types.setdefault((schema, table), []).append((column, data_type))
        return {
            node["unique_id"]: _one_table(con, node, types.get((node["schema"], _relation(node)), [])) for node in nodes
        }
    finally:
        con.close()


def _relation(node: dict) -> str:
    return node.get("alias") or node["name"]


def _one_table(con, node: dict, columns: list[tuple[str, str]]) -> dict:
    docs = {name: (spec.get("description") or None) for name, spec in (node.get("columns") or {}).items()}
    schema = dg.TableSchema(
        columns=[dg.TableColumn(name, data_type, description=docs.get(name)) for name, data_type in columns]
    )
    if node["config"].get("materialized") == "view":  # counting a view runs its whole query (a lake scan)
        return {COLUMN_SCHEMA: schema}
    relation = f'"{node["schema"]}"."{_relation(node)}"'
    rows = con.execute(f"select count(*) from {relation}").fetchone()[0]
    return {COLUMN_SCHEMA: schema, ROW_COUNT: rows, "preview": dg.MetadataValue.md(_preview(con, relation))}


def _preview(con, relation: str) -> str:
    """The first rows as a Markdown table: numbers to 3 significant digits, long texts cut."""
    from pipeline.report.markdown import table

    result = con.execute(f"select * from {relation} limit {PREVIEW_ROWS}")
    names = [d[0] for d in result.description]
    rows = [{n: _short(v) for n, v in zip(names, values, strict=True)} for values in result.fetchall()]
    return "\n".join(table(rows, names)) or "(no rows)"


def _short(value):
    from pipeline.assets.health import rounded

    if isinstance(value, (int, float, bool)) or value is None:
        return rounded(value)
    text = str(value)
    return text if len(text) <= PREVIEW_CELL else text[: PREVIEW_CELL - 1] + "…"
