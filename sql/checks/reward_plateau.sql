-- reward_plateau: the reward has stopped improving: flat, within its noise, over a long window after warm-up.
-- severity: warn
-- reads: metrics
-- requires: reward_mean
-- param window = 60          -- logged steps in a plateau window, at least (shorter windows cannot tell a slow
--                               learner from a stalled one at the reward noise real runs have) ...
-- param window_share = 0.4   -- ... and at least this share of the run's logged steps (late learning is slow) ...
-- param max_window = 200     -- ... but never more than this many steps
-- param t_flat = 2           -- flat: the OLS slope of the window and of each of its halves is within this many
--                               standard errors of 0 (the half test keeps a rise-then-fall from looking flat)
-- param warmup_share = 0.1   -- windows must start after the first tenth of the run
-- param smooth = 5           -- the onset is the first step whose trailing mean of this many steps reached the
--                               plateau's mean level
-- param slowdown = 0.5       -- warn when the window's slope is, with 95% confidence, below this share of the pace
--                               the reward rose at before it (learning clearly stopped); a flat window that noise
--                               could hide a slower climb in, or a reward flat from the start, is only info
-- The reward is reward_mean (Diplomacy benchmark/reward_mean, TRL reward, verl critic/score/mean). Flat windows less
-- than half a window apart are one plateau; step_end is set when the reward rose (or fell) again.
with reward as (
    select
        run_key, step, value,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from metrics
    where metric = 'reward_mean' and isfinite(value)
),

sizes as (
    select run_key, greatest($window, least(ceil($window_share * max(n)), $max_window))::bigint as w
    from reward
    group by run_key
),

window_ends as (
    select r.run_key, r.idx as end_idx, r.step as end_step, r.n, s.w
    from reward as r
    join sizes as s using (run_key)
    where r.idx >= s.w and r.idx - s.w + 1 > $warmup_share * r.n
),

members as (
    select e.*, r.idx, r.step, r.value, r.idx > e.end_idx - e.w // 2 as second_half
    from window_ends as e
    join reward as r on r.run_key = e.run_key and r.idx between e.end_idx - e.w + 1 and e.end_idx
),

windows as (
    select
        run_key,
        end_idx,
        any_value(end_step) as end_step,
        any_value(n) as n,
        any_value(w) as w,
        min(step) as start_step,
        avg(value) as level,
        regr_count(value, idx) as k,
        regr_sxx(value, idx) as sxx, regr_syy(value, idx) as syy, regr_sxy(value, idx) as sxy,
        regr_count(value, idx) filter (where not second_half) as k1,
        regr_sxx(value, idx) filter (where not second_half) as sxx1,
        regr_syy(value, idx) filter (where not second_half) as syy1,
        regr_sxy(value, idx) filter (where not second_half) as sxy1,
        regr_count(value, idx) filter (where second_half) as k2,
        regr_sxx(value, idx) filter (where second_half) as sxx2,
        regr_syy(value, idx) filter (where second_half) as syy2,
        regr_sxy(value, idx) filter (where second_half) as sxy2
    from members
    group by run_key, end_idx
),

early as (
    select run_key, avg(value) as early_level, avg(idx) as early_idx
    from reward
    where idx <= greatest(3, ceil($warmup_share * n))
    group by run_key
),

fits as (
    select
        windows.*,
        sxy / sxx as slope,
        sqrt(greatest(syy - sxy * sxy / sxx, 0) / (k - 2) / sxx) as slope_se,
        (level - early.early_level) / greatest(end_idx - w / 2.0 - early.early_idx, 1) as earlier_pace,
        (sxy / sxx) / greatest(sqrt(greatest(syy - sxy * sxy / sxx, 0) / (k - 2) / sxx), 1e-12) as t,
        (sxy1 / sxx1) / greatest(sqrt(greatest(syy1 - sxy1 * sxy1 / sxx1, 0) / (k1 - 2) / sxx1), 1e-12) as t1,
        (sxy2 / sxx2) / greatest(sqrt(greatest(syy2 - sxy2 * sxy2 / sxx2, 0) / (k2 - 2) / sxx2), 1e-12) as t2
    from windows
    join early using (run_key)
    where k = w and k1 > 2 and k2 > 2 and sxx > 0 and sxx1 > 0 and sxx2 > 0
),

flat as (
    select *, end_idx - lag(end_idx) over (partition by run_key order by end_idx) as gap
    from fits
    where abs(t) < $t_flat and abs(t1) < $t_flat and abs(t2) < $t_flat
),

numbered as (
    select *, count(*) filter (where gap is null or gap > w // 2) over (partition by run_key order by end_idx)
        as plateau
    from flat
),

plateaus as (
    select
        run_key,
        plateau,
        arg_min(start_step, end_idx) as window_start,
        arg_min(end_step, end_idx) as detected_at,
        arg_min(level, end_idx) as level,
        arg_min(t, end_idx) as t,
        arg_min(slope + 2 * slope_se < $slowdown * earlier_pace, end_idx) as clearly_stopped,
        any_value(w) as w,
        max(end_step) as last_step,
        max(end_idx) as last_idx,
        any_value(n) as n
    from numbered
    group by run_key, plateau
),

smoothed as (
    select run_key, step, avg(value) over (partition by run_key order by idx rows between $smooth - 1 preceding
        and current row) as recent
    from reward
),

onsets as (
    select
        p.*,
        coalesce((
            select min(s.step) from smoothed as s
            where s.run_key = p.run_key and s.step between p.window_start and p.detected_at
                and s.recent >= p.level
        ), p.window_start) as onset
    from plateaus as p
)

select
    run_key,
    'reward_plateau' as check_name,
    case when clearly_stopped then 'warn' else 'info' end as severity,
    onset as step,
    case when last_idx < n then last_step end as step_end,
    'reward_mean' as metric,
    level as value,
    $t_flat as threshold,
    printf('reward has been flat at about %.3g since step %d (no significant trend over %d logged steps, t = %.1f); '
           || case when clearly_stopped
               then 'the policy stopped improving: check reward variance and entropy, then try a higher learning '
                    || 'rate, a weaker KL penalty or harder prompts'
               else 'at this noise a slow climb cannot be ruled out: watch it, or log more samples per step to tell'
           end, level, onset, w, t) as message
from onsets
