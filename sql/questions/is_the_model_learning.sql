-- Is the model learning? For each league run: the Elo gap best checkpoint − base_model at its last step
-- (with its 95% interval), and how many fixed references are being exploited (rating declining).
with last_gap as (
    select *
    from elo_gap
    qualify row_number() over (partition by run_key order by step desc) = 1
),

references_summary as (
    select
        run_key,
        count(*) filter (where verdict = 'declining') as references_declining,
        count(*) filter (where verdict = 'rising') as references_rising,
        count(*) as references_seen
    from elo_reference_trends
    group by run_key
)

select
    r.name,
    g.step,
    round(g.gap, 1) as gap,
    round(g.gap_ci_low, 1) as gap_ci_low,
    round(g.gap_ci_high, 1) as gap_ci_high,
    g.best_checkpoint,
    t.references_declining,
    t.references_rising,
    t.references_seen
from last_gap as g
join runs as r using (run_key)
left join references_summary as t using (run_key)
order by gap desc
