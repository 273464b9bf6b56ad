-- League Elo "as of step N": TrueSkill ratings are logged only for the players that played at a step,
-- so comparing players at one step needs each player's LAST KNOWN rating, never a join on equal steps.
-- Grid: for every run with league Elo, every step at which any league observation exists, times every
-- player known by then. Fixed references (seed elo_references) that appear anywhere in the run's league
-- are present from the run's first league step, at their seed rating until first observed; every other
-- player (checkpoints, league opponents) from its first observed rating on. rating / rating_sigma are
-- the last logged rating / sigma (Elo points) at or before the step (sigma null until one is logged).
-- Evaluation-scale values (see int_elo__observations) are excluded.
-- Incremental: the runs whose lake parts changed are redone (pipeline/build_plan.py), the others kept.
{{ config(materialized='incremental', incremental_strategy='replace_runs', on_schema_change='fail') }}

with observations as (
    select run_key, step, player, player_kind, checkpoint_step, rating, sigma_elo
    from {{ of_changed_runs(ref('int_elo__observations')) }}
    where scale = 'league'
),

reference_players as (
    select player, seed_rating from {{ ref('elo_references') }}
),

run_steps as (
    select distinct run_key, step from observations
),

run_start as (
    select run_key, min(step) as first_step
    from run_steps
    group by run_key
),

players as (
    select
        run_key,
        player,
        any_value(player_kind) as player_kind,
        any_value(checkpoint_step) as checkpoint_step,
        min(step) as first_logged_step,
        min(step) filter (where rating is not null) as first_rated_step
    from observations
    group by run_key, player
),

player_spans as (
    select
        p.run_key,
        p.player,
        p.player_kind,
        p.checkpoint_step,
        r.seed_rating,
        case when p.player_kind = 'reference' then s.first_step else p.first_logged_step end as grid_start,
        case when p.player_kind = 'reference' then s.first_step else p.first_rated_step end as rated_from
    from players as p
    join run_start as s on p.run_key = s.run_key
    left join reference_players as r on p.player = r.player
    where p.first_rated_step is not null
),

grid as (
    select s.run_key, s.step, p.player, p.player_kind, p.checkpoint_step, p.seed_rating, p.rated_from
    from run_steps as s
    join player_spans as p on s.run_key = p.run_key and s.step >= p.grid_start
),

filled as (
    select
        g.*,
        o.rating is not null as observed,
        last_value(o.rating ignore nulls) over w as last_rating,
        last_value(o.sigma_elo ignore nulls) over w as last_sigma,
        last_value(case when o.rating is not null then g.step end ignore nulls) over w as last_observed_step
    from grid as g
    left join observations as o
        on g.run_key = o.run_key and g.step = o.step and g.player = o.player
    window w as (
        partition by g.run_key, g.player order by g.step
        rows between unbounded preceding and current row
    )
),

final as (
    select
        run_key,
        step,
        player,
        player_kind,
        checkpoint_step,
        coalesce(last_rating, seed_rating) as rating,
        last_sigma as rating_sigma,
        observed,
        last_observed_step,
        seed_rating,
        last_rating is null as rating_is_seed,
        'league' as scale
    from filled
    where step >= rated_from
        and coalesce(last_rating, seed_rating) is not null
)

select * from final
