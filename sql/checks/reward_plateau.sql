-- reward_plateau: the reward never improved (warn), or rose and has been flat since (info: converged; warn: stalled,
-- when the policy got no update on it).
-- severity: warn
-- reads: metrics
-- requires: reward_mean
-- role: outcome
-- advice: reward_signal do: Check that rewards vary within groups (reward_std)
-- advice: learning_rate up: Raise the learning rate, or lower the KL penalty
-- advice: task do: Check that the task is not too hard for the model
-- param window = 60          -- logged steps in a plateau window, at least (shorter windows cannot tell a slow
--                               learner from a stalled one at the reward noise real runs have) ...
-- param window_share = 0.4   -- ... and at least this share of the run's logged steps (late learning is slow) ...
-- param max_window = 200     -- ... but never more than this many steps
-- param t_flat = 2           -- flat: the OLS slope of the window and of each of its halves is within this many
--                               standard errors of 0 (the half test keeps a rise-then-fall from looking flat)
-- param warmup_share = 0.1   -- windows must start after the first tenth of the run
-- param smooth = 5           -- the onset is the first step whose trailing mean of this many steps reached the
--                               plateau's mean level
-- param min_points = 9       -- logged steps a run needs before "never improved" is judged (three per third)
-- param t_gain = 2           -- improved: the last (or middle) third's mean is this many standard errors above the
--                               first tenth's ...
-- param min_gain = 0.1       -- ... and above it by this share of the first tenth's level (floored at 0.1), in that
--                               third or in the last tenth (a late rise): a gain of 5% over 400 steps can be
--                               significant on a dense log with autocorrelated noise and is still no learning
-- param start_points = 3     -- ... or above the run's first this many logged steps so, and by at least ...
-- param start_rise_sd = 5    -- ... this many standard deviations of the last third: a reward that saturates within
--                               the first tenth (0.68 to 1.0 in four steps, then 0.998 +- 0.004) has a first tenth
--                               already near the top; noise and warm-up make a run's first steps lower by a
--                               standard deviation or two, and a plateau's by no more
-- param no_update = 0.0001    -- a plateau after a rise on whose logged steps the grad norm was below this (as
--                               grad_norm_vanishing's floor) ...
-- param frozen_share = 0.5   -- ... on at least this share of them, leaving out steps whose groups all tied, stalled
--                               (warn): the policy stopped being updated, it did not converge
-- param max_fall = 0.25      -- a last third below the first tenth by more than this share (and significantly) fell:
--                               reward_collapse's; a smaller fall, a run that sagged from a lucky start, never improved;
--                               so did a last third that fell by this share of the middle third's level, and
--                               significantly, from a middle third min_gain above the first tenth: a run that
--                               rose within its first tenth (0.2 to 0.7 in four logs), held ~0.85 and collapsed
--                               did learn, however noisy that first tenth makes the comparison with it
-- The reward is reward_mean (Diplomacy benchmark/reward_mean, TRL reward, verl critic/score/mean).
-- The first tenth is at least 3 logged steps (the message names them when that is more than a tenth). Two findings:
-- * never improved (warn): neither the last nor the middle third of the run is above its first tenth, significantly
--   (Welch t >= t_gain) and by min_gain, nor above its first start_points logged steps so, and the last third has
--   not fallen below the first tenth by more than max_fall (a fall
--   is reward_collapse's, and a run that rose and then collapsed did improve); judged over the whole run, so short
--   and coarse logs (25-50 points) are judged too;
-- * converged (info): after a significant rise, a flat window (below) above the first tenth's mean (a flat stretch
--   before a late rise is not where the run converged); the message states the gain. A rise that stops is
--   convergence as far as the reward alone can tell: telling a stall "far below where its trend was heading" from
--   it took shape rules that fired on level shifts and noisy saturation in runs nobody here wrote; the causes
--   (entropy collapse, zero-variance groups, a KL penalty too strong) are what other checks flag. One cause is
--   read here, as it says the plateau is no convergence at all: a flat reward while the policy got no update
--   (params no_update, frozen_share; steps whose groups all tied are left out, as a saturated task ties them) is a
--   stall (warn). Flat windows
--   less than half a window apart are one plateau; step_end is set when the reward rose (or fell) again.
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

windows as (  -- at every logged step, OLS over the window of the last w logged steps and over each of its halves
    select
        run_key,
        end_idx,
        end_step,
        n,
        w,
        start_step,
        level,
        k, sxx, syy, sxy,
        k1, sxx1, syy1, sxy1,
        k2, sxx2, syy2, sxy2
    from (
        select
            r.run_key,
            r.idx as end_idx,
            r.step as end_step,
            r.n,
            s.w,
            min(r.step) over whole as start_step,
            avg(r.value) over whole as level,
            regr_count(r.value, r.idx) over whole as k,
            regr_sxx(r.value, r.idx) over whole as sxx,
            regr_syy(r.value, r.idx) over whole as syy,
            regr_sxy(r.value, r.idx) over whole as sxy,
            regr_count(r.value, r.idx) over first_half as k1,
            regr_sxx(r.value, r.idx) over first_half as sxx1,
            regr_syy(r.value, r.idx) over first_half as syy1,
            regr_sxy(r.value, r.idx) over first_half as sxy1,
            regr_count(r.value, r.idx) over second_half as k2,
            regr_sxx(r.value, r.idx) over second_half as sxx2,
            regr_syy(r.value, r.idx) over second_half as syy2,
            regr_sxy(r.value, r.idx) over second_half as sxy2
        from reward as r
        join sizes as s using (run_key)
        -- frames as long as the run's window w (sqlfluff's DuckDB grammar takes no expression as a frame offset)
        window
            whole as (
                partition by r.run_key order by r.idx
                rows between s.w - 1 preceding and current row  -- noqa: PRS
            ),
            first_half as (
                partition by r.run_key order by r.idx
                rows between s.w - 1 preceding and s.w // 2 preceding  -- noqa: PRS
            ),
            second_half as (
                partition by r.run_key order by r.idx
                rows between s.w // 2 - 1 preceding and current row  -- noqa: PRS
            )
    ) as framed
    where end_idx >= w and end_idx - w + 1 > $warmup_share * n  -- whole windows, after the warm-up
),

