-- reward_component_dominant: the reward's gain comes from one shaping term (format, length, ...) while the task
-- components stay flat: the reward is earned on form.
-- severity: warn
-- reads: reward_components, metrics
-- requires: reward_mean
-- role: cause
-- advice: reward_design do: Lower the shaping term's weight or make it conditional on a correct answer
-- param min_points = 20      -- steps with both the component and the total reward logged
-- param min_share = 0.7      -- the term carries this share of the total's gain, or of its variance
-- param min_total_t = 2      -- the total reward rose: last third above first third by this many standard errors
-- param min_total_rise = 0.1 -- ... and by at least this share of its first-third level (floored at 0.1), as
--                               reward_plateau's min_gain: a 4% rise over hundreds of steps can be significant and
--                               is still no gain for a term to have earned
-- param max_task_share = 0.25 -- the task components together gained at most this share of the total's gain
--                               (between the thirds, and from the run's start: answers learnt in the first steps
--                               with the format, then a plateau, are learning however flat the thirds look) ...
-- param max_task_t = 1       -- ... and each is flat or down: its gain below this many SEs, or non-zero on fewer
--                               than a tenth of the steps (near zero with a handful of hits), ...
-- param max_task_ratio = 0.05 -- ... or a gain too small to matter: under this share of the shaping term's gain ...
-- param max_task_rise = 0.5  -- ... and under this share of its own first-third level (over hundreds of steps a
--                               drift of 0.044 -> 0.058 is significant, yet the task learnt next to nothing; 0.01 ->
--                               0.03 is learning)
-- param min_eval_t = 2       -- a run whose task metric (task_score, its evaluation) rose by this many standard errors
--                               from the first third of its logs to the last is learning the task: not judged (its
--                               training prompts may have grown harder while the answers got better)
-- A term that starts to carry the reward after the task was learnt (the task rose in the first half, then stayed
-- flat or fell while the term climbed: a late hack) is judged the same way on the late part of the run, middle
-- third against last third (the mart's late_* columns), with the task metric's rise over that part as the
-- exclusion.
-- Components and their statistics come from the reward_components mart (first third against last third of the
-- run); which components score the task is the dbt vars task_component_pattern / form_component_pattern. A task
-- component that is near zero with a few non-zero steps (#12 class 6) gains next to nothing: it counts as flat.
-- A run with no component named for the task is judged on the components named for neither task nor form
-- (`tool_use_reward_fn`), and then only a term named for the form (format, length, ...) can dominate. Reported at the
-- step the shaping term's rise began (the mart's onset_step; late_onset_step for the late part).
with eval_thirds as (
    select run_key, value, ntile(3) over (partition by run_key order by step) as third
    from metrics
    where metric = 'task_score' and isfinite(value)
),

-- the task metric's rise into the last third, in standard errors: from the first third (the whole run) and from
-- the middle one (its late part)
eval_rises as (
    select
        run_key,
        (avg(value) filter (where third = 3) - avg(value) filter (where third = 1))
            / greatest(sqrt(var_samp(value) filter (where third = 3) / count(*) filter (where third = 3)
                            + var_samp(value) filter (where third = 1) / count(*) filter (where third = 1)), 1e-12)
            as whole_t,
        (avg(value) filter (where third = 3) - avg(value) filter (where third = 2))
            / greatest(sqrt(var_samp(value) filter (where third = 3) / count(*) filter (where third = 3)
                            + var_samp(value) filter (where third = 2) / count(*) filter (where third = 2)), 1e-12)
            as late_t
    from eval_thirds
    group by run_key
    having count(*) filter (where third = 1) >= 3
        and count(*) filter (where third = 2) >= 3
        and count(*) filter (where third = 3) >= 3
),

-- each component's two comparisons as rows: the whole run (first third against last) and its late part (middle third
-- against last; the share there is of the gain alone)
parts as (
    select
        run_key, component, key, is_task, is_form, points, nonzero_points, onset_step, last_mean,
        'whole' as part, first_mean as from_mean, gain, gain_t, total_gain, total_t, total_first_mean as total_from,
        gain_share, greatest(gain_share, variance_share) as share, start_gain, total_start_gain
    from reward_components
    where points >= $min_points
    union all by name
    select
        run_key, component, key, is_task, is_form, points, nonzero_points, late_onset_step as onset_step, last_mean,
        'late' as part, mid_mean as from_mean, late_gain as gain, late_gain_t as gain_t, total_late_gain as total_gain,
        total_late_t as total_t, total_mid_mean as total_from, late_gain / nullif(total_late_gain, 0) as gain_share,
        late_gain / nullif(total_late_gain, 0) as share, 0 as start_gain, 0 as total_start_gain
    from reward_components
    where points >= $min_points
),

named_task as (
    select distinct run_key
    from parts
    where is_task
),

task_side as (
    select *, true as named
    from parts
    where is_task
    union all
    select *, false as named
    from parts
    where not is_form and run_key not in (select n.run_key from named_task as n)
),

runs_with_task as (
    select
        run_key,
        part,
        bool_or(named) as named,
        sum(gain) as task_gain,
        sum(start_gain) as task_start_gain,
        max(gain) as task_max_gain,
        bool_and((coalesce(gain_t, 0) < $max_task_t or nonzero_points < 0.1 * points)) as task_flat,
        -- the middle third's centre is half as far from the last third's as the first third's: half the gain
        bool_and((coalesce(gain_t, 0) < $max_task_t or nonzero_points < 0.1 * points
            or gain <= $max_task_rise / case part when 'late' then 2 else 1 end * abs(from_mean))) as task_small,
        string_agg(printf('%s %.3g -> %.3g', component, from_mean, last_mean), ', ') as task_summary
    from task_side
    group by run_key, part
),

dominant as (
    select c.*, t.task_summary, t.named
    from parts as c
    join runs_with_task as t using (run_key, part)
    left join eval_rises as e using (run_key)
    where not c.is_task
        and (t.named or c.is_form)
        and c.total_t >= $min_total_t
        and c.total_gain > 0
        and c.total_gain >= $min_total_rise * greatest(abs(c.total_from), 0.1)
        and c.share >= $min_share
        and c.gain > 0
        and t.task_gain <= $max_task_share * c.total_gain
        and t.task_start_gain <= $max_task_share * c.total_start_gain
        and (t.task_flat or (t.task_small and t.task_max_gain <= $max_task_ratio * c.gain))
        and coalesce(case c.part when 'whole' then e.whole_t else e.late_t end < $min_eval_t, true)
    -- the late part only for a run the whole-run comparison did not flag
    qualify c.part = 'whole' or not bool_or(c.part = 'whole') over (partition by c.run_key)
)

select
    run_key,
    'reward_component_dominant' as check_name,
    'warn' as severity,
    onset_step as step,
    null::bigint as step_end,
    key as metric,
    share as value,
    $min_share as threshold,
    printf('shaping term %s carried the reward''s gain %s(%.3g -> %.3g%s, %.0f%% of the total''s rise of %.3g%s) from '
           || 'step %d while the %s stayed flat%s (%s): %sthe reward is being earned on form, not on the task; lower '
           || 'that term''s weight or make it conditional on a correct answer', component,
           case part when 'late' then 'late in the run ' else '' end, from_mean, last_mean,
           case part when 'late' then ' from its middle third to its last' else '' end, 100 * gain_share, total_gain,
           case part when 'late' then ' there' else '' end, onset_step,
           case when named then 'task components' else 'other components (none is named for the task)' end,
           case part when 'late' then ' over that part' else '' end, task_summary,
           case part when 'late' then 'after the task was learnt, ' else '' end) as message
from dominant
