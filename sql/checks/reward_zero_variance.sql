-- reward_zero_variance: most reward groups have zero variance, so GRPO advantages are 0 and nothing is learned.
-- severity: warn
-- reads: metrics
-- requires: frac_reward_zero_std | reward_std
-- role: cause
-- explains: reward_plateau, grad_norm_vanishing, too_conservative
-- advice: prompts do: Train on prompts the model solves only sometimes (filter those every sample solves or fails)
-- advice: generations up: Sample more generations per prompt
-- advice: reward_design do: Use a finer-grained reward
-- param max_share = 0.5      -- share of zero-variance groups that means little learning signal is left
-- param error_share = 0.9    -- nearly every group tied over the whole episode: no learning signal at all
-- param smooth = 10          -- judged on the mean share over the last this many logged steps
-- param sustain = 5          -- for at least this many consecutive logged steps
-- param zero_std = 1e-9      -- without frac_reward_zero_std: a step whose reward_std is below this is "all tied"
-- The share is frac_reward_zero_std (TRL frac_reward_zero_std, Diplomacy processing/skip_rate). A run that logs only
-- reward_std counts each step whose reward_std is 0 as fully tied (a constant reward: always 0 or always 1) and the
-- others as not tied at all: its share is at least that of the tied steps, so the message says "at least". Either
-- way the flag's value is a share of tied groups, so its metric is frac_reward_zero_std.
with measured as (
    select run_key, step, value as share, false as from_std
    from metrics
    where metric = 'frac_reward_zero_std' and isfinite(value)
),

from_std as (
    select run_key, step, case when abs(value) < $zero_std then 1.0 else 0.0 end as share, true as from_std
    from metrics
    where metric = 'reward_std' and isfinite(value)
        and run_key not in (select run_key from measured)
),

shares as (
    select * from measured
    union all
    select * from from_std
),

smoothed as (
    select
        *,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n,
        avg(share) over (partition by run_key order by step rows between $smooth - 1 preceding and current row)
            as level
    from shares
),

high as (
    select *, idx - row_number() over (partition by run_key order by step) as episode
    from smoothed
    where level >= $max_share
),

episodes as (
    select
        run_key,
        bool_or(from_std) as from_std,
        min(step) as onset,
        max(step) as last_step,
        max(idx) as last_idx,
        any_value(n) as n,
        count(*) as steps,
        avg(level) as mean_share
    from high
    group by run_key, episode
    having count(*) >= $sustain
)

select
    run_key,
    'reward_zero_variance' as check_name,
    case when mean_share >= $error_share then 'error' else 'warn' end as severity,
    onset as step,
    case when last_idx < n then last_step end as step_end,
    'frac_reward_zero_std' as metric,
    mean_share as value,
    $max_share as threshold,
    printf('%s reward groups had zero variance (mean over %d-step windows%s) for %d logged steps from step '
           || '%d: their advantages are 0 and they teach nothing; train on prompts the model solves only sometimes '
           || '(groups tie when every sample is right, or every one wrong), sample more generations per prompt, or '
           || 'use a finer-grained reward',
           -- every group tied on every step is "all", not "at least 100%"; a share that rounds to 100 is "over 99%"
           case
               when mean_share >= 1 - 1e-9 then 'all'
               when mean_share >= 0.995 then 'over 99% of'
               else printf('%s%.0f%% of', case when from_std then 'at least ' else '' end, 100 * mean_share)
           end,
           $smooth::bigint, case when from_std then '; a step of reward_std 0 counts as all tied' else '' end, steps,
           onset) as message
from episodes
