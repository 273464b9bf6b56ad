{% macro changed_runs_table() %}
{#- The runs this build must redo, written by grpolens before dbt runs (pipeline/build_plan.py): every run with
    rows in a lake part that appeared, vanished or was rewritten since the last complete build. A build through
    grpolens (CLI or Dagster) always writes it first; `dbt build` run by hand on an existing warehouse needs
    `--full-refresh`, which ignores it. -#}
main._build_changed_runs
{%- endmacro %}

{% macro ensure_changed_runs_table() %}
{#- On-run-start: an empty table when grpolens has not written one (a first build, a hand-run dbt). -#}
create table if not exists {{ changed_runs_table() }} (run_key varchar)
{%- endmacro %}

{% macro of_changed_runs(relation) %}
{#- A per-run model's input: in an incremental build, only the changed runs' rows of `relation`; in a full build,
    all of it. DuckDB pushes the semi-join into the Parquet and table scans as a dynamic filter, so the unchanged
    runs' row groups are skipped rather than read and dropped. A unit test (no `this`) gets all of it. -#}
{%- if this is not none and is_incremental() -%}
(select * from {{ relation }} where run_key in (select run_key from {{ changed_runs_table() }}))
{%- else -%}
{{ relation }}
{%- endif -%}
{%- endmacro %}

{% macro get_incremental_replace_runs_sql(arg_dict) %}
{#- Incremental strategy `replace_runs`: a per-run model drops every row of the changed runs and inserts what it
    computed for them, in the model's one transaction. Unlike delete+insert on a unique key, a run whose rows all
    went (a vanished part, a rewind to fewer steps) is emptied too. -#}
{%- set target = arg_dict['target_relation'] -%}
{%- set columns = get_quoted_csv(arg_dict['dest_columns'] | map(attribute='name')) -%}
delete from {{ target }} where run_key in (select run_key from {{ changed_runs_table() }});
insert into {{ target }} ({{ columns }})
select {{ columns }} from {{ arg_dict['temp_relation'] }}
{%- endmacro %}
