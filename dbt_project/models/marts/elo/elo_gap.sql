-- The one Elo gap definition: at every step of elo_ratings (league scale, as-of ratings),
--   gap = (highest as-of rating among the run's own checkpoints) - (base_model's as-of rating),
-- both read at the same step. Ties between checkpoints go to the newest checkpoint. The standard
-- error treats the two ratings as independent: gap_se = sqrt(sigma_best^2 + sigma_base^2) in Elo
-- points (= 40 * sqrt(s1^2 + s2^2) in TrueSkill sigma units), null when a sigma is unknown;
-- the 95% interval is gap +- 1.96 * gap_se. Rows start at the first step where both a checkpoint
-- and a base_model rating exist (base_model counts at its seed rating before its first game).
-- Incremental: the runs whose lake parts changed are redone (pipeline/build_plan.py), the others kept.
{{ config(materialized='incremental', incremental_strategy='replace_runs', on_schema_change='fail') }}

with ratings as (
    select * from {{ of_changed_runs(ref('elo_ratings')) }}
),

checkpoints as (
    select
        run_key,
        step,
        player,
        checkpoint_step,
        rating,
        rating_sigma,
        count(*) over (partition by run_key, step) as n_checkpoints
    from ratings
    where player_kind = 'checkpoint'
    qualify row_number() over (
        partition by run_key, step order by rating desc, checkpoint_step desc, player asc
    ) = 1
),

base_model as (
    select run_key, step, rating, rating_sigma, rating_is_seed
    from ratings
    where player = 'base_model'
),

joined as (
    select
        c.run_key,
        c.step,
        c.player as best_checkpoint,
        c.checkpoint_step as best_checkpoint_step,
        c.rating as best_checkpoint_rating,
        c.rating_sigma as best_checkpoint_sigma,
        b.rating as base_model_rating,
        b.rating_sigma as base_model_sigma,
        b.rating_is_seed as base_model_rating_is_seed,
        c.n_checkpoints,
        c.rating - b.rating as gap,
        sqrt(c.rating_sigma * c.rating_sigma + b.rating_sigma * b.rating_sigma) as gap_se
    from checkpoints as c
    join base_model as b on c.run_key = b.run_key and c.step = b.step
),

final as (
    select
        run_key,
        step,
        best_checkpoint,
        best_checkpoint_step,
        best_checkpoint_rating,
        best_checkpoint_sigma,
        base_model_rating,
        base_model_sigma,
        base_model_rating_is_seed,
        gap,
        gap_se,
        gap - 1.96 * gap_se as gap_ci_low,
        gap + 1.96 * gap_se as gap_ci_high,
        n_checkpoints
    from joined
)

select * from final
