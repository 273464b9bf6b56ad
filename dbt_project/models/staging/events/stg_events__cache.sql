-- Prefix-cache statistics as the inference server reports them (`prefix_cache_stats`).
with events as (
    select * from {{ ref('stg_lake__events') }}
    where event = 'prefix_cache_stats'
),

final as (
    select
        dataset,
        "time",
        service,
        try_cast(fields ->> 'hit_rate' as double) as hit_rate,
        try_cast(fields ->> 'queries' as double) as queries,
        try_cast(fields ->> 'hits' as double) as hits,
        try_cast(fields ->> 'prompt_tokens_total' as double) as prompt_tokens_total,
        try_cast(fields ->> 'prompt_tokens_cached' as double) as prompt_tokens_cached
    from events
)

select * from final
