-- Rollout lifecycle events with their fields typed, under the producer's own names (see grpo-signals §1a).
-- try_cast: a producer that sends a string where a number belongs yields null here, not a failed build.
with events as (
    select * from {{ ref('stg_lake__events') }}
    where event in ('rollout_start', 'rollout_complete', 'rollout_error', 'rollout_metrics')
),

final as (
    select
        dataset,
        "time",
        event,
        service,
        rollout_id,
        try_cast(fields ->> 'samples_per_group' as integer) as samples_per_group,
        try_cast(fields ->> 'horizon_years' as double) as horizon_years,
        fields ->> 'horizon_type' as horizon_type,
        try_cast(fields ->> 'trajectories_count' as integer) as trajectories_count,
        try_cast(fields ->> 'total_inference_calls' as integer) as total_inference_calls,
        try_cast(fields ->> 'total_duration_ms' as double) as total_duration_ms,
        fields ->> 'error' as error,
        fields ->> 'phase' as phase,
        try_cast(fields ->> 'duration_ms' as double) as duration_ms,
        try_cast(fields ->> 'inference_calls' as integer) as inference_calls,
        try_cast(fields ->> 'extraction_rate' as double) as extraction_rate,
        try_cast(fields ->> 'empty_responses' as integer) as empty_responses,
        try_cast(fields ->> 'partial_responses' as integer) as partial_responses,
        try_cast(fields ->> 'invalid_orders' as integer) as invalid_orders,
        try_cast(fields ->> 'over_extracted' as integer) as over_extracted
    from events
)

select * from final
