-- Where does step time go? Each run's phases by share of step time; a phase above 60% is the bottleneck.
select r.name, s.phase, s.steps, round(s.mean_s, 2) as mean_s, round(100 * s.share_of_step, 1) as share_pct,
    s.is_bottleneck
from step_time_breakdown as s
join runs as r using (run_key)
order by r.name, s.rank_in_run
