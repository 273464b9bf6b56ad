with history as (
    select * from {{ ref('stg_lake__history') }}
),

final as (
    select run_key, step, ts, key, value, value_int, value_text, value_type, versions
    from history
)

select * from final
order by run_key, key, step
