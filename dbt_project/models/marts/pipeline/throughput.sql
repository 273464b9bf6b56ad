-- Trajectories per hour and per rollout, from `rollout_complete.trajectories_count`. The overall row divides
-- by the hours the dataset's rollouts span (first to last completion, at least one hour).
with completed as (
    select dataset, service, "time", date_trunc('hour', "time") as hour, trajectories_count
    from {{ ref('stg_events__rollouts') }}
    where event = 'rollout_complete'
),

grouped as (
    select
        dataset,
        service,
        hour,
        count(*) as rollouts_completed,
        count(trajectories_count) as rollouts_with_count,
        sum(trajectories_count) as trajectories,
        avg(trajectories_count) as trajectories_per_rollout,
        greatest(epoch(max("time") - min("time")) / 3600.0, 1.0) as hours_spanned
    from completed
    group by grouping sets ((dataset, service, hour), (dataset, service))
),

final as (
    select
        case when hour is null then 'overall' else 'hour' end as grain,
        dataset,
        service,
        hour,
        rollouts_completed,
        trajectories,
        case when rollouts_with_count > 0
            then trajectories / (case when hour is null then hours_spanned else 1.0 end) end as trajectories_per_hour,
        trajectories_per_rollout,
        case when rollouts_with_count = 0 then 'no rollout_complete event carries trajectories_count' end
            as missing_reason
    from grouped
)

select * from final
