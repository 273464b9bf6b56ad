-- elo_base_model_not_declining: after enough league steps, base_model's league rating is still not below its seed.
-- severity: warn
-- reads: elo_ratings
-- requires:
-- role: outcome
-- advice: reward_signal do: Check that rewards vary within groups and the reward signal reaches the policy
-- advice: learning_rate up: Raise the learning rate
-- param min_steps = 50       -- league steps before the question is asked (reference: gaps of 20-50 Elo after 50)
-- param tail = 20            -- the base model's level is the mean of its as-of rating over the last this many steps
-- param z = 1                -- declining: that level is more than z rating sigmas below the seed rating
-- param default_sigma = 50   -- Elo sigma to assume while no trueskill sigma has been logged
-- The policy exploits a fixed reference it has learned to beat, so base_model's rating falls below where it started
-- (its seed, 1000) as the policy learns. Read "as of" each step (elo_ratings: last known league rating; the
-- evaluator's pairwise-scale values are a different scale and are not used) and judged against the rating's own
-- uncertainty (trueskill sigma). A slope test over logged ratings is not used: league ratings wander like random
-- walks, so an OLS confidence interval on them is far too narrow and calls noise a trend. Only the stretch that is
-- still on at the run's last step is reported, from its first step: a base model that declined later is fine.
with base as (
    select
        run_key,
        step,
        rating,
        coalesce(rating_sigma, $default_sigma) as sigma,
        seed_rating,
        min(step) over (partition by run_key) as first_step,
        avg(rating) over (partition by run_key order by step rows between $tail - 1 preceding and current row)
            as level,
        count(*) over (partition by run_key order by step rows between $tail - 1 preceding and current row)
            as level_n
    from elo_ratings
    where player = 'base_model' and scale = 'league' and seed_rating is not null
),

judged as (
    select
        *,
        level > seed_rating - $z * sigma as not_declining,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n
    from base
    where step >= first_step + $min_steps and level_n = $tail
),

stretches as (
    select *, idx - row_number() over (partition by run_key order by step) as stretch
    from judged
    where not_declining
),

current_stretch as (
    select
        run_key,
        min(step) as onset,
        max(step) as last_step,
        any_value(first_step) as first_step,
        arg_max(level, step) as level,
        arg_max(sigma, step) as sigma,
        any_value(seed_rating) as seed_rating,
        max(idx) as last_idx,
        any_value(n) as n
    from stretches
    group by run_key, stretch
    having max(idx) = any_value(n)
)

select
    run_key,
    'elo_base_model_not_declining' as check_name,
    'warn' as severity,
    onset as step,
    null::bigint as step_end,
    'elo/base_model' as metric,
    level as value,
    seed_rating - $z * sigma as threshold,
    printf('after %d league steps base_model is still rated %.0f (seed %.0f, sigma %.0f): the policy is not '
           || 'exploiting the base model it started from, so it is probably not learning; compare the Elo gap and '
           || 'the reward trend, and check the learning rate and the reward signal',
           last_step - first_step, level, seed_rating::double, sigma) as message
from current_stretch