fits as (
    select
        *,
        sxy / sxx as slope,
        (sxy / sxx) / greatest(sqrt(greatest(syy - sxy * sxy / sxx, 0) / (k - 2) / sxx), 1e-12) as t,
        (sxy1 / sxx1) / greatest(sqrt(greatest(syy1 - sxy1 * sxy1 / sxx1, 0) / (k1 - 2) / sxx1), 1e-12) as t1,
        (sxy2 / sxx2) / greatest(sqrt(greatest(syy2 - sxy2 * sxy2 / sxx2, 0) / (k2 - 2) / sxx2), 1e-12) as t2
    from windows
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
),

-- the plateaus' logged grad norms, and those too small for an update its groups' ties do not explain
frozen as (
    select
        o.run_key,
        o.plateau,
        count(*) as grad_k,
        count(*) filter (where m.value < $no_update and t.step is null) as frozen_k,
        frozen_k > 0 and frozen_k >= $frozen_share * count(*) filter (where t.step is null) as stalled
    from onsets as o
    join metrics as m
        on o.run_key = m.run_key and m.metric = 'grad_norm' and isfinite(m.value)
        and m.step between o.onset and o.last_step
    left join tied_steps() as t on m.run_key = t.run_key and m.step = t.step
    group by o.run_key, o.plateau
),

thirds as (
    select
        run_key,
        any_value(n) as n,
        min(step) as first_step,
        max(step) filter (where idx <= greatest(3, ceil(n / 10))) as first_end,
        avg(value) filter (where idx <= greatest(3, ceil(n / 10))) as first_mean,
        var_samp(value) filter (where idx <= greatest(3, ceil(n / 10))) as first_var,
        count(*) filter (where idx <= greatest(3, ceil(n / 10))) as first_k,
        avg(value) filter (where idx > n / 3 and idx <= n - n / 3) as mid_mean,
        var_samp(value) filter (where idx > n / 3 and idx <= n - n / 3) as mid_var,
        count(*) filter (where idx > n / 3 and idx <= n - n / 3) as mid_k,
        avg(value) filter (where idx <= $start_points) as start_mean,
        var_samp(value) filter (where idx <= $start_points) as start_var,
        count(*) filter (where idx <= $start_points) as start_k,
        avg(value) filter (where idx > n - greatest(3, ceil(n / 10))) as end_mean,
        avg(value) filter (where idx > n - n / 3) as last_mean,
        var_samp(value) filter (where idx > n - n / 3) as last_var,
        count(*) filter (where idx > n - n / 3) as last_k
    from reward
    group by run_key
    having any_value(n) >= $min_points
),

