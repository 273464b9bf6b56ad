-- extraction_empty_high: too many responses contain no parsable answer at all (empty responses).
-- severity: warn
-- reads: history, extraction, trainer_steps
-- requires:
-- role: cause
-- advice: samples do: Read empty responses (raw_response_length) for truncation or refusals
-- advice: length_limit up: Raise the response length limit if empty answers are cut-off ones
-- param max_share = 0.05     -- empty share above this is too high (reference: < 5% empty)
-- param error_share = 0.2    -- a fifth of the responses empty: error
-- param window = 5           -- the share is summed over the last this many logged steps (counts are small)
-- param sustain = 3          -- for at least this many consecutive logged steps
-- From W&B counters in history (not canonical metrics, hence no `requires`): extraction/empty_responses over
-- extraction/orders_expected. Every response is expected to carry at least one order, so orders_expected is at
-- least the number of responses and this share is a LOWER bound on the share of empty responses: a flag is never a
-- false alarm of the proxy, a borderline case may be missed. From the events (the extraction mart, below): the
-- share of order events that are orders_empty per dataset and hour, flagged when its 95% Wilson interval lies above
-- the limit.
with counts as (  -- on the trainer's steps (trainer_steps), as every metric
    select
        h.run_key,
        coalesce(t.trainer_step, h.step) as step,
        max(h.value) filter (where h.key = 'extraction/empty_responses') as empty,
        max(h.value) filter (where h.key = 'extraction/orders_expected') as expected
    from history as h
    left join trainer_steps as t on h.run_key = t.run_key and h.step = t.logged_step
    where h.key in ('extraction/empty_responses', 'extraction/orders_expected') and isfinite(h.value)
    group by h.run_key, coalesce(t.trainer_step, h.step)
),

shares as (
    select
        *,
        row_number() over (partition by run_key order by step) as idx,
        count(*) over (partition by run_key) as n,
        sum(empty) over recent / nullif(sum(expected) over recent, 0) as share
    from counts
    where empty is not null and expected is not null
    window recent as (partition by run_key order by step rows between $window - 1 preceding and current row)
),

high as (
    select *, idx - row_number() over (partition by run_key order by step) as episode
    from shares
    where share > $max_share
),

episodes as (
    select
        run_key,
        min(step) as onset,
        max(step) as last_step,
        max(idx) as last_idx,
        any_value(n) as n,
        count(*) as steps,
        max(share) as worst
    from high
    group by run_key, episode
    having count(*) >= $sustain
)

select
    run_key,
    'extraction_empty_high' as check_name,
    case when worst > $error_share then 'error' else 'warn' end as severity,
    onset as step,
    case when last_idx < n then last_step end as step_end,
    'extraction/empty_responses' as metric,
    worst as value,
    $max_share as threshold,
    printf('at least %.1f%% of responses were empty (empty_responses / orders_expected over %d steps) from step %d '
           || 'for %d logged steps; the model stops answering in the expected format: check truncation, the '
           || 'prompt template and the response length', 100 * worst, $window::bigint, onset, steps) as message
from episodes

union all by name

select
    null as run_key,
    'extraction_empty_high' as check_name,
    case when max(lower) > $error_share then 'error' else 'warn' end as severity,
    'extraction_empty_share' as metric,
    max(share) as value,
    $max_share as threshold,
    printf('empty responses in %s: up to %.1f%% of order events had no parsable order (limit %.0f%%) over %d '
           || 'hour(s) and %d events; look at raw_response_length of the orders_empty events (truncation? refusals?)',
           dataset, 100 * max(share), 100 * $max_share::double, count(*), sum(events)::bigint) as message,
    dataset,
    min(hour) as started_at,
    max(hour) + interval 1 hour as ended_at
from (
    select
        dataset, hour, order_events as events, empty_share as share,
        wilson_lower(empty_events, order_events) as lower,
        hour_episode(hour, row_number() over (partition by dataset order by hour)) as episode
    from extraction
    where grain = 'hour' and wilson_lower(empty_events, order_events) > $max_share
) as hourly
group by dataset, episode
