-- Every logged value once per (run_key, step, key): the newest ingest wins, and within one ingest the
-- value written last in the run file. `versions` counts how many rows carried that (run, step, key),
-- which is how a repeated step (two log calls for one trainer step) stays visible after de-duplication.
with source as (
    {{ lake_union('history') }}
),

renamed as (
    select
        run_key,
        step,
        ts,
        key,
        value,
        value_int,
        value_text,
        value_type,
        ingest_id,
        file_offset
    from source
),

final as (
    select
        * exclude (ingest_id, file_offset),
        count(*) over (partition by run_key, step, key) as versions
    from renamed
    qualify row_number() over (
        partition by run_key, step, key order by ingest_id desc, file_offset desc
    ) = 1
)

select * from final
