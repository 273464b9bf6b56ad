-- reward_component_dominant: one shaping term (format, length, ...) carries most of the reward's movement while the
-- task component stays flat.
-- severity: warn
-- reads: history, metrics
-- requires: reward_mean
-- param min_points = 20      -- steps with both the component and the total reward logged
-- param min_share = 0.7      -- the term's share of the total reward's variance, cov(term, total) / var(total)
-- param max_task_t = 1       -- "flat": the task component's OLS slope over the run is below this many SEs
-- param task_pattern = (acc|correct|solv|answer|exact|match|pass|score|math|code|task|verif)
--                             -- regex on the function name that marks task components; every other is shaping
-- Components are the history keys rewards/<func> or rewards/<func>/mean (with or without train/); the total is
-- reward_mean at the same steps. When the reward is the sum of its terms the shares add up to 1. Judged over the
-- whole run (the question is where the run's reward came from); a run with no recognisable task component is not
-- judged. Reported at the run's first step.
with components as (
    select
        run_key,
        regexp_extract(key, '^(?:train/)?rewards/([^/]+)(?:/mean)?$', 1) as component,
        key,
        step,
        value
    from history
    where regexp_matches(key, '^(train/)?rewards/[^/]+(/mean)?$') and isfinite(value)
),

chosen as (
    select run_key, component, arg_min(key, case when key like '%/mean' then 0 else 1 end) as key
    from components
    group by run_key, component
),

paired as (
    select c.run_key, c.component, c.key, c.step, c.value, r.value as total
    from components as c
    join chosen using (run_key, component, key)
    join metrics as r on r.run_key = c.run_key and r.step = c.step and r.metric = 'reward_mean'
    where isfinite(r.value)
),

stats as (
    select
        run_key,
        component,
        key,
        regexp_matches(lower(component), $task_pattern) as is_task,
        count(*) as n,
        min(step) as first_step,
        covar_samp(value, total) / nullif(var_samp(total), 0) as share,
        regr_slope(value, step) as slope,
        regr_slope(value, step) / nullif(sqrt(greatest(regr_syy(value, step) - regr_sxy(value, step)
            * regr_sxy(value, step) / nullif(regr_sxx(value, step), 0), 0) / (count(*) - 2)
            / nullif(regr_sxx(value, step), 0)), 0) as slope_t,
        arg_min(value, step) as first_value,
        arg_max(value, step) as last_value
    from paired
    group by run_key, component, key
    having count(*) >= $min_points
),

task as (
    select
        run_key,
        max(coalesce(slope_t, 0)) as task_t,
        string_agg(printf('%s %.3g -> %.3g', component, first_value, last_value), ', ') as task_summary
    from stats
    where is_task
    group by run_key
),

dominant as (
    select s.*, t.task_t, t.task_summary
    from stats as s
    join task as t using (run_key)
    where not s.is_task and s.share >= $min_share and t.task_t < $max_task_t
)

select
    run_key,
    'reward_component_dominant' as check_name,
    'warn' as severity,
    first_step as step,
    null::bigint as step_end,
    key as metric,
    share as value,
    $min_share as threshold,
    printf('shaping term %s carries %.0f%% of the reward''s variance (%.3g -> %.3g) while the task component stayed '
           || 'flat (%s; t = %.1f): the reward is being earned on form, not on the task; lower that term''s '
           || 'weight or make it conditional on a correct answer', component, 100 * share, first_value, last_value,
           task_summary, task_t) as message
from dominant
