-- too_conservative: the reward is flat while KL stays near 0 and does not grow: the policy is barely moving.
-- severity: warn
-- reads: metrics
-- requires: reward_mean, kl
-- role: cause
-- advice: learning_rate up: Raise the learning rate
-- advice: kl_penalty down: Lower the KL penalty (kl_beta)
-- param window = 60          -- logged reward steps per window (as reward_plateau) ...
-- param min_window = 20      -- ... or all the steps after the first tenth, when fewer, if at least this many: a run
--                               that logs every 5 steps for 200 has 40 points, and a learning rate 100x too small
--                               left it unjudged
-- param t_flat = 2           -- flat: the reward's OLS slope over the window and each half within this many SEs of 0
-- param warmup_share = 0.1   -- windows must start after the first tenth of the run
-- param max_kl = 0.002       -- "near 0": median KL over the window below this, 5x under the healthy 0.01-0.05
-- param max_kl_rise = 0.5    -- and KL grew by less than this share across the window (a KL still climbing means
--                               the policy is moving, just not towards more reward) of its median, or of a tenth of
--                               max_kl when the median is nearer 0 (a k1 estimate of KL hovers around 0, below it too)
-- param max_zero_share = 0.5 -- not explained by tied groups: median frac_reward_zero_std below this
-- param min_entropy_share = 0.5 -- not explained by an entropy collapse: median entropy above this share of the
--                               run's early entropy (first tenth of its steps)
-- A flat reward has other causes (no reward variance, collapsed entropy) that are flagged by their own checks and
-- need other fixes; this one is the lr / KL-penalty diagnosis. Windows that overlap, or leave less than half a
-- window between them, are one episode. An episode is reported where the policy stopped moving: the first KL step
-- after the last one (before its first window ended) whose 5-step median was still at max_kl or above, the run's
-- first KL step when there was none (a learning rate too low from the start), never before the end of the previous
-- episode nor after the start of its first window. The message names the flat window too.
with reward as (
    select
        run_key, step, value,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from metrics
    where metric = 'reward_mean' and isfinite(value)
),

sizes as (  -- the run's window: `window` steps, or every step after the first tenth
    select run_key, least($window, max(n) - floor($warmup_share * max(n)))::bigint as w
    from reward
    group by run_key
    having least($window, max(n) - floor($warmup_share * max(n))) >= $min_window
),

sized as (
    select r.*, s.w
    from reward as r
    join sizes as s using (run_key)
),

windows as (
    select
        *,
        regr_count(value, idx) over whole as k,
        regr_sxx(value, idx) over whole as sxx, regr_syy(value, idx) over whole as syy,
        regr_sxy(value, idx) over whole as sxy,
        regr_sxx(value, idx) over first_half as sxx1, regr_syy(value, idx) over first_half as syy1,
        regr_sxy(value, idx) over first_half as sxy1, regr_count(value, idx) over first_half as k1,
        regr_sxx(value, idx) over second_half as sxx2, regr_syy(value, idx) over second_half as syy2,
        regr_sxy(value, idx) over second_half as sxy2, regr_count(value, idx) over second_half as k2,
        avg(value) over whole as level,
        first_value(step) over whole as start_step,
        first_value(idx) over whole as start_idx
    from sized
    -- frames as long as the run's window w (sqlfluff's DuckDB grammar takes no expression as a frame offset)
    window
        whole as (partition by run_key order by idx rows between w - 1 preceding and current row),  -- noqa: PRS
        first_half as (
            partition by run_key order by idx rows between w - 1 preceding and w // 2 preceding  -- noqa: PRS
        ),
        second_half as (partition by run_key order by idx rows between w // 2 - 1 preceding and current row)  -- noqa: PRS
),

flat as (
    select *
    from windows
    where k = w and k1 > 2 and k2 > 2 and sxx > 0 and sxx1 > 0 and sxx2 > 0
        and start_idx > $warmup_share * n
        and abs(sxy / sxx) < $t_flat * sqrt(greatest(syy - sxy * sxy / sxx, 0) / (k - 2) / sxx)
        and abs(sxy1 / sxx1) < $t_flat * sqrt(greatest(syy1 - sxy1 * sxy1 / sxx1, 0) / (k1 - 2) / sxx1)
        and abs(sxy2 / sxx2) < $t_flat * sqrt(greatest(syy2 - sxy2 * sxy2 / sxx2, 0) / (k2 - 2) / sxx2)
),

