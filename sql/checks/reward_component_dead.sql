-- reward_component_dead: a per-function reward (rewards/<func>) never moves over the whole run: it never fires.
-- severity: warn
-- reads: history
-- requires:
-- param min_points = 10      -- a component needs this many logged steps before "never moved" means anything
-- param tolerance = 1e-9     -- max - min at or below this is "constant"
-- Components are the history keys rewards/<func> or rewards/<func>/mean, with or without a train/ prefix (they are
-- not canonical metrics, so `requires` is empty: a run without per-function rewards simply has nothing to flag).
-- A component stuck at 0 never rewards anything (a format the model never produces, a parser that never matches);
-- one stuck at its maximum rewards everything. Either way it adds no signal to the advantages.
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

-- one key per (run, component): the /mean form when both are logged
chosen as (
    select run_key, component, arg_min(key, case when key like '%/mean' then 0 else 1 end) as key
    from components
    group by run_key, component
),

series as (
    select
        c.run_key,
        c.component,
        c.key,
        count(*) as n,
        min(c.step) as first_step,
        max(c.step) as last_step,
        min(c.value) as low,
        max(c.value) as high
    from components as c
    join chosen using (run_key, component, key)
    group by c.run_key, c.component, c.key
)

select
    run_key,
    'reward_component_dead' as check_name,
    'warn' as severity,
    first_step as step,
    null::bigint as step_end,
    key as metric,
    low as value,
    $tolerance as threshold,
    printf('reward component %s stayed at %.4g on all %d logged steps (%d..%d): it never fires, so it adds nothing '
           || 'to the advantages; check its parser or format against real completions, or drop it',
           component, low, n, first_step, last_step) as message
from series
where n >= $min_points and high - low <= $tolerance
