-- One row per run; the JSON columns typed as JSON for DuckDB's json functions (config->>'$.learning_rate').
with runs as (
    select * from {{ ref('stg_lake__runs') }}
),

final as (
    select * exclude (ingest_id) replace (
        config::json as config,
        summary::json as summary,
        step_offsets::json as step_offsets
    )
    from runs
)

select * from final
