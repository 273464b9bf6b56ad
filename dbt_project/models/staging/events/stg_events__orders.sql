-- One row per order-extraction event: the event name is the outcome (extracted = full, partial, empty).
with events as (
    select * from {{ ref('stg_lake__events') }}
    where event in ('orders_extracted', 'orders_partial', 'orders_empty')
),

final as (
    select
        dataset,
        "time",
        service,
        rollout_id,
        case event when 'orders_extracted' then 'full' when 'orders_partial' then 'partial' else 'empty' end as outcome,
        fields ->> 'power_name' as power_name,
        try_cast(fields ->> 'orders_count' as integer) as orders_count,
        try_cast(fields ->> 'expected_count' as integer) as expected_count,
        fields ->> 'status' as status,
        fields ->> 'phase' as phase,
        try_cast(fields ->> 'raw_response_length' as integer) as raw_response_length
    from events
)

select * from final
