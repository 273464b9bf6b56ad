{% macro ensure_anomalies_table() %}
{#- The `anomalies` table the checks write after every build (pipeline/checks.py ANOMALIES_DDL, the same
    columns): created empty when a warehouse has never been checked, so `run_outcomes` can count a run's flags
    from the first build on. Run as an on-run-start hook; never replaces what the checks wrote. -#}
create table if not exists main.anomalies (
    run_key varchar, check_name varchar, severity varchar, step bigint, step_end bigint,
    metric varchar, value double, threshold double, message varchar,
    dataset varchar, started_at timestamptz, ended_at timestamptz
)
{%- endmacro %}
