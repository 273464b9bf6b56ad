-- Is the policy learning? Fixed references never change, so their league rating only moves because the
-- trained policy beats them: a reference whose rating falls is being exploited. One row per run x fixed
-- reference that played in the run's league. The trend is an OLS line rating ~ step over the OBSERVED
-- ratings only (forward-filled as-of rows would fake extra points and shrink the error), reported per
-- 100 steps with its standard error and a 95% interval slope +- t(0.975, n-2) * se.
-- t critical value: macro t_critical_975 (exact for df = 1 and 2, Cornish-Fisher from df = 3).
-- Verdict: n < 3 -> insufficient_data; interval entirely below 0 -> declining (the policy learns);
-- entirely above 0 -> rising; otherwise flat.
-- Incremental: the runs whose lake parts changed are redone (pipeline/build_plan.py), the others kept.
{{ config(materialized='incremental', incremental_strategy='replace_runs', on_schema_change='fail') }}

with observations as (
    select run_key, player, step, rating
    from {{ of_changed_runs(ref('int_elo__observations')) }}
    where scale = 'league' and player_kind = 'reference' and rating is not null
),

ratings as (
    select run_key, player, step, rating, seed_rating
    from {{ of_changed_runs(ref('elo_ratings')) }}
    where player_kind = 'reference'
),

spine as (
    select
        run_key,
        player,
        any_value(seed_rating) as seed_rating,
        arg_max(rating, step) as end_rating,
        max(step) as end_step
    from ratings
    group by run_key, player
),

centered as (
    select
        run_key,
        player,
        step,
        rating,
        step - avg(step) over (partition by run_key, player) as dx,
        rating - avg(rating) over (partition by run_key, player) as dy
    from observations
),

sums as (
    select
        run_key,
        player,
        count(*) as n,
        min(step) as first_step,
        max(step) as last_step,
        arg_min(rating, step) as first_observed_rating,
        sum(dx * dx) as sxx,
        sum(dx * dy) as sxy,
        sum(dy * dy) as syy
    from centered
    group by run_key, player
),

fit as (
    select
        *,
        n - 2 as df,
        case when n >= 2 and sxx > 0 then sxy / sxx end as slope,
        case
            when n >= 3 and sxx > 0 then sqrt(greatest(syy - sxy * sxy / sxx, 0) / (n - 2) / sxx)
        end as slope_se
    from sums
),

with_t as (
    select
        *,
        {{ t_critical_975('df') }} as t_critical
    from fit
),

final as (
    select
        s.run_key,
        s.player,
        coalesce(f.n, 0) as n_observations,
        f.first_step,
        f.last_step,
        s.seed_rating as start_rating,
        f.first_observed_rating,
        s.end_rating,
        s.end_rating - s.seed_rating as change,
        100 * f.slope as slope_per_100_steps,
        100 * f.slope_se as slope_se_per_100_steps,
        f.t_critical,
        100 * (f.slope - f.t_critical * f.slope_se) as slope_ci_low,
        100 * (f.slope + f.t_critical * f.slope_se) as slope_ci_high,
        case
            when coalesce(f.n, 0) < 3 or f.slope_se is null then 'insufficient_data'
            when f.slope + f.t_critical * f.slope_se < 0 then 'declining'
            when f.slope - f.t_critical * f.slope_se > 0 then 'rising'
            else 'flat'
        end as verdict,
        'league' as scale
    from spine as s
    left join with_t as f on s.run_key = f.run_key and s.player = f.player
)

select * from final
