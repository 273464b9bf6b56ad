-- Is the prefix cache working? Hit rate per hour and overall from the inference server's events, and per
-- W&B run where the trainer logged cache/hit_rate (> 50% after warm-up is working, < 30% is not).
select c.origin, c.grain, coalesce(c.dataset, r.name) as dataset_or_run, c.hour, c.samples,
    round(100 * c.hit_rate, 1) as hit_pct, round(100 * c.prompt_tokens_cached_share, 1) as prompt_cached_pct,
    c.missing_reason
from cache_stats as c
left join runs as r on c.run_key = r.run_key
order by c.origin asc, c.grain desc, c.hour asc
