with source as (
    {{ lake_union('ingest_issues', var('lake_sources') + var('event_sources')) }}
),

final as (
    select distinct source, path, "offset", bytes_skipped, kind, message, ingest_id, noticed_at
    from source
)

select * from final
