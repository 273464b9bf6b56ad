-- Is the prefix cache working? hit_rate = sum(hits) / sum(queries) from `prefix_cache_stats` events, per
-- (dataset, service, hour) and overall; plus, per W&B run, the canonical metric cache_hit_rate (older
-- Diplomacy runs logged cache/hit_rate). A dataset with no cache events has no row here: caching is off or
-- not logged, which `missing_reason` on the overall event row cannot say for an absent dataset.
with stats as (
    select dataset, service, date_trunc('hour', "time") as hour, hits, queries, prompt_tokens_total,
        prompt_tokens_cached, hit_rate
    from {{ ref('stg_events__cache') }}
),

from_events as (
    select
        'events' as origin,
        case when hour is null then 'overall' else 'hour' end as grain,
        dataset,
        service,
        cast(null as varchar) as run_key,
        hour,
        count(*) as samples,
        coalesce(sum(hits) / nullif(sum(queries), 0), avg(hit_rate)) as hit_rate,
        sum(prompt_tokens_cached) / nullif(sum(prompt_tokens_total), 0) as prompt_tokens_cached_share,
        case when count(queries) = 0 and count(hit_rate) = 0 then 'no hits/queries or hit_rate fields' end
            as missing_reason
    from stats
    group by grouping sets ((dataset, service, hour), (dataset, service))
),

run_cache as (
    select run_key, value, percent_rank() over (partition by run_key order by step) as position
    from {{ ref('metrics') }}
    where metric = 'cache_hit_rate'
),

from_runs as (
    select
        'wandb' as origin,
        'run' as grain,
        cast(null as varchar) as dataset,
        cast(null as varchar) as service,
        run_key,
        cast(null as timestamp with time zone) as hour,
        count(*) as samples,
        avg(value) filter (where position >= 0.1) as hit_rate,  -- after warm-up: the first tenth is left out
        cast(null as double) as prompt_tokens_cached_share,
        cast(null as varchar) as missing_reason
    from run_cache
    group by run_key
),

final as (
    select * from from_events
    union all by name
    select * from from_runs
)

select * from final
