-- Shared detectors for sql/checks: temporary macros the check runner (pipeline/checks.py) defines on its
-- connection before any rule runs, so a fix here fixes every rule that calls it.

-- Wilson score interval of a proportion k/n (z = 1.96: 95%). A rate judged against a threshold is flagged only when
-- the interval lies beyond it: 3 failures in 240 rollouts (1.25%) is not evidence of a rate above 1%,
-- 25 in 243 is evidence of one above 5%.
create or replace temp macro wilson_lower(k, n, z := 1.96) as
    case when n > 0 then
        (k / n + z * z / (2 * n) - z * sqrt((k / n) * (1 - k / n) / n + z * z / (4 * n * n))) / (1 + z * z / n)
    end;

create or replace temp macro wilson_upper(k, n, z := 1.96) as
    case when n > 0 then
        (k / n + z * z / (2 * n) + z * sqrt((k / n) * (1 - k / n) / n + z * z / (4 * n * n))) / (1 + z * z / n)
    end;

-- Consecutive hours as one episode: equal for hours that follow each other within one partition (use with
-- `row_number() over (partition by … order by hour)` as `idx`).
create or replace temp macro hour_episode(hour, idx) as hour - to_hours(idx::bigint);
