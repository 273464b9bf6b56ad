-- Inference speed and batching. Output tokens/s: `inference_response.tokens_per_second`, else
-- `inference_timing_breakdown.output_tokens_per_second`; input tokens/s and the prefix-cache hit rate come
-- from the breakdown events. One row per (dataset, service, hour) and an `overall` row per (dataset, service).
with calls as (
    select
        dataset,
        service,
        date_trunc('hour', "time") as hour,
        coalesce(tokens_per_second, output_tokens_per_second) as output_tokens_per_second,
        input_tokens_per_second,
        batch_size,
        prefix_cache_hit_rate
    from {{ ref('stg_events__inference') }}
),

grouped as (
    select
        dataset,
        service,
        hour,
        count(*) as inference_events,
        avg(output_tokens_per_second) as output_tokens_per_second,
        avg(input_tokens_per_second) as input_tokens_per_second,
        avg(batch_size) as batch_size,
        avg(prefix_cache_hit_rate) as prefix_cache_hit_rate,
        count(prefix_cache_hit_rate) as events_with_cache_rate
    from calls
    group by grouping sets ((dataset, service, hour), (dataset, service))
),

final as (
    select
        case when hour is null then 'overall' else 'hour' end as grain,
        *,
        concat_ws('; ',
            case when output_tokens_per_second is null then 'no tokens_per_second / output_tokens_per_second' end,
            case when input_tokens_per_second is null then 'no input_tokens_per_second' end,
            case when events_with_cache_rate = 0 then 'no prefix_cache_hit_rate' end
        ) as missing_reason
    from grouped
)

select * from final
