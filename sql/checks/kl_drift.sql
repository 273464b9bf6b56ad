-- kl_drift: KL to the reference climbs steadily over many steps (a significant trend, not a one-step spike).
-- severity: warn
-- reads: metrics
-- requires: kl
-- role: cause
-- advice: kl_penalty up: Raise the KL penalty (kl_beta / kl_coef)
-- advice: learning_rate down: Lower the learning rate
-- param window = 20          -- logged steps in each trend window (an OLS line kl ~ step)
-- param min_points = 12      -- fewest finite points a window needs
-- param min_t = 4            -- the slope must be this many standard errors above 0
-- param min_rise = 0.3       -- fitted rise across the window, as a share of the fitted level at its start
-- param min_kl = 0.1         -- and the fitted KL at the window's end must exceed this: the reference's warning
--                               line (KL growing from 5e-4 to 0.08 under a small beta is normal GRPO)
-- param error_kl = 1.0       -- a drift that ends above this KL is an error
-- param warmup_share = 0.1   -- skip the first tenth of the run: KL starts at 0 by construction and always rises
-- param high_kl = 0.5        -- also flagged without a trend: KL's median over `window` points at or above this, five
--                               times the reference's warning line (0.1, where healthy runs with a small beta can sit)
-- param high_sustain = 10    -- for at least this many consecutive logged steps ...
-- param high_ratio = 5       -- ... having climbed there: this many times the run's KL over its first three logged
--                               steps (a KL that starts high, e.g. to a distillation teacher or from an SFT adapter,
--                               is the run's own baseline; one that starts at 0 and blows up by step 3 is not)
-- param run_rise = 3         -- also over the whole run: the median KL of its last fifth at least this many times the
--                               median of the tenth after the warm-up, above min_kl, and rising steadily (a
--                               twentieth of the points in the middle half of that rise): a slow drift on a dense log
--                               never gains min_rise within `window` points. Reported where it began, as below (where
--                               the trailing median passed min_kl when KL never was that low)
-- Reported where the drift began: the first step after the last time KL's median over 5 logged steps was under twice
-- its level after the warm-up (the median of the tenth after it), before the first window where the trend is
-- significant (the step it became detectable; the window's start when KL never was that low); the message gives
-- the window's start and end levels. Drifting windows less than a window apart are one episode. A
-- KL that climbed early (inside the warm-up) and stays far above the warning line is the second branch, below.
with kl as (  -- the series the high-level branch below reads
    select
        run_key, step, value,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from metrics
    where metric = 'kl' and isfinite(value)
),

-- KL's median over the trailing `window` points, and over the trailing 5 (where a drift began), at each point
levels as (
    select
        *,
        median(value) over (partition by run_key order by step rows between $window - 1 preceding and current row)
            as level,
        median(value) over (partition by run_key order by step rows between 4 preceding and current row) as recent
    from kl
),

early_levels as (  -- KL after the warm-up: the median of the tenth of the run after it
    select run_key, median(value) filter (where idx > $warmup_share * n and idx <= 2 * $warmup_share * n) as early_kl
    from kl
    group by run_key
),

drifting as (
    select *
    from trend_windows('kl', $window)
    where k >= $min_points and slope_se is not null and start_idx > $warmup_share * n
        and slope > $min_t * greatest(slope_se, 1e-12)
        and fitted_end - fitted_start >= $min_rise * greatest(fitted_start, 1e-6)
        and fitted_end > $min_kl
),

-- drifting windows less than a window apart belong to one drift (a steady climb can dip under the bar briefly)
gaps as (
    select *, idx - lag(idx) over (partition by run_key order by step) as gap
    from drifting
),

numbered as (
    select *, count(*) filter (where gap is null or gap > $window) over (partition by run_key order by step) as episode
    from gaps
),

episodes as (
    select
        run_key,
        min(step) as onset,
        max(step) as last_step,
        max(idx) as last_idx,
        any_value(n) as n,
        arg_min(start_value, step) as from_kl,
        arg_min(start_step, step) as from_step,
        max(value) as to_kl,
        arg_max(step, value) as to_step,
        max(slope / slope_se) as best_t
    from numbered
    group by run_key, episode
),

-- where the middle half of the climb happened (the first steps past a quarter and three quarters of it): a steady
-- climb spreads it over the episode, a jump to a new level puts it within a few steps, and the message says which
climbs as (
    select
        e.*,
        min(k.step) filter (where k.value >= e.from_kl + 0.25 * (e.to_kl - e.from_kl)) as quarter_step,
        min(k.step) filter (where k.value >= e.from_kl + 0.75 * (e.to_kl - e.from_kl)) as three_quarter_step
    from episodes as e
    join kl as k on e.run_key = k.run_key and k.step between e.from_step and e.last_step
    group by all
),

-- the last step before the episode's first drifting window ended where KL was still under twice its early level
lows as (
    select e.run_key, e.onset, max(l.step) filter (where l.recent <= 2 * b.early_kl) as last_low
    from episodes as e
    join early_levels as b using (run_key)
    join levels as l on e.run_key = l.run_key and e.onset >= l.step
    where b.early_kl > 0
    group by e.run_key, e.onset
),

run_lows as (  -- for the slow drift over the whole run: the last time after the warm-up KL was that low
    select l.run_key, max(l.step) filter (where l.recent <= 2 * b.early_kl) as last_low
    from levels as l
    join early_levels as b using (run_key)
    where b.early_kl > 0 and l.idx > $warmup_share * l.n
    group by l.run_key
),

began as (  -- the first step after the last low one (the onset itself when KL was still that low there)
    select o.run_key, o.onset, coalesce(min(l.step), o.onset) as began_step
    from lows as o
    left join levels as l on o.run_key = l.run_key and o.last_low < l.step and o.onset >= l.step
    where o.last_low is not null
    group by o.run_key, o.onset
),

drifts as (
    select c.*, coalesce(b.began_step, c.from_step) as began_step
    from climbs as c
    left join began as b using (run_key, onset)
)

select
    run_key,
    'kl_drift' as check_name,
    case when to_kl >= $error_kl then 'error' else 'warn' end as severity,
    began_step as step,
    case when last_idx < n then last_step end as step_end,
    'kl' as metric,
    to_kl as value,
    $min_kl as threshold,
    -- from: the median of the first points of the window that showed the climb (robust to one odd point), so
    -- "about"; to: the highest KL the climb reached, at its own step
    printf('KL has been climbing since step %d: from about %.3g around step %d to %.3g at step %d, the middle half '
           || 'of the climb between steps %d and %d (trend t = %.1f); the policy is drifting from the reference: raise '
           || 'the KL penalty or lower the learning rate before it blows up', began_step, from_kl, from_step, to_kl,
           to_step, quarter_step, three_quarter_step, best_t) as message
from drifts

union all by name

select
    run_key,
    'kl_drift' as check_name,
    case when max(level) >= $error_kl then 'error' else 'warn' end as severity,
    min(step) as step,
    case when max(idx) < any_value(n) then max(step) end as step_end,
    'kl' as metric,
    max(level) as value,
    $high_kl as threshold,
    printf('KL has stayed far above the reference: its median over %d logged steps was %.3g or more from step %d '
           || 'for %d logged steps (up to %.3g; healthy 0.01-0.05, warning above 0.1); the policy has drifted far '
           || 'from the reference: raise the KL penalty or lower the learning rate', $window::bigint, min(level),
           min(step), count(*), max(level)) as message
from (
    select levels.*, starts.early, levels.idx - row_number() over (partition by run_key order by levels.step) as episode
    from levels
    join (
        select run_key, median(value) as early
        from kl
        where idx <= 3
        group by run_key
    ) as starts using (run_key)
    where levels.level >= $high_kl and levels.level >= $high_ratio * starts.early
) as high_levels
group by run_key, episode
having count(*) >= $high_sustain

union all by name

select
    whole.run_key,
    'kl_drift' as check_name,
    case when whole.end_kl >= $error_kl then 'error' else 'warn' end as severity,
    coalesce(min(lv.step) filter (where lv.step > rl.last_low), min(lv.step) filter (where lv.level > $min_kl),
        max(lv.step)) as step,
    null::bigint as step_end,
    'kl' as metric,
    whole.end_kl as value,
    $min_kl as threshold,
    printf('KL has been climbing slowly all run, from step %d: from about %.3g after the warm-up to %.3g over the '
           || 'last fifth of the run (%.1fx), its median over %d logged steps above %.3g from step %d; the policy is '
           || 'drifting from the reference: raise the KL penalty or lower the learning rate before it blows up',
           coalesce(min(lv.step) filter (where lv.step > rl.last_low), min(lv.step) filter (where lv.level > $min_kl),
               max(lv.step)), whole.start_kl,
           whole.end_kl, whole.end_kl / whole.start_kl, $window::bigint, $min_kl::double,
           coalesce(min(lv.step) filter (where lv.level > $min_kl), max(lv.step))) as message
from (
    select
        k.run_key,
        any_value(b.early_kl) as start_kl,
        median(k.value) filter (where k.idx > 0.8 * k.n) as end_kl
    from kl as k
    join early_levels as b using (run_key)
    group by k.run_key
    having any_value(k.n) >= 2 * $window
) as whole
join levels as lv on whole.run_key = lv.run_key and lv.idx > $warmup_share * lv.n
left join run_lows as rl on whole.run_key = rl.run_key
where whole.end_kl > $min_kl
    and whole.start_kl > 0
    and whole.end_kl >= $run_rise * whole.start_kl
    and whole.run_key not in (select e.run_key from episodes as e)
group by whole.run_key, whole.start_kl, whole.end_kl, rl.last_low
having count(*) filter (
    where lv.value > whole.start_kl + 0.25 * (whole.end_kl - whole.start_kl)
        and lv.value < whole.start_kl + 0.75 * (whole.end_kl - whole.start_kl)
) >= greatest(3, any_value(lv.n) / 20)
