{% macro welch_t(column, before, after) -%}
    {#- The difference of `column`'s mean where `after` holds minus its mean where `before` holds, in standard errors
        (Welch): an aggregate over one group's rows; null when neither part has a spread. -#}
    (avg({{ column }}) filter (where {{ after }}) - avg({{ column }}) filter (where {{ before }}))
        / nullif(sqrt(var_samp({{ column }}) filter (where {{ before }}) / count(*) filter (where {{ before }})
            + var_samp({{ column }}) filter (where {{ after }}) / count(*) filter (where {{ after }})), 0)
{%- endmacro %}
