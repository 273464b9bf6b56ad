-- Does reward follow a power law in compute? Per run: the exponent b of reward ∝ compute^b with its 95% interval
-- and R², on the run's own compute measure (simulated years, else tokens; steps are not compute and are left out).
select
    r.name,
    f.compute_basis,
    f.performance_metric,
    f.n_points,
    round(f.exponent, 3) as exponent,
    round(f.exponent_ci_low, 3) as ci_low,
    round(f.exponent_ci_high, 3) as ci_high,
    round(f.r_squared, 3) as r_squared,
    f.missing_reason
from power_law_fit as f
join runs as r using (run_key)
where f.compute_basis <> 'steps'
order by f.compute_basis asc, f.exponent desc nulls last