rises as (
    select
        *,
        (last_mean - first_mean) / greatest(sqrt(first_var / first_k + last_var / last_k), 1e-12) as t_rise,
        (mid_mean - first_mean) / greatest(sqrt(first_var / first_k + mid_var / mid_k), 1e-12) as t_mid,
        (last_mean - first_mean) / greatest(abs(first_mean), 0.1) as last_gain,
        (greatest(last_mean, end_mean) - first_mean) / greatest(abs(first_mean), 0.1) as gain,
        (mid_mean - first_mean) / greatest(abs(first_mean), 0.1) as mid_gain,
        (last_mean - start_mean) / greatest(sqrt(start_var / start_k + last_var / last_k), 1e-12) as t_start,
        (last_mean - start_mean) / greatest(abs(start_mean), 0.1) as start_gain,
        (mid_mean - last_mean) / greatest(sqrt(mid_var / mid_k + last_var / last_k), 1e-12) as t_fall,
        (mid_mean - last_mean) / greatest(abs(mid_mean), 0.1) as fall
    from thirds
),

gains as (
    select
        *,
        t_rise >= $t_gain and gain >= $min_gain as rose_from_tenth,
        t_start >= $t_gain and start_gain >= $min_gain
            and last_mean - start_mean >= $start_rise_sd * sqrt(last_var) as rose_early,
        rose_from_tenth or rose_early as rose,
        rose or (t_mid >= $t_gain and mid_gain >= $min_gain) as improved,
        mid_gain >= $min_gain and t_fall >= $t_gain and fall >= $max_fall as rose_then_fell,
        case when rose_from_tenth then first_mean else start_mean end as rose_from
    from rises
)

select
    run_key,
    'reward_plateau' as check_name,
    'warn' as severity,
    first_step as step,
    null as step_end,
    'reward_mean' as metric,
    last_mean as value,
    $t_gain as threshold,
    -- the change in the reward's own units; as a share only of a baseline that is positive and not near 0 (the
    -- 0.1 the gains are floored at), where it is the share of the baseline printed
    -- a change up that was too small or too uncertain to count is not "never improved": the report's trend beside
    -- it may well be significant over the whole run
    printf('reward %s: %.3g over %s, %.3g over the last third (a change of %+.3g%s, %d logged steps, '
           || 't = %.1f); the policy is not learning: check that rewards vary within groups (reward_std), the '
           || 'learning rate and KL penalty, and that the task is not too hard for the model',
           case when last_mean > first_mean then 'did not clearly improve' else 'never improved' end, first_mean,
           span_words('first', first_k, ceil(n / 10), 'the first tenth of the run', first_step, first_end),
           last_mean, last_mean - first_mean,
           case when first_mean >= 0.1 then printf(' or %+.0f%%', 100 * last_gain) else '' end, n, t_rise) as message
from gains
where not improved and not rose_then_fell and (t_rise > -$t_gain or last_gain > -$max_fall)

union all by name

select
    o.run_key,
    'reward_plateau' as check_name,
    case when f.stalled then 'warn' else 'info' end as severity,
    o.onset as step,
    case when o.last_idx < o.n then o.last_step end as step_end,
    'reward_mean' as metric,
    o.level as value,
    $t_flat as threshold,
    case
        when f.stalled
            then printf('reward stalled: it rose from %.3g to about %.3g and has been flat since step %d while the '
                        || 'policy got no update (grad norm below %g on %d of its %d logged steps, their groups '
                        || 'not all tied); check that the loss depends on the policy and that the learning rate is '
                        || 'not zero', g.rose_from, o.level, o.onset, $no_update, f.frozen_k, f.grad_k)
        else printf('reward converged: it rose from %.3g to about %.3g and has been flat since step %d (no '
                    || 'significant trend over %d logged steps, t = %.1f)', g.rose_from, o.level, o.onset, o.w, o.t)
    end as message
from onsets as o
join gains as g using (run_key)
left join frozen as f on o.run_key = f.run_key and o.plateau = f.plateau
where g.rose and o.level > g.rose_from
