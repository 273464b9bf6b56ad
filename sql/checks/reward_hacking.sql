-- reward_hacking: the training reward keeps rising while the task metric (evaluation / task score) does not.
-- severity: warn
-- reads: metrics, reward_components, history, trainer_steps
-- requires: reward_mean
-- role: cause
-- advice: samples do: Read samples for the loophole the policy exploits
-- advice: reward_design do: Harden the verifier and the per-function rewards against it
-- param task_points = 5      -- each window spans this many consecutive task-metric logs (evaluations are sparse),
--                               or two, four or eight times as many
-- param min_reward_points = 10 -- fewest reward logs inside a window
-- param min_reward_t = 4     -- the reward's OLS slope over the window must be this many standard errors above 0
-- param min_rise_noise = 4   -- and its fitted rise over the window at least this many times the reward's residual
--                               noise (autocorrelated noise inflates t; a real climb is also large)
-- param max_task_t = 0       -- while the task metric's OLS slope is at most this many standard errors (0: its
--                               fitted change is flat or down; a few noisy evaluations cannot show "insignificant")
-- param sustain = 2          -- in at least this many consecutive windows
-- param min_catch_up_sd = 1.5 -- an episode that ended, after which the task's mean (over everything after it, or
--                               over the run's last task_points logs: a slow follower) stands this many of its
--                               standard deviations above its mean during it, is dismissed: the task lagged the
--                               reward (the form learnt first, the answers after it); it was not left behind. Its
--                               spread, not its standard error: a floor of 0.05 that edges up to 0.06 is
--                               significant, not learning
-- param min_follow_t = 3     -- a task metric that follows the reward over the whole run (its slope against the reward
--                               logged at or before each evaluation this many SEs above 0) ...
-- param min_behind_t = 2     -- ... is left behind in a window only where its change there falls this many SEs short
--                               of what that slope makes of the reward's rise: a validation accuracy on 16 prompts a
--                               step moves by 0.12 from one log to the next, and ten of them often trend down while
--                               the reward creeps up 0.06, though the task rose with the reward from 0.43 to 0.73
-- param min_points = 20      -- without a task metric: steps with a component and the total reward logged
-- param min_total_t = 2      -- ... the total reward rose: last third above first third by this many standard errors
-- param min_total_rise = 0.1 -- ... and by at least this share of its first-third level (floored at 0.1), as
--                               reward_plateau's min_gain: a 4% rise over hundreds of steps can be significant and
--                               is still no gain for a term to have earned; with a task metric too, the window's
--                               fitted rise against the reward's fitted level at its start (a training score
--                               creeping 0.947 -> 0.975 beside a flat validation is a train/test gap at the ceiling)
-- param max_task_share = 0.25 -- ... while the task components gained at most this share of it (between the thirds,
--                               and from the run's start: answers learnt in the first steps with the format, then a
--                               plateau, are learning, however flat the thirds look), each of them flat:
-- param max_component_t = 1  -- its gain below this many SEs (flat or down), or non-zero on under a tenth of the steps,
-- param max_task_ratio = 0.05 -- or too small to matter: under this share of the total's gain ...
-- param max_task_rise = 0.5  -- ... and of its own first-third level (as in reward_component_dominant)
-- param max_penalty_share = 0.2 -- a penalty guard: a reward function that is exactly 0 on all but at most this
--                               share of the steps and negative on the others, named as a guard (anti-cheating,
--                               safety, violation penalties): each step it fired, the policy tried what it guards
--                               against (#12 class 5)
-- The task metric is task_score (TRL eval/accuracy, verl val-core/*/acc, Diplomacy game/avg_sc_count). Reported at
-- the task log that closes the first such window (the step it became visible). A run with no task metric but with
-- per-function rewards is judged on them (the reward_components mart): the total rose while the components that
-- score the task (correctness, answers, ...) gained next to nothing, reported where the rise began (the step the
-- component that carried the most of it began to move: the mart's onset_step).
with task as (
    select
        run_key, step, value,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from metrics
    where metric = 'task_score' and isfinite(value)
),

-- windows of task_points consecutive task logs, and of two, four and eight times as many: evaluations every few
-- steps make the short windows too short for the reward's climb to stand out of its noise
scales as (
    select unnest([1, 2, 4, 8]) as scale
),

task_windows as (
    select
        e.run_key, e.step, e.value, e.idx, e.n, s.scale,
        arg_min(t.step, t.idx) as start_step,
        arg_min(t.value, t.idx) as task_from,
        regr_count(t.value, t.step) as k,
        regr_slope(t.value, t.step) as task_slope,
        regr_sxx(t.value, t.step) as sxx,
        regr_syy(t.value, t.step) as syy,
        regr_sxy(t.value, t.step) as sxy
    from task as e
    cross join scales as s
    join task as t on e.run_key = t.run_key and t.idx between e.idx - s.scale * $task_points + 1 and e.idx
    group by e.run_key, e.step, e.value, e.idx, e.n, s.scale
),

task_fits as (
    select
        *,
        sqrt(greatest(syy - sxy * sxy / sxx, 0) / (k - 2) / sxx) as task_slope_se,
        task_slope / greatest(task_slope_se, 1e-12) as task_t
    from task_windows
    where k = scale * $task_points and k > 2 and sxx > 0
),

train_reward as (
    select run_key, step, value
    from metrics
    where metric = 'reward_mean' and isfinite(value)
),

-- each evaluation against the reward logged at or before it, over the whole run (param min_follow_t)
paired as (
    select t.run_key, t.value as task_value, r.value as reward_value
    from task as t
    asof join train_reward as r on t.run_key = r.run_key and t.step >= r.step
),

follows as (
    select
        run_key,
        regr_slope(task_value, reward_value) as follow_slope,
        regr_slope(task_value, reward_value) / greatest(sqrt(greatest(
            regr_syy(task_value, reward_value) - regr_sxy(task_value, reward_value) ^ 2
            / regr_sxx(task_value, reward_value), 0) / (regr_count(task_value, reward_value) - 2)
            / regr_sxx(task_value, reward_value)), 1e-12) as follow_t
    from paired
    group by run_key
    having regr_count(task_value, reward_value) > 2 and regr_sxx(task_value, reward_value) > 0
),

reward_fits as (
    select
        t.run_key,
        t.step,
        t.scale,
        count(r.value) as reward_n,
        regr_slope(r.value, r.step) as reward_slope,
        regr_sxx(r.value, r.step) as rsxx,
        regr_syy(r.value, r.step) as rsyy,
        regr_sxy(r.value, r.step) as rsxy,
        avg(r.value) as reward_level,
        arg_min(r.value, r.step) as reward_from,
        arg_max(r.value, r.step) as reward_to
    from task_fits as t
    join train_reward as r on t.run_key = r.run_key and r.step between t.start_step and t.step
    group by t.run_key, t.step, t.scale
),

windows as (
    select
        t.*,
        r.reward_slope / greatest(sqrt(greatest(r.rsyy - r.rsxy * r.rsxy / r.rsxx, 0) / (r.reward_n - 2) / r.rsxx),
                                  1e-12) as reward_t,
        r.reward_slope * (t.step - t.start_step) as reward_rise,
        sqrt(greatest(r.rsyy - r.rsxy * r.rsxy / r.rsxx, 0) / (r.reward_n - 2)) as reward_noise,
        r.reward_level - r.reward_slope * (t.step - t.start_step) / 2 as reward_start,
        r.reward_from,
        r.reward_to
    from task_fits as t
    join reward_fits as r using (run_key, step, scale)
    where r.reward_n >= $min_reward_points and r.rsxx > 0
),

-- the task logs at which a window ends that shows it (the shortest such window); where the task follows the
-- reward over the run, only a window whose task change falls well short of what the reward's rise predicts
shown as (
    select w.*
    from windows as w
    left join follows as f using (run_key)
    where w.reward_t >= $min_reward_t and w.reward_rise >= $min_rise_noise * w.reward_noise
        and w.task_t <= $max_task_t
        and w.reward_rise >= $min_total_rise * greatest(abs(w.reward_start), 0.1)
        and (f.follow_t is null or f.follow_t < $min_follow_t
            or f.follow_slope * w.reward_rise - w.task_slope * (w.step - w.start_step)
            >= $min_behind_t * w.task_slope_se * (w.step - w.start_step))
    qualify row_number() over (partition by w.run_key, w.step order by w.scale) = 1
),

hacking as (
    select *, idx - lag(idx) over (partition by run_key order by step) as gap
    from shown
),

-- windows less than a window apart are one episode
numbered as (
    select *, count(*) filter (where gap is null or gap > $task_points) over (partition by run_key order by step)
        as episode
    from hacking
),

component_rows as (  -- the components' values on the trainer's steps (trainer_steps), as every metric
    select h.run_key, h.key, h.value, coalesce(t.trainer_step, h.step) as step
    from history as h
    semi join reward_components as c on h.run_key = c.run_key and h.key = c.key
    left join trainer_steps as t on h.run_key = t.run_key and h.step = t.logged_step
),

episodes as (
    select
        run_key,
        min(step) as onset,
        max(step) as last_step,
        max(idx) as last_idx,
        any_value(n) as n,
        arg_min(start_step, step) as from_step,
        arg_min(reward_rise, step) as reward_rise,
        arg_min(task_from, step) as task_from,
        arg_max(value, step) as task_to,
        arg_min(reward_t, step) as reward_t,
        arg_min(task_t, step) as task_t,
        arg_min(task_slope * (step - start_step), step) as task_change
    from numbered
    group by run_key, episode
    having count(*) >= $sustain
),

-- the task around each episode that ended: during it, everything after it, and the run's last task_points logs
around as (
    select
        e.run_key, e.onset,
        count(*) filter (where t.step <= e.last_step) as n_during,
        count(*) filter (where t.step > e.last_step) as n_after,
        avg(t.value) filter (where t.step <= e.last_step) as during_mean,
        var_samp(t.value) filter (where t.step <= e.last_step) as during_var,
        avg(t.value) filter (where t.step > e.last_step) as after_mean,
        var_samp(t.value) filter (where t.step > e.last_step) as after_var,
        avg(t.value) filter (where t.idx > e.n - $task_points) as end_mean,
        var_samp(t.value) filter (where t.idx > e.n - $task_points) as end_var
    from episodes as e
    join task as t on e.run_key = t.run_key and e.from_step <= t.step
    where e.last_idx < e.n
    group by e.run_key, e.onset
),

-- the episodes the task caught up with afterwards, or by the run's end (param min_catch_up_sd)
caught_up as (
    select run_key, onset
    from around
    where n_after >= $task_points and n_during >= 2
        and greatest(
            (after_mean - during_mean) / greatest(sqrt((after_var + during_var) / 2), 1e-12),
            (end_mean - during_mean) / greatest(sqrt((end_var + during_var) / 2), 1e-12)
        ) >= $min_catch_up_sd
),

left_behind as (
    select e.*
    from episodes as e
    anti join caught_up as c on e.run_key = c.run_key and e.onset = c.onset
)

select
    run_key,
    'reward_hacking' as check_name,
    'warn' as severity,
    onset as step,
    case when last_idx < n then last_step end as step_end,
    'reward_mean' as metric,
    reward_rise as value,
    $min_reward_t as threshold,
    printf('reward rose by %.3g between steps %d and %d (t = %.1f) while the task metric''s trend over them was '
           || '%+.3g (t = %.1f; %.3g at the first evaluation, %.3g at the last): the policy is gaining reward without '
           || 'getting better at the task; inspect samples and the per-function rewards for a shaping term or a '
           || 'verifier loophole it exploits',
           reward_rise, from_step, onset, reward_t, task_change, task_t, task_from, task_to) as message
from left_behind

union all by name

select
    c.run_key,
    'reward_hacking' as check_name,
    'warn' as severity,
    arg_max(c.onset_step, c.gain) filter (where not c.is_task) as step,
    null::bigint as step_end,
    'reward_mean' as metric,
    any_value(c.total_gain) as value,
    $max_task_share as threshold,
    printf('reward rose by %.3g (t = %.1f) while the components that score the task gained %.3g (%s): the policy is '
           || 'gaining reward without getting better at the task; inspect samples and the per-function rewards for '
           || 'a shaping term or a verifier loophole it exploits', any_value(c.total_gain), any_value(c.total_t),
           sum(c.gain) filter (where c.is_task),
           string_agg(printf('%s %.3g -> %.3g', c.component, c.first_mean, c.last_mean), ', ')
               filter (where c.is_task)) as message
from reward_components as c
where c.points >= $min_points
    and c.run_key not in (select run_key from metrics where metric = 'task_score')
group by c.run_key
having bool_or(c.is_task)
    and any_value(c.total_t) >= $min_total_t
    and any_value(c.total_gain) > 0
    and any_value(c.total_gain) >= $min_total_rise * greatest(abs(any_value(c.total_first_mean)), 0.1)
    and sum(c.gain) filter (where c.is_task) <= $max_task_share * any_value(c.total_gain)
    and sum(c.start_gain) filter (where c.is_task) <= $max_task_share * any_value(c.total_start_gain)
    and (bool_and((coalesce(c.gain_t, 0) < $max_component_t or c.nonzero_points < 0.1 * c.points))
            filter (where c.is_task)
        or (bool_and((coalesce(c.gain_t, 0) < $max_component_t or c.nonzero_points < 0.1 * c.points
                or c.gain <= $max_task_rise * abs(c.first_mean))) filter (where c.is_task)
            and max(c.gain) filter (where c.is_task) <= $max_task_ratio * any_value(c.total_gain)))

union all by name

select
    h.run_key,
    'reward_hacking' as check_name,
    'warn' as severity,
    min(h.step) filter (where h.value < 0) as step,
    max(h.step) filter (where h.value < 0) as step_end,
    c.key as metric,
    min(h.value) as value,
    0 as threshold,
    printf('penalty %s fired on %d of %d logged steps (down to %.3g; first at steps %s): each time the policy tried '
           || 'what it guards against; read the samples of those steps and harden the verifier before the policy '
           || 'finds a variant the penalty misses', c.component, count(*) filter (where h.value < 0), count(*),
           min(h.value), array_to_string(list(h.step order by h.step) filter (where h.value < 0)[1:5], ', '))
        as message
from reward_components as c
join component_rows as h on c.run_key = h.run_key and c.key = h.key and isfinite(h.value)
where c.points >= $min_points
    -- named as a guard: a term that is never positive but scores the task itself (a trading risk, a cost) is no
    -- guard against an exploit, and its firing is the task being hard, not the policy probing a loophole
    and regexp_matches(lower(c.component), '(penalt|cheat|hack|exploit|violat|guard|safety|unsafe|forbid|illegal)')
group by h.run_key, c.key, c.component
having bool_and(h.value <= 0)
    and count(*) filter (where h.value < 0) between 1 and $max_penalty_share * count(*)
