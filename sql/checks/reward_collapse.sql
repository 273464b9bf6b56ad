-- reward_collapse: the reward falls to (or below) its floor within a few steps and stays there.
-- severity: error
-- reads: metrics
-- requires: reward_mean
-- role: outcome
-- advice: checkpoint do: Resume from a checkpoint before the collapse
-- advice: learning_rate down: Lower the learning rate
-- param window = 20          -- logged steps in the baseline (median and MAD)
-- param lag = 10             -- the baseline ends this many logged steps before the step judged, so a collapse
--                               that takes a few steps to unfold is still compared with the level before it
-- param min_baseline = 10    -- logged steps needed before a baseline counts
-- param mad_factor = 3       -- the drop must exceed this many robust SDs (1.4826 MAD) of the baseline
-- param min_drop_share = 0.75 -- and this share of the run's range before the baseline's end (p5..p95): a dip
--                               of a few percent on a quiet run is not a collapse, a fall back below where the
--                               run started is
-- param sustain = 5          -- every one of this many consecutive logged steps stays below the onset's bar
-- The episode ends when the reward climbs back above the midpoint between the bar and the old baseline.
with reward as (
    select run_key, step, value, row_number() over (partition by run_key order by step) as idx
    from metrics
    where metric = 'reward_mean' and isfinite(value)
),

baseline as (
    select
        *,
        median(value) over recent as base_median,
        1.4826 * mad(value) over recent as base_spread,
        count(*) over recent as base_n,
        quantile_cont(value, 0.95) over earlier - quantile_cont(value, 0.05) over earlier as prior_range,
        max(value) over ahead as worst_ahead,
        count(*) over ahead as n_ahead
    from reward
    window
        recent as (partition by run_key order by step rows between $window + $lag preceding and $lag + 1 preceding),
        earlier as (partition by run_key order by step rows between unbounded preceding and $lag + 1 preceding),
        ahead as (partition by run_key order by step rows between current row and $sustain - 1 following)
),

bars as (
    select *, base_median - greatest($mad_factor * base_spread, $min_drop_share * prior_range, 1e-9) as bar
    from baseline
    where base_n >= $min_baseline
),

onsets as (
    select * from bars where value < bar and n_ahead = $sustain and worst_ahead < bar
),

ends as (
    select
        o.run_key,
        o.step as onset,
        any_value(o.value) as onset_value,
        any_value(o.base_median) as base_median,
        any_value(o.bar) as bar,
        min(r.step) filter (where r.value >= (o.bar + o.base_median) / 2) as recovered_at
    from onsets as o
    join reward as r on r.run_key = o.run_key and r.step > o.step
    group by o.run_key, o.step
),

episodes as (
    select
        e.*,
        (select median(r.value) from reward as r
         where r.run_key = e.run_key and r.step >= e.onset and r.step < coalesce(e.recovered_at, 9223372036854775807))
            as collapsed_level,
        (select max(r.step) from reward as r
         where r.run_key = e.run_key and r.step < coalesce(e.recovered_at, 9223372036854775807)) as last_low
    from ends as e
    where not exists (
        select 1 from ends as prior
        where prior.run_key = e.run_key and prior.onset < e.onset
            and (prior.recovered_at is null or prior.recovered_at > e.onset)
    )
),

-- The onset is walked back over the low points before the one judged first: a coarse log (logging_steps=10) needs
-- `min_baseline + lag` points before any is judged, but the collapse started at its first low point (#12 class 2).
walked as (
    select
        e.* exclude (onset),
        coalesce((
            select min(r.step) from reward as r
            where r.run_key = e.run_key and r.step <= e.onset and r.step > coalesce((
                select max(r2.step) from reward as r2
                where r2.run_key = e.run_key and r2.step < e.onset and r2.value >= e.bar), -1)
        ), e.onset) as onset
    from episodes as e
)

select
    run_key,
    'reward_collapse' as check_name,
    'error' as severity,
    onset as step,
    case when recovered_at is not null then last_low end as step_end,
    'reward_mean' as metric,
    collapsed_level as value,
    bar as threshold,
    printf('reward collapsed from an earlier median of %.3g to %.3g at step %d and stayed near %.3g%s; the policy '
           || 'has degenerated: look for a length or entropy collapse or a KL blow-up at the same steps, and '
           || 'resume from a checkpoint before step %d with a lower learning rate', base_median, onset_value,
           onset, collapsed_level, case when recovered_at is not null then printf(' until step %d', recovered_at)
           else '' end, onset) as message
from walked
