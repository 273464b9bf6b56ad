{% macro t_critical_975(df) %}
{#- The 0.975 quantile of Student's t with `df` degrees of freedom (the critical value of a two-sided 95%
    interval), as a SQL expression; null when df < 1. Exact for df = 1 (12.7062) and df = 2 (4.3027); for
    df >= 3 the Cornish-Fisher expansion of the t quantile around z = 1.959964 (Abramowitz & Stegun 26.7.5,
    terms to 1/df^4): absolute error < 0.004 at df = 3 and < 0.0001 from df = 10. DuckDB has no t quantile
    function and the warehouse must not need an extension. `df` is evaluated several times: pass a column. -#}
case
    when {{ df }} = 1 then 12.7062
    when {{ df }} = 2 then 4.3027
    when {{ df }} >= 3 then
        1.959964
        + (pow(1.959964, 3) + 1.959964) / (4 * {{ df }})
        + (5 * pow(1.959964, 5) + 16 * pow(1.959964, 3) + 3 * 1.959964) / (96 * pow({{ df }}, 2))
        + (3 * pow(1.959964, 7) + 19 * pow(1.959964, 5) + 17 * pow(1.959964, 3) - 15 * 1.959964)
            / (384 * pow({{ df }}, 3))
        + (79 * pow(1.959964, 9) + 776 * pow(1.959964, 7) + 1482 * pow(1.959964, 5)
            - 1920 * pow(1.959964, 3) - 945 * 1.959964) / (92160 * pow({{ df }}, 4))
end
{%- endmacro %}
