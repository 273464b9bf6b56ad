-- extraction_rate_low: too few of the expected answers (orders) can be parsed from the model's responses.
-- severity: warn
-- reads: metrics, extraction
-- requires: extraction_rate
-- role: cause
-- advice: samples do: Inspect empty and partial responses for the format the model writes instead
-- advice: kl_penalty up: Raise the KL penalty so the format does not drift
-- param min_rate = 0.95      -- healthy extraction is above this (reference: > 95% extracted)
-- param error_rate = 0.8     -- below this a fifth of the answers is lost: error
-- param smooth = 5           -- judged on the median of the last this many logged steps
-- param sustain = 3          -- for at least this many consecutive logged steps
-- From W&B: extraction_rate, orders_extracted / orders_expected (Diplomacy extraction/rate). From the events (the
-- extraction mart, below): the share of order events with every order extracted, per dataset and hour, flagged
-- when its 95% Wilson interval lies below the healthy rate.
select
    run_key,
    'extraction_rate_low' as check_name,
    case when worst < $error_rate then 'error' else 'warn' end as severity,
    onset as step,
    step_end,
    'extraction_rate' as metric,
    worst as value,
    $min_rate as threshold,
    printf('only %.1f%% of expected orders were extracted (median of %d steps) from step %d for %d logged steps; '
           || 'the output format is breaking: inspect empty and partial responses, and check the KL and the '
           || 'learning rate (format drift usually follows the policy drifting)', 100 * worst, $smooth::bigint, onset,
           steps) as message
from sustained_level('extraction_rate', $min_rate, false, smooth := $smooth, sustain := $sustain)

union all by name

select
    null as run_key,
    'extraction_rate_low' as check_name,
    case when min(upper) < $error_rate then 'error' else 'warn' end as severity,
    'extraction_full_share' as metric,
    min(share) as value,
    $min_rate as threshold,
    printf('extraction is failing in %s: as few as %.1f%% of order events had every order extracted (healthy > '
           || '%.0f%%) over %d hour(s) and %d events; read orders_partial/orders_empty events of those hours '
           || '(raw_response_length, phase) for what the model writes instead', dataset, 100 * min(share),
           100 * $min_rate::double, count(*), sum(events)::bigint) as message,
    dataset,
    min(hour) as started_at,
    max(hour) + interval 1 hour as ended_at
from (
    select
        dataset, hour, order_events as events, full_share as share,
        wilson_upper(full_events, order_events) as upper,
        hour_episode(hour, row_number() over (partition by dataset order by hour)) as episode
    from extraction
    where grain = 'hour' and wilson_upper(full_events, order_events) < $min_rate
) as hourly
group by dataset, episode
