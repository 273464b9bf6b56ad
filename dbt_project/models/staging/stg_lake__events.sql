-- Every event once: the API and NDJSON files may deliver the same event (and the API's overlap window
-- re-reads recent ones), so rows are de-duplicated on (dataset, event_id), the newest ingest winning.
with source as (
    {{ lake_union('events', var('event_sources')) }}
),

renamed as (
    select
        dataset,
        "time",
        event,
        service,
        rollout_id,
        run_name,
        fields::json as fields,
        event_id,
        ingest_id
    from source
),

final as (
    select * exclude (ingest_id)
    from renamed
    qualify row_number() over (partition by dataset, event_id order by ingest_id desc) = 1
)

select * from final
