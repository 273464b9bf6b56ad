-- Errors and completion. error_rate = error events / all events, where an error event is `rollout_error`,
-- `sweep_run_failed`, or a `span_duration` whose status is error. completion_rate = rollout_complete /
-- rollout_start. status: healthy below 1% errors, degraded below 5%, else unhealthy (grpo-signals §3).
-- One row per (dataset, hour) and an `overall` row per dataset.
with events as (
    select
        dataset,
        date_trunc('hour', "time") as hour,
        event,
        event in ('rollout_error', 'sweep_run_failed')
            or (event = 'span_duration' and lower(coalesce(fields ->> 'status', '')) in ('error', 'failed'))
            as is_error
    from {{ ref('stg_lake__events') }}
),

grouped as (
    select
        dataset,
        hour,
        count(*) as events,
        count(*) filter (where is_error) as error_events,
        count(*) filter (where event = 'rollout_start') as rollouts_started,
        count(*) filter (where event = 'rollout_complete') as rollouts_completed,
        count(*) filter (where event = 'rollout_error') as rollouts_failed
    from events
    group by grouping sets ((dataset, hour), (dataset))
),

final as (
    select
        case when hour is null then 'overall' else 'hour' end as grain,
        *,
        error_events / events as error_rate,
        rollouts_completed / nullif(rollouts_started, 0) as completion_rate,
        case
            when error_events / events < 0.01 then 'healthy'
            when error_events / events < 0.05 then 'degraded'
            else 'unhealthy'
        end as status,
        case when rollouts_started = 0 then 'no rollout_start events: completion rate unknown' end as missing_reason
    from grouped
)

select * from final
