-- Extraction rate: shares of order events fully extracted / partial / empty, per power and overall
-- (healthy: > 95% full, < 5% empty, < 10% partial). W&B's extraction/rate is the metric extraction_rate.
select grain, dataset, power_name, order_events, round(100 * full_share, 1) as full_pct,
    round(100 * partial_share, 1) as partial_pct, round(100 * empty_share, 1) as empty_pct,
    round(order_yield, 3) as order_yield, missing_reason
from extraction
order by dataset asc, grain desc, power_name asc