-- what else happened inside each flat window
context as (
    select
        f.run_key,
        f.step,
        any_value(f.start_step) as start_step,
        any_value(f.idx) as idx,
        any_value(f.n) as n,
        any_value(f.w) as w,
        any_value(f.level) as level,
        median(m.value) filter (where m.metric = 'kl') as kl_median,
        regr_slope(m.value, m.step) filter (where m.metric = 'kl') * (f.step - any_value(f.start_step)) as kl_rise,
        median(m.value) filter (where m.metric = 'frac_reward_zero_std') as zero_share,
        median(m.value) filter (where m.metric = 'entropy') as entropy
    from flat as f
    join metrics as m
        on f.run_key = m.run_key and m.step between f.start_step and f.step and isfinite(m.value)
        and m.metric in ('kl', 'frac_reward_zero_std', 'entropy')
    group by f.run_key, f.step
),

early_entropy as (
    select run_key, median(value) as early
    from (
        select run_key, value, row_number() over (partition by run_key order by step) as idx,
            count(*) over (partition by run_key) as n
        from metrics
        where metric = 'entropy' and isfinite(value)
    ) as numbered
    where idx <= greatest(3, ceil(n * 0.1))
    group by run_key
),

-- a KL that never moves is no KL term at all (verl's kl_loss 0.0 with use_kl_loss off), not a policy that stays put
kl_in_use as (
    select run_key
    from metrics
    where metric = 'kl' and isfinite(value)
    group by run_key
    having min(value) < max(value)
),

conservative as (
    select c.*, c.idx - lag(c.idx) over (partition by c.run_key order by c.step) as gap
    from context as c
    semi join kl_in_use using (run_key)
    left join early_entropy as e using (run_key)
    where c.kl_median < $max_kl
        and coalesce(c.kl_rise, 0) < $max_kl_rise * greatest(abs(c.kl_median), $max_kl / 10)
        and coalesce(c.zero_share, 0) < $max_zero_share
        and (c.entropy is null or e.early is null or c.entropy >= $min_entropy_share * e.early)
),

numbered as (
    select
        *,
        count(*) filter (where gap is null or gap > w + w // 2)
            over (partition by run_key order by step) as episode
    from conservative
),

episodes as (
    select
        run_key,
        episode,
        min(start_step) as first_start,
        min(step) as first_end,
        max(step) as last_step,
        max(idx) as last_idx,
        any_value(n) as n,
        arg_min(level, step) as level,
        max(kl_median) as kl_median
    from numbered
    group by run_key, episode
),

kl_levels as (  -- KL's trailing 5-step median, of the runs with an episode
    select
        metrics.run_key, metrics.step,
        median(metrics.value) over (partition by metrics.run_key order by metrics.step rows 4 preceding) as level
    from metrics
    semi join episodes using (run_key)
    where metrics.metric = 'kl' and isfinite(metrics.value)
),

bounded as (  -- each episode's earliest possible onset: the end of the one before it
    select *, lag(last_step) over (partition by run_key order by episode) as previous_end
    from episodes
),

last_moving as (  -- per episode, the last KL step before its first window ended with the policy still moving
    select b.run_key, b.episode, max(k.step) filter (where k.level >= $max_kl) as moving_step
    from bounded as b
    join kl_levels as k
        on b.run_key = k.run_key and b.first_end >= k.step and coalesce(b.previous_end, -1) < k.step
    group by b.run_key, b.episode
),

still as (  -- per episode, the first KL step after that
    select b.run_key, b.episode, min(k.step) as still_step
    from bounded as b
    left join last_moving as m on b.run_key = m.run_key and b.episode = m.episode
    join kl_levels as k
        on b.run_key = k.run_key and coalesce(m.moving_step, b.previous_end, -1) < k.step
    group by b.run_key, b.episode
),

onsets as (
    select b.*, least(b.first_start, coalesce(s.still_step, b.first_start)) as onset
    from bounded as b
    left join still as s on b.run_key = s.run_key and b.episode = s.episode
)

select
    run_key,
    'too_conservative' as check_name,
    'warn' as severity,
    onset as step,
    case when last_idx < n then last_step end as step_end,
    'kl' as metric,
    kl_median as value,
    $max_kl as threshold,
    printf('reward flat at about %.3g from step %d to %d while KL stayed near %.2g (under %.2g since step %d): the '
           || 'policy is barely moving away from the reference; raise the learning rate or lower the KL penalty '
           || '(kl_beta)', level, first_start, last_step, kl_median, $max_kl, onset) as message
from onsets
