-- How long do rollouts take? Duration = `rollout_complete.total_duration_ms` (the producer's field; there is
-- no `duration_s`). One row per (dataset, service, hour) and one `overall` row per (dataset, service).
-- When no completed rollout carries the field, the figures are null and `missing_reason` says why. A NaN or
-- infinite duration is no duration (one NaN would make every quantile NaN): it is left out of the figures and
-- counted in `rollouts_nonfinite`, as eval_summary counts its `nonfinite_points`.
with completed as (
    select
        dataset,
        service,
        date_trunc('hour', "time") as hour,
        case when isfinite(total_duration_ms) then total_duration_ms / 1000.0 end as duration_s,
        not isfinite(total_duration_ms) as nonfinite
    from {{ ref('stg_events__rollouts') }}
    where event = 'rollout_complete'
),

grouped as (
    select
        dataset,
        service,
        hour,
        count(*) as rollouts_completed,
        count(duration_s) as rollouts_timed,
        count(*) filter (where nonfinite) as rollouts_nonfinite,
        quantile_cont(duration_s, 0.5) as duration_p50_s,
        quantile_cont(duration_s, 0.95) as duration_p95_s,
        quantile_cont(duration_s, 0.99) as duration_p99_s,
        max(duration_s) as duration_max_s
    from completed
    group by grouping sets ((dataset, service, hour), (dataset, service))
),

final as (
    select
        case when hour is null then 'overall' else 'hour' end as grain,
        *,
        case
            when rollouts_timed = 0 and rollouts_nonfinite > 0 then 'every total_duration_ms is NaN or infinite'
            when rollouts_timed = 0 then 'no rollout_complete event carries total_duration_ms'
        end as missing_reason
    from grouped
)

select * from final
