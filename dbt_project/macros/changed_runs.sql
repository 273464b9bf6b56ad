{% macro changed_runs_table() %}
{#- The runs this build must redo, written by grpolens before dbt runs (pipeline/build_plan.py): every run with
    rows in a lake part that appeared, vanished or was rewritten since the last complete build. A build through
    grpolens (CLI or Dagster) always writes it first; `dbt build` run by hand on an existing warehouse needs
    `--full-refresh`, which ignores it (and `dbt test` by hand tests only the runs the last build redid). -#}
main._build_changed_runs
{%- endmacro %}

{% macro ensure_changed_runs_table() %}
{#- On-run-start: an empty table when grpolens has not written one (a first build, a hand-run dbt). -#}
create table if not exists {{ changed_runs_table() }} (run_key varchar, run_hash ubigint)
{%- endmacro %}

{% macro grown_runs_table() %}
{#- The changed runs that only gained lake parts (none holding them vanished or was rewritten), with the first
    ingest id of their new parts per source; written with the changed runs (pipeline/build_plan.py). `history`
    extends such a run instead of rewriting it when its new rows allow (macros/appended_runs.sql). -#}
main._build_grown_runs
{%- endmacro %}

{% macro ensure_grown_runs_table() %}
{#- On-run-start, as ensure_changed_runs_table. -#}
create table if not exists {{ grown_runs_table() }} (run_key varchar, lake_source varchar, from_ingest bigint)
{%- endmacro %}

{% macro run_hash(column='run_key') -%}
{#- A run's 64-bit cluster key (pipeline/build_plan.py's RUN_HASH writes the same for the changed runs). The big
    per-run tables (history) are stored ordered by it and carry it as a column, so that reading a few runs skips
    the row groups of the others. A filter on run_key alone cannot: DuckDB's zone maps keep the first 8 bytes of
    a string, which the run_keys of a source share ('trainer_', 'wandb_of'), so it reads every row group (at 3e7
    values, 4 changed runs: 30.3 M rows read and 0.14 s, against 1.7 M and 0.015 s through run_hash). md5: the
    same value in every DuckDB version and process. -#}
md5_number_upper({{ column }})
{%- endmacro %}

{% macro changed_runs_filter(relation) -%}
{#- The condition that keeps the changed runs' rows of `relation`: through run_hash as well when the relation
    documents one (a clustered table, whose rows all belong to a run), so DuckDB can skip row groups. -#}
{%- if is_clustered(relation) -%}
run_hash in (select run_hash from {{ changed_runs_table() }})
    and run_key in (select run_key from {{ changed_runs_table() }})
{%- else -%}
run_key in (select run_key from {{ changed_runs_table() }})
{%- endif -%}
{%- endmacro %}

{% macro of_changed_runs(relation, per_run_scans=false) %}
{#- A per-run model's input: in an incremental build, only the changed runs' rows of `relation`; in a full build,
    all of it. DuckDB pushes the semi-join into table scans as a dynamic filter, so the unchanged runs' row
    groups are skipped rather than read and dropped. A unit test (no `this`) gets all of it.
    per_run_scans, for a read of the Parquet lake: one scan per changed run, `run_key = '<run>'`, while there
    are at most 50 of them. DuckDB skips a Parquet row group by its min/max statistics for an equality, but checks
    an IN list or a semi-join row by row after reading every row group whose range holds any changed run, which
    is most of the lake (at 3e7 values, 4 changed runs: 0.31 s for the semi-join against 0.04 s). A run_key
    with a NUL character cannot stand in a SQL literal: then the semi-join. -#}
{%- if this is not none and is_incremental() -%}
{%- set runs = none -%}
{%- if per_run_scans and execute -%}
    {%- set found = run_query(
        'select run_key, contains(run_key, chr(0)) as has_nul from ' ~ changed_runs_table() ~ ' order by run_key'
    ) -%}
    {%- if true not in found.columns[1].values() -%}
        {%- set runs = found.columns[0].values() -%}
    {%- endif -%}
{%- endif -%}
{%- if runs is not none and runs | length <= 50 -%}
(
{%- for run in runs %}
    select * from {{ relation }} where run_key = '{{ run | replace("'", "''") }}'{{ ' union all' if not loop.last }}
{%- else %}
    select * from {{ relation }} where false
{%- endfor %}
)
{%- else -%}
(select * from {{ relation }} where {{ changed_runs_filter(relation) }})
{%- endif -%}
{%- else -%}
{{ relation }}
{%- endif -%}
{%- endmacro %}

{% macro get_incremental_replace_runs_sql(arg_dict) %}
{#- Incremental strategy `replace_runs`: a per-run model drops every row of the changed runs and inserts what it
    computed for them, in the model's one transaction. Unlike delete+insert on a unique key, a run whose rows all
    went (a vanished part, a rewind to fewer steps) is emptied too. The model's `incremental_predicates` narrow
    the rows dropped (history keeps those of the runs it extends). -#}
{%- set target = arg_dict['target_relation'] -%}
{%- set names = arg_dict['dest_columns'] | map(attribute='name') | list -%}
{%- set columns = get_quoted_csv(names) -%}
{%- set predicates = arg_dict.get('incremental_predicates') or [] -%}
{%- if 'run_hash' in names %}
delete from {{ target }}
where run_hash in (select run_hash from {{ changed_runs_table() }})
    and run_key in (select run_key from {{ changed_runs_table() }})
{%- else %}
delete from {{ target }} where run_key in (select run_key from {{ changed_runs_table() }})
{%- endif %}
{%- for predicate in predicates %}
    and ({{ predicate }})
{%- endfor %};
insert into {{ target }} ({{ columns }})
select {{ columns }} from {{ arg_dict['temp_relation'] }}
{%- endmacro %}

{% macro get_where_subquery(relation) -%}
{#- What a data test reads (dbt's own macro, overridden as dbt's docs for `where` suggest). In an incremental
    build, a test on a per-run relation reads only the runs this build redid, and rows of no run: the other runs
    were tested when they were built, so a build's tests cost what changed, like its models. A relation is per-run
    when its YAML documents a run_key column (tests/test_dbt_project.py keeps that true of every relation that
    has one). A test's own `where` still applies on top. Row-level tests (not_null, accepted_values,
    relationships' child rows) lose nothing by it; a uniqueness test would if its columns left run_key out,
    which tests/test_dbt_project.py forbids on per-run relations. -#}
{%- set where = config.get('where', '') -%}
{%- set conditions = [where] if where else [] -%}
{%- if execute and not flags.FULL_REFRESH and is_clustered(relation) -%}
    {%- do conditions.append('(' ~ changed_runs_filter(relation) ~ ')') -%}
{%- elif execute and not flags.FULL_REFRESH and is_per_run(relation) -%}
    {%- do conditions.append('(run_key is null or run_key in (select run_key from ' ~ changed_runs_table() ~ '))') -%}
{%- endif -%}
{%- if conditions -%}
    {%- do return('(select * from ' ~ relation ~ ' where ' ~ conditions | join(' and ') ~ ') dbt_subquery') -%}
{%- else -%}
    {%- do return(relation) -%}
{%- endif -%}
{%- endmacro %}

{% macro is_per_run(relation) -%}
{#- Whether the model or seed behind `relation` documents a run_key column (read from the graph: no query). -#}
{%- do return(documents_column(relation, 'run_key')) -%}
{%- endmacro %}

{% macro is_clustered(relation) -%}
{#- Whether the model behind `relation` documents a run_hash column: it is stored ordered by it, and every row
    belongs to a run (tests/test_dbt_project.py keeps both true). -#}
{%- do return(documents_column(relation, 'run_hash')) -%}
{%- endmacro %}

{% macro documents_column(relation, column) -%}
{#- Whether the model or seed behind `relation` documents `column`. No graph (sqlfluff's templater): no. -#}
{%- if graph is not defined -%}{%- do return(false) -%}{%- endif -%}
{%- set name = relation | string -%}
{%- for node in graph.nodes.values() if node.resource_type in ('model', 'seed') and node.relation_name == name -%}
    {%- if column in node.columns -%}{%- do return(true) -%}{%- endif -%}
{%- endfor -%}
{%- do return(false) -%}
{%- endmacro %}

{% macro on_trainer_steps(relation, series='key') -%}
{#- The rows of `relation` (a CTE of history rows: run_key, step, and the column `series` that names a series, key
    or metric) with `step` the trainer's (models/marts/core/trainer_steps.sql): where several logged rows of one
    series land on one trainer step, the last one logged stands for it. The runs without a counter pass through as they are: ranking every evaluation row
    of the bench's 3e7 values took 2.3 s, against none for the runs that need it. -#}
(
    select r.* from {{ relation }} as r
    anti join {{ of_changed_runs(ref('trainer_steps')) }} as t on r.run_key = t.run_key
    union all by name
    select r.* replace (t.trainer_step as step)
    from {{ relation }} as r
    join {{ of_changed_runs(ref('trainer_steps')) }} as t on r.run_key = t.run_key and r.step = t.logged_step
    -- the latest logged row of each (run, trainer step, series); not `row_number() ... = 1`, which DuckDB 1.5's
    -- top-N window rewrite fails on here ("INTERNAL Error: Failed to cast expression to type")
    qualify r.step = max(r.step) over (partition by r.run_key, t.trainer_step, r.{{ series }})
)
{%- endmacro %}
