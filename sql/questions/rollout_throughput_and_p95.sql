-- Rollout throughput and p95 duration, per hour and overall (rules of thumb: > 400 trajectories/hour,
-- >= 7 per rollout, p50 < 60 s, p95 < 120 s).
select
    t.grain,
    t.dataset,
    t.hour,
    t.rollouts_completed,
    round(t.trajectories_per_hour, 1) as trajectories_per_hour,
    round(t.trajectories_per_rollout, 2) as trajectories_per_rollout,
    round(r.duration_p50_s, 1) as p50_s,
    round(r.duration_p95_s, 1) as p95_s,
    round(r.duration_max_s, 1) as max_s,
    coalesce(t.missing_reason, r.missing_reason) as missing_reason
from throughput as t
left join rollout_timing as r
    on t.dataset = r.dataset and t.service = r.service and t.grain = r.grain and r.hour is not distinct from t.hour
order by t.dataset asc, t.grain desc, t.hour asc
