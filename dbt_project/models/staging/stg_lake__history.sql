-- Every logged value once per (run_key, step, key): the newest ingest wins, and within one ingest the
-- value written last in the run file. `versions` counts how many records of the producer carried that
-- (run, step, key), which is how a repeated step (two log calls for one trainer step) stays visible after
-- de-duplication. A record is a source's file offset, so the same record read again (an interrupted ingest
-- re-run, a rewritten file) is one version; W&B cloud rows are not counted: the server keeps one row per
-- step, and a run read both from its offline file and from the cloud must not look duplicated.
-- A run whose history a source read again from its start (a rewound W&B run: `history_from_ingest` on
-- its runs row) keeps only that source's rows from that ingest on: the steps the rewind removed go.
with source as (
    {{ lake_union('history') }}
),

reloads as (
    select lake_source, run_key, max(history_from_ingest) as history_from_ingest
    from ({{ lake_union('runs') }})
    where history_from_ingest is not null
    group by all
),

renamed as (
    select
        source.run_key,
        source.step,
        source.ts,
        source.key,
        source.value,
        source.value_int,
        source.value_text,
        source.value_type,
        source.ingest_id,
        source.file_offset,
        source.lake_source
    from source
    left join reloads
        on reloads.lake_source = source.lake_source
        and reloads.run_key = source.run_key
    where reloads.history_from_ingest is null
        or source.ingest_id >= reloads.history_from_ingest
),

final as (
    select
        * exclude (ingest_id, file_offset, lake_source),
        greatest(1, count(distinct case when lake_source <> 'wandb_cloud' then lake_source || ':' || file_offset end)
            over (partition by run_key, step, key)) as versions
    from renamed
    qualify row_number() over (
        partition by run_key, step, key order by ingest_id desc, file_offset desc
    ) = 1
)

select * from final
