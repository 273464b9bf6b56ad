-- Any errors, and the error rate? Health per hour and overall (healthy < 1% errors, degraded < 5%, else
-- unhealthy), with the rollout completion rate.
select grain, dataset, hour, events, error_events, round(100 * error_rate, 2) as error_pct,
    round(100 * completion_rate, 1) as completion_pct, status
from health
order by dataset asc, grain desc, hour asc
