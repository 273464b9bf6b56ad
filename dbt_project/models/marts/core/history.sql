-- Every logged value once per (run_key, step, key): the newest ingest wins, and within one ingest the
-- value written last in the run file (of a resumed W&B run, in its latest segment, whose offsets sort last).
-- `versions` counts how many records of the producer carried that (run, step, key), which is how a repeated
-- step (two log calls for one trainer step) stays visible after de-duplication. A record is a source's file
-- offset, so the same record read again (an interrupted ingest re-run, a rewritten file) is one version; W&B
-- cloud rows are not counted: the server keeps one row per step, and a run read both from its offline file and
-- from the cloud must not look duplicated.
-- Incremental: a build redoes every row of the runs whose lake parts changed (pipeline/build_plan.py) and
-- keeps the others, which gives what a full rebuild gives at the cost of what changed; a run that only grew by
-- new (step, key)s is extended with them instead (macros/appended_runs.sql). Stored ordered by
-- run_hash (macros/changed_runs.sql), so that the reads of a few runs (the next models, tests and checks of an
-- incremental build, a report) skip the row groups of the others; the sort adds about a sixth to a full build.
{{ config(
    materialized='incremental',
    incremental_strategy='replace_runs',
    on_schema_change='fail',
    pre_hook="{{ history_appended_runs() }}",
    incremental_predicates=["run_key not in (select run_key from " ~ appended_runs_table() ~ ")"]
) }}

with changed as (
    select * from {{ of_changed_runs(ref('stg_lake__history'), per_run_scans=true) }}
),

-- of a run the pre-hook found extensible, only the rows of its new ingests
source as (
    {%- if is_incremental() %}
    select changed.*
    from changed
    left join {{ appended_runs_table() }} as appended
        on changed.run_key = appended.run_key and changed.lake_source = appended.lake_source
    where changed.run_key not in (select extended.run_key from {{ appended_runs_table() }} as extended)
        or changed.ingest_id >= appended.from_ingest
    {%- else %}
    select * from changed
    {%- endif %}
),

-- Most (run, step, key) were read once: only the repeated ones need ranking. A window over every row costs
-- several times this grouping.
repeated as (
    select run_key, step, key
    from source
    group by all
    having count(*) > 1
),

read_once as (
    -- EXCLUDE lists column names, which RF02 reads as unqualified references
    select source.* exclude (ingest_id, file_offset, lake_source), 1 as versions  -- noqa: RF02
    from source
    anti join repeated using (run_key, step, key)
),

resolved as (
    select
        source.* exclude (ingest_id, file_offset, lake_source),  -- EXCLUDE names, as above -- noqa: RF02
        greatest(1, count(distinct case
            when source.lake_source <> 'wandb_cloud' then source.lake_source || ':' || source.file_offset
        end) over (partition by run_key, step, key)) as versions
    from source
    semi join repeated using (run_key, step, key)
    qualify row_number() over (
        partition by run_key, step, key order by source.ingest_id desc, source.file_offset desc
    ) = 1
),

final as (
    select * from read_once
    union all by name
    select * from resolved
),

-- once a run, from the lake's runs table: md5 on every row's run_key took 5 s of a full build at 3e7 values (a
-- run with history but no runs row, which no source writes, still gets its hash, row by row)
run_hashes as (
    select run_key, {{ run_hash('run_key') }} as run_hash
    from (select distinct run_key from {{ ref('stg_lake__runs') }}) as runs
),

hashed as (
    select
        final.run_key, final.step, final.ts, final.key, final.value, final.value_int, final.value_text,
        final.value_type, final.versions,
        coalesce(run_hashes.run_hash, {{ run_hash('final.run_key') }}) as run_hash
    from final
    left join run_hashes on final.run_key = run_hashes.run_key
)

select * from hashed
order by run_hash
