{% macro appended_runs_table() %}
{#- The grown runs the running build of `history` extends rather than rewrites (history_appended_runs). -#}
main._history_appended_runs
{%- endmacro %}

{% macro history_appended_runs() %}
{#- Pre-hook of `history`: of the grown runs (macros/changed_runs.sql), those whose rows the table holds stay
    right whatever their new rows are, with the first ingest of those new rows per source. Then the run is what
    the table holds plus its de-duplicated new rows, exactly what rewriting it gives, at the cost of the new rows
    (a +1 % refresh of ten long runs at 3e7 values: this node 1.8 s instead of 10 s; docs/scale.md).
    A grown run is rewritten instead when
    - a new (step, key) is one the table holds already: the newest ingest may win it, and `versions` counts
      records the table no longer has (a file read again, a resumed run that restarts its steps, a source that
      lost its cursor and reuses an ingest id);
    - its reload point moved with the new ingests (`history_from_ingest`: a rewound run), so rows it holds go.
    A table rather than a temporary one, so that a test can see what the last build extended. In a full build,
    or a build with no grown run: none. -#}
{%- if is_incremental() %}
create or replace table {{ appended_runs_table() }} as
with grown as (
    select grown.*
    from {{ grown_runs_table() }} as grown
    semi join {{ changed_runs_table() }} as changed on grown.run_key = changed.run_key
),

reload_moved as (
    select runs.run_key
    from ({{ lake_union('runs') }}) as runs
    inner join grown on runs.run_key = grown.run_key and runs.lake_source = grown.lake_source
    group by runs.run_key, runs.lake_source
    having max(runs.history_from_ingest)
        is distinct from max(runs.history_from_ingest) filter (where runs.ingest_id < grown.from_ingest)
),

new_rows as (
    select changed.run_key, changed.step, changed.key
    from {{ of_changed_runs(ref('stg_lake__history'), per_run_scans=true) }} as changed
    inner join grown on changed.run_key = grown.run_key and changed.lake_source = grown.lake_source
    where changed.ingest_id >= grown.from_ingest
),

first_new_step as (
    select run_key, min(step) as step
    from new_rows
    group by run_key
),

held as (
    select held.run_key, held.step, held.key
    from (select run_key, step, key from {{ this }} where {{ changed_runs_filter(this) }}) as held
    inner join first_new_step on held.run_key = first_new_step.run_key and held.step >= first_new_step.step
),

overlapping as (
    select distinct new_rows.run_key
    from new_rows
    semi join held
        on new_rows.run_key = held.run_key and new_rows.step = held.step and new_rows.key = held.key
)

select grown.*
from grown
where grown.run_key not in (select reload_moved.run_key from reload_moved)
    and grown.run_key not in (select overlapping.run_key from overlapping)
{%- else %}
create or replace table {{ appended_runs_table() }} (run_key varchar, lake_source varchar, from_ingest bigint)
{%- endif %}
{% endmacro %}
