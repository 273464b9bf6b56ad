-- Every history row the lake holds, as written: one row per record a source read (history de-duplicates).
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
        on source.lake_source = reloads.lake_source
        and source.run_key = reloads.run_key
    where reloads.history_from_ingest is null
        or source.ingest_id >= reloads.history_from_ingest
)

select * from renamed
