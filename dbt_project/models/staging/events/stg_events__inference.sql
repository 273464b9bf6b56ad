-- Inference calls: `inference_response` (per batch) and `inference_timing_breakdown` (per call, with the
-- prefix-cache hit rate). Fields a given event type does not carry stay null.
with events as (
    select * from {{ ref('stg_lake__events') }}
    where event in ('inference_response', 'inference_timing_breakdown')
),

final as (
    select
        dataset,
        "time",
        event,
        service,
        try_cast(fields ->> 'batch_size' as double) as batch_size,
        try_cast(fields ->> 'duration_ms' as double) as duration_ms,
        try_cast(fields ->> 'tokens_generated' as double) as tokens_generated,
        try_cast(fields ->> 'tokens_per_second' as double) as tokens_per_second,
        try_cast(fields ->> 'total_time_s' as double) as total_time_s,
        try_cast(fields ->> 'generation_time_s' as double) as generation_time_s,
        try_cast(fields ->> 'adapter_load_time_s' as double) as adapter_load_time_s,
        try_cast(fields ->> 'input_tokens_per_second' as double) as input_tokens_per_second,
        try_cast(fields ->> 'output_tokens_per_second' as double) as output_tokens_per_second,
        try_cast(fields ->> 'prefix_cache_hit_rate' as double) as prefix_cache_hit_rate,
        try_cast(fields ->> 'prompt_tokens' as double) as prompt_tokens,
        fields ->> 'lora_name' as lora_name
    from events
)

select * from final
