-- Every Elo rating that was actually logged, one row per (run_key, step, player, scale). Nothing is
-- filled in here: `elo/*` and `trueskill/*` are sparse (a player is logged only at steps where it
-- played), and reading them "as of step N" is the job of elo_ratings.
--
-- Two scales live in the same run and must never be mixed:
--   * 'eval'   : a step at which `elo/challenger`, `elo/win_rate` or `elo/games_played` is logged is an
--                evaluation step (a separate process, pairwise Elo); every `elo/*` value at that step
--                belongs to 'eval'. `elo/win_rate` and `elo/games_played` are not ratings and get no row.
--   * 'league' : every other `elo/<player>` value, and every `trueskill/<player>_{mu,sigma}` value (only
--                the trainer writes TrueSkill). Where `trueskill/<player>_mu` is logged the rating is
--                (mu - 25) * 40 + 1000, otherwise the logged `elo/<player>`; sigma_elo = 40 * sigma.
-- Non-finite values (NaN, +-inf) are not ratings and are skipped. A league row can carry only a sigma
-- (rating null) when the sigma was logged at a step without mu or elo for that player.
--
-- Checkpoints of the run itself are `elo/<run name with / replaced by _>_adapter_v<step>`, matched as a
-- plain string prefix (run names may contain regex characters). A run whose keys never match its
-- current name (renamed run, name unknown) falls back to the suffix `_adapter_v<digits>`.
-- Incremental: the runs whose lake parts changed are redone (pipeline/build_plan.py), the others kept.
{{ config(materialized='incremental', incremental_strategy='replace_runs', on_schema_change='fail') }}

with history as (
    select run_key, step, key, coalesce(value, value_int::double) as value
    from {{ of_changed_runs(ref('history')) }}
    where starts_with(key, 'elo/') or starts_with(key, 'trueskill/')
),

runs as (
    select run_key, replace(name, '/', '_') as run_name
    from {{ of_changed_runs(ref('runs')) }}
),

reference_players as (
    select player from {{ ref('elo_references') }}
),

eval_steps as (
    select distinct run_key, step
    from history
    where key in ('elo/challenger', 'elo/win_rate', 'elo/games_played')
),

elo_values as (
    select
        h.run_key,
        h.step,
        substr(h.key, 5) as player,
        h.value,
        h.key as source_key,
        case when e.step is null then 'league' else 'eval' end as scale
    from history as h
    left join eval_steps as e on h.run_key = e.run_key and h.step = e.step
    where starts_with(h.key, 'elo/')
        and h.key not in ('elo/win_rate', 'elo/games_played')
        and isfinite(h.value)
),

trueskill_values as (
    select
        run_key,
        step,
        key,
        value,
        case
            when ends_with(key, '_mu') then 'mu'
            when ends_with(key, '_sigma') then 'sigma'
        end as field,
        case
            when ends_with(key, '_mu') then substr(key, 11, length(key) - 13)
            when ends_with(key, '_sigma') then substr(key, 11, length(key) - 16)
        end as player
    from history
    where starts_with(key, 'trueskill/')
        and isfinite(value)
),

trueskill as (
    select
        run_key,
        step,
        player,
        max(value) filter (where field = 'mu') as mu,
        max(value) filter (where field = 'sigma' and value >= 0) as sigma,
        max(key) filter (where field = 'mu') as mu_key,
        max(key) filter (where field = 'sigma' and value >= 0) as sigma_key
    from trueskill_values
    where field is not null and player <> ''
    group by run_key, step, player
),

league_elo as (
    select * from elo_values where scale = 'league'
),

league as (
    select
        coalesce(t.run_key, e.run_key) as run_key,
        coalesce(t.step, e.step) as step,
        coalesce(t.player, e.player) as player,
        'league' as scale,
        case when t.mu is not null then (t.mu - 25) * 40 + 1000 else e.value end as rating,
        40 * t.sigma as sigma_elo,
        case
            when t.mu is not null then t.mu_key
            when e.value is not null then e.source_key
            else t.sigma_key
        end as source_key
    from trueskill as t
    full join league_elo as e
        on t.run_key = e.run_key and t.step = e.step and t.player = e.player
    where t.mu is not null or t.sigma is not null or e.value is not null
),

eval_ratings as (
    select
        run_key,
        step,
        player,
        'eval' as scale,
        value as rating,
        null::double as sigma_elo,
        source_key
    from elo_values
    where scale = 'eval'
),

observations as (
    select * from league
    union all
    select * from eval_ratings
),

matched as (
    select
        o.*,
        r.player is not null as is_reference,
        case
            when starts_with(o.player, ru.run_name || '_adapter_v')
                and regexp_full_match(substr(o.player, length(ru.run_name || '_adapter_v') + 1), '[0-9]+')
                then try_cast(substr(o.player, length(ru.run_name || '_adapter_v') + 1) as bigint)
        end as name_checkpoint_step,
        try_cast(nullif(regexp_extract(o.player, '_adapter_v([0-9]+)$', 1), '') as bigint)
            as suffix_checkpoint_step
    from observations as o
    left join runs as ru on o.run_key = ru.run_key
    left join reference_players as r on o.player = r.player
),

checkpoints as (
    select
        *,
        bool_or(name_checkpoint_step is not null) over (partition by run_key) as run_name_matches
    from matched
),

final as (
    select
        run_key,
        step,
        player,
        scale,
        case
            when is_reference then 'reference'
            when run_name_matches and name_checkpoint_step is not null then 'checkpoint'
            when not run_name_matches and suffix_checkpoint_step is not null then 'checkpoint'
            else 'other'
        end as player_kind,
        case
            when is_reference then null
            when run_name_matches then name_checkpoint_step
            else suffix_checkpoint_step
        end as checkpoint_step,
        case
            when is_reference then null
            when run_name_matches and name_checkpoint_step is not null then 'run_name'
            when not run_name_matches and suffix_checkpoint_step is not null then 'suffix'
        end as checkpoint_match,
        rating,
        sigma_elo,
        source_key
    from checkpoints
)

select * from final
