-- Extraction quality from order events. Definition (one of the two the product uses; the other, W&B's
-- `extraction/rate` = orders_extracted / orders_expected, is the canonical metric `extraction_rate`):
--   full_share    = share of order events that are `orders_extracted` (status full)
--   partial_share = share that are `orders_partial`;  empty_share = share that are `orders_empty`
--   order_yield   = sum(orders_count) / sum(expected_count) over the same events
-- One row per (dataset, power_name), one per (dataset, hour) (grain `hour`, for the checks) and an `overall` row per
-- dataset (power_name and hour null). The counts are there so a share can be judged with its uncertainty.
with orders as (
    select *, date_trunc('hour', "time") as hour from {{ ref('stg_events__orders') }}
),

grouped as (
    select
        dataset,
        power_name,
        hour,
        count(*) as order_events,
        count(*) filter (where outcome = 'full') as full_events,
        count(*) filter (where outcome = 'empty') as empty_events,
        count(*) filter (where outcome = 'full') / count(*) as full_share,
        count(*) filter (where outcome = 'partial') / count(*) as partial_share,
        count(*) filter (where outcome = 'empty') / count(*) as empty_share,
        sum(orders_count) / nullif(sum(expected_count), 0) as order_yield,
        count(expected_count) as events_with_expected_count,
        grouping(power_name) = 0 as by_power,
        grouping(hour) = 0 as by_hour
    from orders
    group by grouping sets ((dataset, power_name), (dataset, hour), (dataset))
),

final as (
    select
        case when by_power then 'power' when by_hour then 'hour' else 'overall' end as grain,
        * exclude (by_power, by_hour),
        case when events_with_expected_count = 0
            then 'no order event carries expected_count: order_yield unknown' end as missing_reason
    from grouped
)

select * from final
