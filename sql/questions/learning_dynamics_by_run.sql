-- How did each run's learning signals move? First vs last tenth of the run, per canonical metric.
with phases as (
    select
        run_key,
        case when progress <= 0.1 then 'start' when progress >= 0.9 then 'end' end as phase,
        reward_mean, kl, entropy, grad_norm, response_length_mean
    from learning_dynamics
)

select
    r.name,
    round(avg(p.reward_mean) filter (where p.phase = 'start'), 3) as reward_start,
    round(avg(p.reward_mean) filter (where p.phase = 'end'), 3) as reward_end,
    round(avg(p.kl) filter (where p.phase = 'end'), 4) as kl_end,
    round(avg(p.entropy) filter (where p.phase = 'start'), 3) as entropy_start,
    round(avg(p.entropy) filter (where p.phase = 'end'), 3) as entropy_end,
    round(avg(p.response_length_mean) filter (where p.phase = 'start'), 1) as length_start,
    round(avg(p.response_length_mean) filter (where p.phase = 'end'), 1) as length_end,
    round(max(p.grad_norm), 3) as grad_norm_max
from phases as p
join runs as r using (run_key)
group by r.name
order by r.name
