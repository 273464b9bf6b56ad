-- reward_component_dead: a per-function reward (rewards/<func>) never fires, or stopped firing and stayed at 0.
-- severity: warn
-- reads: history, reward_components, trainer_steps
-- requires:
-- role: cause
-- explains: reward_collapse
-- advice: reward_design do: Check the component's parser against real completions, or drop it
-- param min_points = 10      -- a component needs this many logged steps before "never moved" means anything
-- param tolerance = 1e-9     -- max - min at or below this is "constant"
-- Components are the history keys rewards/<func> or rewards/<func>/mean, with or without a train/ prefix (they are
-- not canonical metrics, so `requires` is empty: a run without per-function rewards simply has nothing to flag).
-- A component stuck at 0 never rewards anything (a format the model never produces, a parser that never matches);
-- one stuck at its maximum rewards everything. Either way it adds no signal to the advantages. A component that
-- fired in the first third of the run and is exactly 0 on nearly every step of the last third went dead (#12 class
-- 7: a format or thinking term the policy abandoned, usually for a shortcut that still earns the answer reward).
-- param min_first = 0.1      -- went dead: its first-third mean was at least this far from 0 ...
-- param max_last_share = 0.05 -- ... and it fired on at most this share of the last third's steps
with components as (  -- on the trainer's steps (trainer_steps), as every metric
    select
        h.run_key,
        regexp_extract(h.key, '^(?:train/)?rewards/([^/]+)(?:/mean)?$', 1) as component,
        h.key,
        coalesce(t.trainer_step, h.step) as step,
        h.value
    from history as h
    left join trainer_steps as t on h.run_key = t.run_key and h.step = t.logged_step
    where regexp_matches(h.key, '^(train/)?rewards/[^/]+(/mean)?$') and isfinite(h.value)
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
    printf('reward component %s stayed at %.4g on all %d logged steps (%d..%d): it %s, so it adds nothing to the '
           || 'advantages; check its parser or format against real completions, or drop it',
           component, low, n, first_step, last_step,
           case
               when abs(low) <= $tolerance then 'never fires' else 'gives every completion the same score'
           end) as message
from series
where n >= $min_points and high - low <= $tolerance

union all by name

select
    run_key,
    'reward_component_dead' as check_name,
    'warn' as severity,
    onset_step as step,
    null::bigint as step_end,
    key as metric,
    last_mean as value,
    $max_last_share as threshold,
    printf('reward function %s stopped firing: %.3g on average over the first third of the run, 0 on %.0f%% of the '
           || 'last third (from about step %d); if it is a format or thinking term, the policy dropped it for a '
           || 'shortcut: read samples after that step and check the length and entropy', component, first_mean,
           100 * (1 - last_nonzero_share), onset_step) as message
from reward_components
where points >= $min_points
    and abs(first_mean) >= $min_first
    and last_nonzero_share <= $max_last_share
